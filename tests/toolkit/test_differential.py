"""Differential attention (arXiv 2410.05258)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from toolkit.differential import DifferentialAttention, differential_attention, lambda_init_fn


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_lambda_init_schedule():
    assert lambda_init_fn(1) == pytest.approx(0.2)
    assert lambda_init_fn(2) == pytest.approx(0.8 - 0.6 * math.exp(-0.3))
    assert lambda_init_fn(100) == pytest.approx(0.8, abs=1e-9)
    values = [lambda_init_fn(layer) for layer in range(1, 30)]
    assert values == sorted(values)
    with pytest.raises(ValueError, match="layer"):
        lambda_init_fn(0)


def test_lambda_reparameterisation():
    m = DifferentialAttention(32, 2, layer=3)
    with torch.no_grad():
        lam = m.lambda_full()
        expected = (torch.exp((m.lambda_q1 * m.lambda_k1).sum())
                    - torch.exp((m.lambda_q2 * m.lambda_k2).sum()) + lambda_init_fn(3))
    torch.testing.assert_close(lam, expected)
    with torch.no_grad():
        for p in (m.lambda_q1, m.lambda_k1, m.lambda_q2, m.lambda_k2):
            p.zero_()
    # exp(0) - exp(0) = 0 leaves lambda_init
    assert float(m.lambda_full().detach()) == pytest.approx(lambda_init_fn(3))


def test_functional_form():
    q1, k1, q2, k2, v = (rand(2, 3, 5, 4, seed=s) for s in range(5))
    out = differential_attention(q1, k1, q2, k2, v, 0.3)
    a1 = torch.softmax(q1 @ k1.transpose(-2, -1) / 2, -1)
    a2 = torch.softmax(q2 @ k2.transpose(-2, -1) / 2, -1)
    torch.testing.assert_close(out, (a1 - 0.3 * a2) @ v)
    # lambda = 0 is ordinary attention
    torch.testing.assert_close(differential_attention(q1, k1, q2, k2, v, 0.0),
                               F.scaled_dot_product_attention(q1, k1, v))
    # identical maps cancel to (1 - lambda) x ordinary attention: common-mode rejection
    torch.testing.assert_close(differential_attention(q1, k1, q1, k1, v, 0.3),
                               0.7 * F.scaled_dot_product_attention(q1, k1, v))


def reference_forward(m: DifferentialAttention, x, causal=True):
    """A straight re-derivation from the paper's description, sub-head 2h / 2h+1 pairing."""
    B, T, D = x.shape
    H, d = m.n_heads, m.d_head
    q = m.q_proj(x).view(B, T, 2 * H, d).transpose(1, 2)  # (B, 2H, T, d)
    k = m.k_proj(x).view(B, T, 2 * H, d).transpose(1, 2)
    v = m.v_proj(x).view(B, T, H, 2 * d).transpose(1, 2)  # (B, H, T, 2d)
    s = q @ k.transpose(-2, -1) / math.sqrt(d)
    if causal:
        s = s.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    a = torch.softmax(s, -1).view(B, H, 2, T, T)
    lam = (torch.exp(torch.sum(m.lambda_q1 * m.lambda_k1))
           - torch.exp(torch.sum(m.lambda_q2 * m.lambda_k2)) + m.lambda_init)
    o = (a[:, :, 0] - lam * a[:, :, 1]) @ v
    o = o * torch.rsqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * m.subln.weight
    o = o * (1 - m.lambda_init)
    return m.out_proj(o.transpose(1, 2).reshape(B, T, D))


@pytest.mark.parametrize("causal", [True, False])
def test_module_matches_reference(causal):
    torch.manual_seed(0)
    m = DifferentialAttention(32, 2, layer=4).double()
    with torch.no_grad():
        m.subln.weight.uniform_(0.5, 1.5)
    x = rand(2, 6, 32)
    torch.testing.assert_close(m(x, causal=causal), reference_forward(m, x, causal))


def test_module_shapes_causality_and_errors():
    torch.manual_seed(0)
    m = DifferentialAttention(32, 4, layer=2).double()
    assert m.d_head == 4 and m.subln.normalized_shape == (8,)
    x = rand(1, 8, 32)
    out = m(x)
    assert out.shape == (1, 8, 32)
    x2 = x.clone()
    x2[:, 6:] = -5.0
    torch.testing.assert_close(m(x2)[:, :6], out[:, :6])
    with pytest.raises(ValueError, match="d_model"):
        DifferentialAttention(30, 4)
    with pytest.raises(ValueError, match="x must be"):
        m(torch.zeros(1, 8, 16))
