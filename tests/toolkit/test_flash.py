"""FlashAttention in PyTorch: online softmax, exact forward/backward, causal, GQA, memory."""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.attention import scaled_dot_product_attention
from toolkit.flash import (
    FlashAttention,
    PeakMemoryCounter,
    attention_forward_flops,
    attention_memory_bytes,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    online_softmax,
    online_softmax_trace,
)
from toolkit.gqa import repeat_kv
from toolkit.masks import causal_mask


def rand(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def reference(q, k, v, causal=False):
    """Plain attention with the KV heads expanded; bottom-right causal alignment."""
    g = q.shape[1] // k.shape[1]
    k, v = repeat_kv(k, g), repeat_kv(v, g)
    N_q, N_k = q.shape[2], k.shape[2]
    mask = causal_mask(N_q, N_k, offset=N_k - N_q) if causal else None
    return scaled_dot_product_attention(q, k, v, mask)


def reference_lse(q, k, causal=False):
    g = q.shape[1] // k.shape[1]
    k = repeat_kv(k, g)
    s = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if causal:
        N_q, N_k = s.shape[-2:]
        s = s.masked_fill(~causal_mask(N_q, N_k, offset=N_k - N_q), float("-inf"))
    return torch.logsumexp(s, dim=-1)


# -- online softmax -----------------------------------------------------------------------


@pytest.mark.parametrize("block", [1, 3, 8, 50, 64])
def test_online_softmax_equals_softmax(block):
    x = rand(4, 50) * 30  # large values: exp would overflow without the running max
    torch.testing.assert_close(online_softmax(x, block), torch.softmax(x, -1))
    big = torch.tensor([[1000.0, 1001.0, 999.0, 1002.0]], dtype=torch.float64)
    torch.testing.assert_close(online_softmax(big, 2), torch.softmax(big, -1))


def test_trace_rescales_and_converges_to_exact_output():
    scores = torch.tensor([0.0, 1.0, -1.0, 5.0, 0.5, 2.0], dtype=torch.float64)
    values = rand(6, 3)
    trace = online_softmax_trace(scores, values, block=2)
    assert [t["start"] for t in trace] == [0, 2, 4]
    assert [t["m"] for t in trace] == [1.0, 5.0, 5.0]  # running max never decreases
    assert trace[1]["rescale"] == pytest.approx(math.exp(1.0 - 5.0))
    assert trace[2]["rescale"] == pytest.approx(1.0)
    torch.testing.assert_close(trace[-1]["out"], torch.softmax(scores, 0) @ values)
    assert trace[-1]["l"] == pytest.approx(float(torch.exp(scores - 5).sum()))


def test_skipping_the_accumulator_rescale_is_caught():
    """The classic bug: update m and l but forget to rescale the accumulator."""

    def buggy(scores, values, block):
        m, l, acc = -math.inf, 0.0, torch.zeros(values.shape[1], dtype=values.dtype)
        for s in range(0, len(scores), block):
            t = scores[s : s + block]
            m_new = max(m, float(t.max()))
            p = torch.exp(t - m_new)
            l = l * math.exp(m - m_new) + float(p.sum())
            acc = acc + p @ values[s : s + block]  # missing: acc * exp(m - m_new)
            m = m_new
        return acc / l

    scores, values = rand(12, seed=1), rand(12, 4, seed=2)
    scores[9] = 4.0  # a late new maximum
    exact = torch.softmax(scores, 0) @ values
    assert not torch.allclose(buggy(scores, values, 4), exact)
    torch.testing.assert_close(online_softmax_trace(scores, values, 4)[-1]["out"], exact)


# -- forward ------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("N,bq,bk", [(16, 4, 4), (37, 8, 16), (33, 64, 64), (20, 7, 3)])
def test_forward_matches_plain_attention(causal, N, bq, bk):
    q, k, v = rand(2, 3, N, 8, seed=1), rand(2, 3, N, 8, seed=2), rand(2, 3, N, 8, seed=3)
    out, lse = flash_attention_forward(q, k, v, causal, block_q=bq, block_k=bk)
    torch.testing.assert_close(out, reference(q, k, v, causal))
    torch.testing.assert_close(lse, reference_lse(q, k, causal))


@pytest.mark.parametrize("H,H_kv", [(4, 2), (6, 3), (4, 1)])
def test_gqa_forward_uses_integer_division(H, H_kv):
    q, k, v = rand(2, H, 19, 8, seed=1), rand(2, H_kv, 19, 8, seed=2), rand(2, H_kv, 19, 8, seed=3)
    out, _ = flash_attention_forward(q, k, v, causal=True, block_q=8, block_k=8)
    torch.testing.assert_close(out, reference(q, k, v, causal=True))
    if H_kv > 1:
        wrong = scaled_dot_product_attention(q, k.repeat(1, H // H_kv, 1, 1),
                                             v.repeat(1, H // H_kv, 1, 1), causal_mask(19))
        assert not torch.allclose(out, wrong)


def test_rectangular_causal_is_bottom_right_and_empty_rows_are_zero():
    # N_q < N_k: decoding the last queries against a longer cache
    q, k, v = rand(1, 2, 5, 8, seed=1), rand(1, 2, 12, 8, seed=2), rand(1, 2, 12, 8, seed=3)
    out, _ = flash_attention_forward(q, k, v, causal=True, block_q=2, block_k=4)
    torch.testing.assert_close(out, reference(q, k, v, causal=True))
    # N_q > N_k: the first N_q - N_k queries see no key at all
    q2 = rand(1, 2, 9, 8, seed=4)
    out2, lse2 = flash_attention_forward(q2, k[:, :, :6], v[:, :, :6], causal=True,
                                         block_q=4, block_k=4)
    assert torch.equal(out2[:, :, :3], torch.zeros_like(out2[:, :, :3]))
    assert torch.isneginf(lse2[:, :, :3]).all() and torch.isfinite(lse2[:, :, 3:]).all()
    torch.testing.assert_close(out2, reference(q2, k[:, :, :6], v[:, :, :6], causal=True))


def test_custom_scale_forward_and_backward():
    q = rand(1, 2, 10, 8, seed=1).requires_grad_()
    k, v = rand(1, 2, 10, 8, seed=2), rand(1, 2, 10, 8, seed=3)
    out = flash_attention(q, k, v, True, 4, 4, scale=0.3)
    ref = scaled_dot_product_attention(q, k, v, causal_mask(10), scale=0.3)
    torch.testing.assert_close(out, ref)
    g1, = torch.autograd.grad(out.sum(), q)
    g2, = torch.autograd.grad(ref.sum(), q)
    torch.testing.assert_close(g1, g2)


def test_low_precision_inputs_accumulate_in_fp32():
    q, k, v = (rand(1, 2, 40, 16, seed=s, dtype=torch.float16) for s in (1, 2, 3))
    out, lse = flash_attention_forward(q, k, v, block_q=16, block_k=16)
    assert out.dtype == torch.float16 and lse.dtype == torch.float32
    ref = reference(q.double(), k.double(), v.double())
    torch.testing.assert_close(out.double(), ref, atol=2e-3, rtol=2e-3)


# -- backward ------------------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("H,H_kv", [(2, 2), (4, 2), (3, 1)])
def test_gradients_match_autograd_of_plain_attention(causal, H, H_kv):
    q = rand(2, H, 21, 8, seed=1).requires_grad_()
    k = rand(2, H_kv, 21, 8, seed=2).requires_grad_()
    v = rand(2, H_kv, 21, 8, seed=3).requires_grad_()
    dout = rand(2, H, 21, 8, seed=4)
    got = torch.autograd.grad(flash_attention(q, k, v, causal, 8, 4), (q, k, v), dout)
    want = torch.autograd.grad(reference(q, k, v, causal), (q, k, v), dout)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)


def test_backward_function_directly_and_gradcheck():
    q, k, v = rand(1, 2, 6, 4, seed=1), rand(1, 1, 6, 4, seed=2), rand(1, 1, 6, 4, seed=3)
    out, lse = flash_attention_forward(q, k, v, causal=True, block_q=4, block_k=4)
    dq, dk, dv = flash_attention_backward(q, k, v, out, lse, torch.ones_like(out), causal=True,
                                          block_q=4, block_k=4)
    assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == v.shape
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    assert torch.autograd.gradcheck(
        lambda a, b, c: FlashAttention.apply(a, b, c, True, 4, 4, None), args
    )


def test_gradients_with_empty_rows_are_finite():
    q = rand(1, 1, 6, 4, seed=1).requires_grad_()
    k = rand(1, 1, 3, 4, seed=2).requires_grad_()
    v = rand(1, 1, 3, 4, seed=3).requires_grad_()
    flash_attention(q, k, v, causal=True, block_q=2, block_k=2).sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))
    assert torch.equal(q.grad[:, :, :3], torch.zeros_like(q.grad[:, :, :3]))


# -- memory and FLOPs -------------------------------------------------------------------------


def test_never_materialises_an_n_by_n_tensor():
    N, d, block = 128, 16, 32
    q, k, v = (rand(1, 2, N, d, seed=s, dtype=torch.float32).requires_grad_() for s in (1, 2, 3))
    with PeakMemoryCounter() as tiled:
        out = flash_attention(q, k, v, causal=True, block_q=block, block_k=block)
        out.sum().backward()
    biggest = max(math.prod(s) for s in tiled.shapes)
    assert biggest <= 2 * N * d  # q, k, v, out, their grads: O(N d)
    assert not any(len(s) >= 2 and s[-2:] == (N, N) for s in tiled.shapes)
    with PeakMemoryCounter() as naive:
        reference(q.detach(), k.detach(), v.detach(), causal=True)
    assert any(s[-2:] == (N, N) for s in naive.shapes)
    assert tiled.peak < naive.peak


def test_extra_memory_grows_linearly_for_tiled_and_quadratically_for_naive():
    def peak(N, tiled):
        q, k, v = (rand(1, 1, N, 16, seed=s, dtype=torch.float32) for s in (1, 2, 3))
        with PeakMemoryCounter() as c:
            if tiled:
                flash_attention_forward(q, k, v, block_q=32, block_k=32)
            else:
                scaled_dot_product_attention(q, k, v)
        return c.peak

    assert peak(512, False) / peak(256, False) > 3.5  # ~4x: N^2
    assert peak(512, True) / peak(256, True) < 2.5  # ~2x: N


def test_flops_formula_matches_torch_flop_counter():
    # Imported here, not at the top: flop_counter imports triton, which must not happen
    # before test_triton_kernel.py sets TRITON_INTERPRET=1 during collection.
    from torch.utils.flop_counter import FlopCounterMode

    B, H, N, d = 2, 3, 64, 16
    assert attention_forward_flops(B, H, N, d) == 4 * B * H * N * N * d
    assert attention_forward_flops(B, H, N, d, causal=True) == 2 * B * H * N * N * d
    q, k, v = (rand(B, H, N, d, seed=s, dtype=torch.float32) for s in (1, 2, 3))
    with FlopCounterMode(display=False) as counter:
        scaled_dot_product_attention(q, k, v)
    assert counter.get_total_flops() == attention_forward_flops(B, H, N, d)


def test_memory_model_numbers():
    assert attention_memory_bytes(4096, 128) == 4096**2 * 2 == 33_554_432  # 33.5 MB per head
    assert attention_memory_bytes(4096, 128, heads=32) == 32 * 33_554_432  # 1.07 GB
    small = attention_memory_bytes(4096, 128, tiled=True)
    assert small < attention_memory_bytes(4096, 128) / 100


def test_bad_inputs_raise_value_error():
    q, k = rand(1, 4, 8, 8), rand(1, 3, 8, 8)
    with pytest.raises(ValueError, match="multiple"):
        flash_attention_forward(q, k, k)
    with pytest.raises(ValueError, match="block"):
        flash_attention_forward(q, q, q, block_q=0)
    with pytest.raises(ValueError, match="q must be"):
        flash_attention_forward(q[0], q, q)
    with pytest.raises(ValueError, match="block"):
        online_softmax(q, 0)
