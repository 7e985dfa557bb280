"""The Triton FlashAttention backward kernels and the autograd Function, in the interpreter.

Same set-up as ``test_triton_kernel.py``: TRITON_INTERPRET is set above every import,
and if triton was imported earlier in the session (too early for the variable to
matter), :func:`test_kernel_tests_in_a_fresh_process` runs this file in a new process.
Run with ``TRITON_INTERPRET=0`` on a CUDA machine, the same tests check the compiled
kernels. Shapes stay tiny (N <= 48, d <= 32) so the interpreter finishes in seconds.

References: float64 autograd through ``torch.nn.functional.scaled_dot_product_attention``
(an explicit bottom-right causal mask, K/V repeated per query head for GQA, so that its
gradient sums over each group) and the PyTorch tiled backward of :mod:`toolkit.flash`.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first `import triton`


import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from triton_harness import run_file_in_fresh_process, run_without_triton  # noqa: E402

from toolkit.flash import flash_attention_backward, flash_attention_forward  # noqa: E402
from toolkit.kernels import (  # noqa: E402
    HAS_TRITON,
    flash_attention_backward_triton,
    flash_attention_backward_tuned,
    flash_attention_tuned,
    interpreter_active,
    triton_attention,
)


def test_imports_and_refuses_to_run_without_triton():
    printed = run_without_triton("""
        import torch
        from toolkit.kernels import (flash_attention_backward_triton, triton_attention,
                                     flash_attention_backward_tuned)
        q = torch.zeros(1, 1, 16, 16)
        lse = torch.zeros(1, 1, 16)
        for call in (lambda: flash_attention_backward_tuned(q, q, q, q, lse, q),
                     lambda: flash_attention_backward_triton(q, q, q, q, lse, q),
                     lambda: triton_attention(q, q, q)):
            try:
                call()
            except RuntimeError as exc:
                assert "not installed" in str(exc), exc
        print("ok")
    """)
    assert printed.strip() == "ok"


if not HAS_TRITON:
    pytest.skip("triton is not installed", allow_module_level=True)

COMPILED = torch.cuda.is_available() and not interpreter_active()
RUNNABLE = interpreter_active() or COMPILED
DEVICE = "cuda" if COMPILED else "cpu"
kernel_test = pytest.mark.skipif(
    not RUNNABLE, reason="triton was imported before TRITON_INTERPRET=1; see the fresh-process test"
)
_CHILD = "TOOLKIT_TRITON_BACKWARD_TEST_CHILD"


@pytest.mark.skipif(RUNNABLE or bool(os.environ.get(_CHILD)), reason="kernel tests ran in-process")
def test_kernel_tests_in_a_fresh_process():
    run_file_in_fresh_process(__file__, _CHILD)


@pytest.mark.skipif(not os.environ.get(_CHILD), reason="only in the fresh process")
def test_fresh_process_runs_the_kernel_tests():
    assert RUNNABLE


def rand(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=DEVICE)


def problem(B, H, H_kv, N_q, N_k, d, seed=0, dtype=torch.float32):
    """Random ``q, k, v, dout``."""
    q, dout = (rand(B, H, N_q, d, seed=seed + i, dtype=dtype) for i in (0, 1))
    k, v = (rand(B, H_kv, N_k, d, seed=seed + i, dtype=dtype) for i in (2, 3))
    return q, k, v, dout


def sdpa_grads(q, k, v, dout, causal, scale=None):
    """float64 gradients through SDPA: bottom-right causal mask, K/V repeated per query head."""
    q, k, v = (t.detach().double().cpu().requires_grad_() for t in (q, k, v))
    g = q.shape[1] // k.shape[1]
    mask = None
    if causal:
        N_q, N_k = q.shape[2], k.shape[2]
        mask = torch.arange(N_k)[None, :] <= torch.arange(N_q)[:, None] + (N_k - N_q)
    out = F.scaled_dot_product_attention(
        q, k.repeat_interleave(g, 1), v.repeat_interleave(g, 1), attn_mask=mask, scale=scale
    )
    out.nan_to_num(0.0).backward(dout.double().cpu())  # fully masked rows: SDPA gives NaN
    return q.grad, k.grad, v.grad


def assert_grads_close(got, want, atol, names=("dq", "dk", "dv"), ref_shapes=None):
    for name, g, w in zip(names, got, want):
        assert g.shape == w.shape, f"{name}: shape {tuple(g.shape)}, expected {tuple(w.shape)}"
        torch.testing.assert_close(g.double().cpu(), w.double().cpu(), atol=atol, rtol=atol,
                                   msg=lambda m, name=name: f"{name}: {m}")


SHAPES = [  # (B, H, H_kv, N_q, N_k, d, causal)
    (1, 2, 2, 40, 40, 16, False),  # MHA; the last tiles stick out
    (2, 4, 2, 33, 33, 32, True),  # GQA, odd length
    (1, 4, 1, 20, 20, 16, True),  # MQA
    (1, 2, 2, 16, 48, 16, True),  # 16 new queries after 32 cached keys (bottom-right)
    (1, 2, 1, 40, 16, 16, True),  # N_q > N_k: the first 24 queries see no key
]


@kernel_test
@pytest.mark.parametrize("B,H,H_kv,N_q,N_k,d,causal", SHAPES)
def test_tuned_backward_matches_sdpa_and_the_tiled_reference(B, H, H_kv, N_q, N_k, d, causal):
    q, k, v, dout = problem(B, H, H_kv, N_q, N_k, d)
    out, lse = flash_attention_forward(q, k, v, causal)
    got = flash_attention_backward_tuned(q, k, v, out, lse, dout, causal, block_m=16, block_n=16)
    assert all(g.dtype == q.dtype and g.device == q.device for g in got)
    assert_grads_close(got, sdpa_grads(q, k, v, dout, causal), atol=2e-5)
    tiled = flash_attention_backward(q.cpu(), k.cpu(), v.cpu(), out.cpu(), lse.cpu(), dout.cpu(),
                                     causal, 8, 8)
    assert_grads_close(got, tiled, atol=2e-5)


@kernel_test
@pytest.mark.parametrize("causal", [False, True])
def test_autotuned_launch_reuses_the_chosen_config_bit_for_bit(monkeypatch, causal):
    """On a GPU the backward's kernels are autotuned. The first call of a key goes through
    ``triton.autotune``; later calls launch the configuration it chose directly, without
    its per-call look-up, and give the same gradients, bit for bit. A new key tunes again.

    Runs in the interpreter too: the wrapper is told the kernels are compiled, and the
    autotuner's timings are replaced by fixed numbers (a GPU is needed to time them)."""
    from toolkit.kernels import flash_backward_tuned as backward
    from toolkit.kernels.flash_backward_kernels import bwd_dkdv_tuned, bwd_dq_tuned

    check = backward._check_backward_args
    monkeypatch.setattr(backward, "_check_backward_args", lambda *args: check(*args) and False)
    monkeypatch.setattr(backward, "_CHOSEN", {})
    tunings = []
    # the "fastest" configurations: (32, 64) for dK/dV, (64, 32) for dQ (small, quick to
    # interpret), neither the first in its list
    for tuned, fastest in ((bwd_dkdv_tuned, 2), (bwd_dq_tuned, 1)):
        def bench(*args, config, _tuned=tuned, _fastest=fastest, **meta):
            return [0.0 if config is _tuned.configs[_fastest] else 1.0]

        def run(*args, _tuned=tuned, _run=tuned.run, **kwargs):
            tunings.append(_tuned)  # the autotuner was called
            return _run(*args, **kwargs)

        monkeypatch.setattr(tuned, "_bench", bench)
        monkeypatch.setattr(tuned, "run", run)
        monkeypatch.setattr(tuned, "cache", {})

    q, k, v, dout = problem(1, 4, 2, 40, 40, 16, seed=3)
    out, lse = flash_attention_tuned(q, k, v, causal=causal)
    first = flash_attention_backward_tuned(q, k, v, out, lse, dout, causal)
    assert tunings == [bwd_dkdv_tuned, bwd_dq_tuned]
    assert bwd_dkdv_tuned.best_config is bwd_dkdv_tuned.configs[2]
    assert bwd_dq_tuned.best_config is bwd_dq_tuned.configs[1]
    again = flash_attention_backward_tuned(q, k, v, out, lse, dout, causal)
    assert len(tunings) == 2, "the second call of a key must not go through the autotuner"
    for got, want in zip(again, first):
        assert torch.equal(got, want)
    assert_grads_close(again, sdpa_grads(q, k, v, dout, causal), atol=2e-5)

    q, k, v, dout = problem(1, 4, 2, 24, 24, 16, seed=4)  # a new key: N 24
    out, lse = flash_attention_tuned(q, k, v, causal=causal)
    got = flash_attention_backward_tuned(q, k, v, out, lse, dout, causal)
    assert len(tunings) == 4
    assert_grads_close(got, sdpa_grads(q, k, v, dout, causal), atol=2e-5)


@kernel_test
@pytest.mark.parametrize("B,H,H_kv,N_q,N_k,d,causal", SHAPES[1:])
def test_teaching_backward_matches_sdpa(B, H, H_kv, N_q, N_k, d, causal):
    q, k, v, dout = problem(B, H, H_kv, N_q, N_k, d, seed=10)
    out, lse = flash_attention_forward(q, k, v, causal)
    got = flash_attention_backward_triton(q, k, v, out, lse.float(), dout, causal, 16, 16)
    assert_grads_close(got, sdpa_grads(q, k, v, dout, causal), atol=2e-5)


@kernel_test
def test_rows_that_see_no_key_get_zero_gradient():
    q, k, v, dout = problem(1, 2, 2, 40, 16, 16, seed=20)  # queries 0..23 see nothing
    out, lse = flash_attention_forward(q, k, v, True)
    for dq, _, _ in (
        flash_attention_backward_tuned(q, k, v, out, lse, dout, True, block_m=16, block_n=16),
        flash_attention_backward_triton(q, k, v, out, lse.float(), dout, True, 16, 16),
    ):
        assert torch.equal(dq[:, :, :24].cpu(), torch.zeros(1, 2, 24, 16))
        # query 24 sees key 0 alone (softmax 1, gradient 0); the later ones see several
        assert torch.isfinite(dq).all() and dq[:, :, 25:].abs().amax(-1).gt(1e-4).all()


@kernel_test
def test_gqa_gradients_are_summed_over_each_group():
    # 4 query heads on 2 KV heads: dK of KV head 0 = dK through head 0 + dK through head 1.
    q, k, v, dout = problem(1, 4, 2, 16, 16, 16, seed=30)
    out, lse = flash_attention_forward(q, k, v, False)
    _, dk, dv = flash_attention_backward_tuned(q, k, v, out, lse, dout, block_m=16, block_n=16)
    k4, v4 = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    out4, lse4 = flash_attention_forward(q, k4, v4, False)
    _, dk4, dv4 = flash_attention_backward_tuned(q, k4, v4, out4, lse4, dout,
                                                  block_m=16, block_n=16)
    torch.testing.assert_close(dk, dk4.view(1, 2, 2, 16, 16).sum(2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(dv, dv4.view(1, 2, 2, 16, 16).sum(2), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(dk, dk4[:, ::2], atol=1e-3)  # one head alone is not the sum


@kernel_test
@pytest.mark.parametrize("causal", [False, True])
def test_autograd_function_matches_sdpa_with_enable_gqa(causal):
    q, k, v, dout = problem(2, 4, 2, 33, 33, 32, seed=40)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    out = triton_attention(q, k, v, causal)
    out.backward(dout)
    got = [t.grad for t in (q, k, v)]
    ref = [t.detach().clone().requires_grad_() for t in (q, k, v)]
    ref_out = F.scaled_dot_product_attention(*ref, is_causal=causal, enable_gqa=True)
    ref_out.backward(dout)
    torch.testing.assert_close(out, ref_out, atol=1e-5, rtol=1e-5)
    assert_grads_close(got, [t.grad for t in ref], atol=2e-5)


@kernel_test
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_autograd_backward_equals_the_checked_backward_bit_for_bit(dtype):
    """The Function's backward skips the argument checks (its forward made the checks and
    the tensors): same gradients, bit for bit, as the public backward; also for a
    ``dout`` with zero strides (``out.sum().backward()``)."""
    B, H, H_kv, N, d = 2, 4, 2, 33, 24
    qkv = rand(B, N, H + 2 * H_kv, d, seed=5, dtype=dtype)
    q, k, v = (t.transpose(1, 2) for t in qkv.split((H, H_kv, H_kv), dim=2))
    for dout in (rand(B, H, N, d, seed=6, dtype=dtype), None):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        out = triton_attention(*leaves, causal=True)
        (out.sum() if dout is None else out).backward(None if dout is None else dout)
        want_out, lse = flash_attention_tuned(q, k, v, causal=True)
        assert torch.equal(out.detach(), want_out)
        grad = torch.ones_like(want_out) if dout is None else dout
        want = flash_attention_backward_tuned(q, k, v, want_out, lse, grad, True)
        for leaf, w in zip(leaves, want):
            assert torch.equal(leaf.grad, w)


@kernel_test
def test_fp16_default_blocks_strided_inputs_and_scale():
    # (B, N, H, d) memory viewed as (B, H, N, d), a padded head size (24 -> 32), fp16
    q = rand(1, 37, 4, 24, seed=50, dtype=torch.float16).transpose(1, 2)
    k, v = (rand(1, 37, 2, 24, seed=s, dtype=torch.float16).transpose(1, 2) for s in (51, 52))
    dout = rand(1, 37, 4, 24, seed=53, dtype=torch.float16).transpose(1, 2)
    assert not q.is_contiguous()
    out, lse = flash_attention_forward(q, k, v, True, scale=0.3)
    got = flash_attention_backward_tuned(q, k, v, out, lse, dout, True, scale=0.3)
    assert all(g.dtype == torch.float16 for g in got)
    assert_grads_close(got, sdpa_grads(q, k, v, dout, True, scale=0.3), atol=4e-3)


@kernel_test
def test_gradcheck_float64():
    # The Triton forward takes fp16/fp32 only, so the float64 Jacobian check runs the
    # PyTorch tiled forward with the Triton backward: it checks the backward kernel
    # against finite differences of exact attention.
    if not interpreter_active():
        pytest.skip("float64 runs in the interpreter only")

    class TiledForwardTritonBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, q, k, v):
            out, lse = flash_attention_forward(q, k, v, True, 16, 16)
            ctx.save_for_backward(q, k, v, out, lse)
            return out

        @staticmethod
        def backward(ctx, dout):
            q, k, v, out, lse = ctx.saved_tensors
            return flash_attention_backward_tuned(q, k, v, out, lse, dout, True,
                                                   block_m=16, block_n=16)

    q, k, v = (rand(*shape, seed=s, dtype=torch.float64).requires_grad_()
               for s, shape in ((60, (1, 2, 20, 16)), (61, (1, 1, 20, 16)), (62, (1, 1, 20, 16))))
    assert torch.autograd.gradcheck(TiledForwardTritonBackward.apply, (q, k, v), fast_mode=True)


@kernel_test
def test_bad_arguments_are_named():
    q, k, v, dout = problem(1, 2, 2, 16, 16, 16)
    out, lse = flash_attention_forward(q, k, v)
    with pytest.raises(ValueError, match="lse"):
        flash_attention_backward_tuned(q, k, v, out, lse[..., :8], dout)
    with pytest.raises(ValueError, match="dout"):
        flash_attention_backward_tuned(q, k, v, out, lse, dout[:, :, :8])
    with pytest.raises(ValueError, match="dtype"):
        flash_attention_backward_tuned(q, k, v, out, lse, dout.half())
    with pytest.raises(ValueError, match="block_m"):
        flash_attention_backward_tuned(q, k, v, out, lse, dout, block_m=24)
    with pytest.raises(ValueError, match="lse"):
        flash_attention_backward_triton(q, k, v, out, lse.double(), dout)
    with pytest.raises(ValueError, match="out"):
        flash_attention_backward_triton(q, k, v, out.half(), lse, dout)
    if interpreter_active():
        b = q.bfloat16()
        with pytest.raises(ValueError, match="bfloat16"):
            flash_attention_backward_tuned(b, b, b, b, lse, b)
