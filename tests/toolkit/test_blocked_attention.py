"""The blocked causal attention (``attention_backend="blocked"``) computes the reference
attention: outputs and gradients equal the teaching path's in float64 for every head
grouping, block size, and query/key alignment; causality holds as a property; the
masks it caches survive ``torch.inference_mode``; bad shapes are named.
"""

from __future__ import annotations

import pytest
import torch

from toolkit.models.backends import reference_attention
from toolkit.models.blocked_attention import blocked_causal_attention, causal_block_mask


def projected(B: int, H: int, H_kv: int, T: int, T_k: int, D: int, seed: int = 0):
    """q ``(B, H, T, D)`` and k, v ``(B, H_kv, T_k, D)`` as the model hands them over:
    strided views of one joint projection ``(B, T_k, H + 2 H_kv, D)`` (q from its last
    ``T`` positions), plus that leaf tensor for the gradients."""
    g = torch.Generator().manual_seed(seed)
    joint = torch.randn(B, T_k, H + 2 * H_kv, D, generator=g, dtype=torch.float64)
    joint.requires_grad_(True)
    q, k, v = joint.split((H, H_kv, H_kv), dim=2)
    return joint, q[:, T_k - T:].transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)


def out_and_grad(attend, B, H, H_kv, T, T_k, D, seed=0):
    joint, q, k, v = projected(B, H, H_kv, T, T_k, D, seed)
    out = attend(q, k, v)
    d_out = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed + 7),
                        dtype=out.dtype)
    (grad,) = torch.autograd.grad(out, joint, d_out)
    return out.detach(), grad


@pytest.mark.parametrize("heads", [(4, 4), (4, 2), (6, 2), (4, 1)])
@pytest.mark.parametrize("T, T_k", [(1, 1), (5, 5), (33, 33), (70, 70), (1, 9), (7, 12), (40, 64)])
@pytest.mark.parametrize("block_size", [1, 5, 32, 100])
def test_equals_the_reference_attention_in_float64(heads, T, T_k, block_size):
    """Queries at the last T of T_k positions (bottom-right, as after a cache), blocks
    that do and do not divide T; outputs and the gradient of q, k and v together."""
    H, H_kv = heads
    args = (2, H, H_kv, T, T_k, 8)
    want_out, want_grad = out_and_grad(reference_attention, *args)
    got_out, got_grad = out_and_grad(lambda q, k, v: blocked_causal_attention(q, k, v, block_size),
                                     *args)
    torch.testing.assert_close(got_out, want_out, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(got_grad, want_grad, atol=1e-12, rtol=1e-12)


def test_float32_agrees_with_pytorch_at_the_capstone_shape():
    """B 4, 4 query heads on 2 KV heads, T 128, head size 32, four blocks."""
    g = torch.Generator().manual_seed(3)
    q = torch.randn(4, 4, 128, 32, generator=g, requires_grad=True)
    k, v = (torch.randn(4, 2, 128, 32, generator=g, requires_grad=True) for _ in range(2))
    d_out = torch.randn(4, 4, 128, 32, generator=g)
    got = blocked_causal_attention(q, k, v)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                            enable_gqa=True)
    got_grads = torch.autograd.grad(got, (q, k, v), d_out)
    want_grads = torch.autograd.grad(want, (q, k, v), d_out)
    torch.testing.assert_close(got, want, atol=2e-6, rtol=1e-5)
    for name, a, b in zip("qkv", got_grads, want_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4, msg=f"gradient of {name}")


def test_gradcheck():
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 4, 6, 4, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(1, 2, 9, 4, generator=g, dtype=torch.float64, requires_grad=True)
            for _ in range(2))
    assert torch.autograd.gradcheck(lambda q, k, v: blocked_causal_attention(q, k, v, 4),
                                    (q, k, v))


def test_a_query_never_sees_a_later_key():
    """Changing the keys and values after position p changes no output before p, and the
    gradient of an early output reaches no later key or value."""
    joint, q, k, v = projected(2, 4, 2, 20, 20, 8, seed=5)
    out = blocked_causal_attention(q, k, v, 6)
    k2, v2 = k.detach().clone(), v.detach().clone()
    k2[:, :, 11:] += 3.0
    v2[:, :, 11:] -= 2.0
    out2 = blocked_causal_attention(q.detach(), k2, v2, 6)
    torch.testing.assert_close(out2[:, :, :11], out.detach()[:, :, :11], atol=1e-12, rtol=0)
    assert not torch.allclose(out2[:, :, 11:], out.detach()[:, :, 11:])
    (grad,) = torch.autograd.grad(out[:, :, :11].sum(), joint)
    H = 4  # the joint tensor's heads: 4 of q, then 2 of k and 2 of v
    assert grad[:, 11:, H:].abs().max() == 0  # keys and values at positions 11..19
    assert grad[:, :11, H:].abs().max() > 0


def test_output_is_stored_as_the_output_projection_reads_it():
    """``(B, H, T, D)`` as a view of ``(B, T, H, D)`` memory: concatenating the heads for
    the output projection copies nothing."""
    _, q, k, v = projected(2, 4, 2, 10, 10, 8)
    out = blocked_causal_attention(q, k, v)
    assert out.shape == (2, 4, 10, 8)
    assert out.transpose(1, 2).is_contiguous()


def test_mask_made_in_inference_mode_serves_training():
    causal_block_mask.cache_clear()
    _, q, k, v = projected(1, 2, 1, 8, 8, 4)
    with torch.inference_mode():
        blocked_causal_attention(q.detach(), k.detach(), v.detach(), 4)
    out = blocked_causal_attention(q, k, v, 4)
    out.sum().backward()  # would fail on an inference tensor saved for backward


def test_block_mask_rows():
    """Two queries at positions 3 and 4, two query heads each, over five keys."""
    mask = causal_block_mask(2, 5, 3, 2, torch.device("cpu"), torch.float32)
    sees = (mask == 0).int().tolist()
    assert sees == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 0], [1, 1, 1, 1, 1], [1, 1, 1, 1, 1]]


@pytest.mark.parametrize("shapes, message", [
    (((1, 4, 3, 8), (1, 3, 3, 8), (1, 3, 3, 8)), "multiple of H_kv"),
    (((1, 4, 5, 8), (1, 2, 3, 8), (1, 2, 3, 8)), "T_k >= T"),
    (((4, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8)), r"q must be \(B, H, T, D\)"),
])
def test_bad_shapes_are_named(shapes, message):
    q, k, v = (torch.zeros(s) for s in shapes)
    with pytest.raises(ValueError, match=message):
        blocked_causal_attention(q, k, v)


def test_block_size_must_be_positive():
    _, q, k, v = projected(1, 2, 1, 4, 4, 4)
    with pytest.raises(ValueError, match="block_size"):
        blocked_causal_attention(q, k, v, 0)


def test_gradient_of_a_sum():
    """``out.sum().backward()`` hands the backward an expanded gradient (stride 0)."""
    want_joint, *want_qkv = projected(2, 4, 2, 40, 40, 8, seed=9)
    reference_attention(*want_qkv).sum().backward()
    got_joint, *got_qkv = projected(2, 4, 2, 40, 40, 8, seed=9)
    blocked_causal_attention(*got_qkv).sum().backward()
    torch.testing.assert_close(got_joint.grad, want_joint.grad, atol=1e-12, rtol=1e-12)
