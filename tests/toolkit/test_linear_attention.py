"""Linear attention (arXiv 2006.16236): the quadratic, prefix-sum and RNN forms agree."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.linear_attention import (
    causal_linear_attention,
    causal_linear_attention_recurrent,
    elu_feature_map,
    linear_attention,
    linear_attention_quadratic,
)


def qkv(B=2, H=3, T=11, d=5, d_v=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    mk = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)
    return mk(B, H, T, d), mk(B, H, T, d), mk(B, H, T, d_v)


def test_feature_map_is_elu_plus_one_and_positive():
    x = torch.linspace(-20, 20, 101, dtype=torch.float64)
    phi = elu_feature_map(x)
    assert (phi > 0).all()
    assert torch.allclose(phi, F.elu(x) + 1)
    assert torch.allclose(phi[x > 0], x[x > 0] + 1)


def test_noncausal_equals_quadratic_form():
    q, k, v = qkv()
    assert torch.allclose(linear_attention(q, k, v), linear_attention_quadratic(q, k, v))


def test_causal_prefix_sum_equals_recurrent_equals_masked_quadratic():
    q, k, v = qkv()
    a = causal_linear_attention(q, k, v)
    b = causal_linear_attention_recurrent(q, k, v)
    c = linear_attention_quadratic(q, k, v, causal=True)
    assert a.shape == (2, 3, 11, 7)
    torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(a, c, rtol=1e-12, atol=1e-12)


def test_causal_by_hand_formula():
    q, k, v = qkv(B=1, H=1, T=6, d=3, d_v=2)
    pq, pk = elu_feature_map(q[0, 0]), elu_feature_map(k[0, 0])
    out = causal_linear_attention(q, k, v)[0, 0]
    for i in range(6):
        w = pq[i] @ pk[: i + 1].T  # phi(q_i).phi(k_j), j <= i
        expected = (w @ v[0, 0, : i + 1]) / (w.sum() + 1e-6)
        torch.testing.assert_close(out[i], expected)


def test_causal_has_no_future_leak():
    q, k, v = qkv(T=9)
    out = causal_linear_attention(q, k, v)
    v2, k2 = v.clone(), k.clone()
    v2[:, :, 5:] += 100.0
    k2[:, :, 5:] -= 3.0
    out2 = causal_linear_attention(q, k2, v2)
    torch.testing.assert_close(out[:, :, :5], out2[:, :, :5])
    assert not torch.allclose(out[:, :, 5:], out2[:, :, 5:])


def test_last_causal_row_equals_noncausal():
    q, k, v = qkv()
    torch.testing.assert_close(
        causal_linear_attention(q, k, v)[:, :, -1], linear_attention(q, k, v)[:, :, -1]
    )


def test_recurrent_state_allows_chunked_decoding():
    q, k, v = qkv(T=10)
    full = causal_linear_attention_recurrent(q, k, v)
    out1, state = causal_linear_attention_recurrent(q[:, :, :4], k[:, :, :4], v[:, :, :4],
                                                    return_state=True)
    out2 = causal_linear_attention_recurrent(q[:, :, 4:], k[:, :, 4:], v[:, :, 4:], state=state)
    torch.testing.assert_close(torch.cat([out1, out2], dim=2), full)
    S, z = state
    assert S.shape == (2, 3, 5, 7) and z.shape == (2, 3, 5)  # constant size, whatever T


def test_softmax_is_the_exponential_kernel_special_case():
    # With phi replaced by an exponential kernel the quadratic form is softmax attention.
    q, k, v = qkv(T=5)
    A = torch.exp(q @ k.transpose(-2, -1) / 5**0.5)
    out = (A @ v) / A.sum(-1, keepdim=True)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_rejects_bad_shapes():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="q"):
        linear_attention(q[0], k, v)
    with pytest.raises(ValueError, match="k and v"):
        causal_linear_attention(q, k, v[:, :, :5])
    with pytest.raises(ValueError, match="T_q == T_k"):
        causal_linear_attention_recurrent(q[:, :, :3], k, v)
    with pytest.raises(ValueError, match="T_q == T_k"):
        linear_attention_quadratic(q[:, :, :3], k, v, causal=True)
    linear_attention_quadratic(q[:, :, :3], k, v)  # without a mask, any T_q
