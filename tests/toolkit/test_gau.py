"""toolkit.gau: the gated attention unit, checked against the formula written token by token."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.gau import GatedAttentionUnit


def _gau(causal=False, seed=0):
    torch.manual_seed(seed)
    gau = GatedAttentionUnit(6, expansion_factor=1.5, d_qk=4, causal=causal).double()
    with torch.no_grad():
        for p in (gau.q_gamma, gau.q_beta, gau.k_gamma, gau.k_beta):
            p.copy_(torch.randn_like(p))
    return gau


def _by_hand(gau, x, causal, bias=None):
    T = x.size(1)
    u, v = F.silu(gau.u_proj(x)), F.silu(gau.v_proj(x))
    z = F.silu(gau.z_proj(x))
    q, k = z * gau.q_gamma + gau.q_beta, z * gau.k_gamma + gau.k_beta
    out = torch.zeros_like(u)
    for i in range(T):
        keys = range(i + 1) if causal else range(T)
        n = i + 1 if causal else T
        for j in keys:
            s = (q[:, i] * k[:, j]).sum(-1) / n + (0 if bias is None else bias[i, j])
            out[:, i] += F.relu(s).square()[:, None] * v[:, j]
    return gau.o_proj(u * out)


@pytest.mark.parametrize("causal", [False, True])
def test_matches_the_formula(causal):
    gau = _gau(causal)
    x = torch.randn(2, 5, 6, dtype=torch.float64)
    bias = torch.randn(5, 5, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(gau(x), _by_hand(gau, x, causal))
        torch.testing.assert_close(gau(x, attn_bias=bias), _by_hand(gau, x, causal, bias))


def test_causal_prefix_does_not_depend_on_what_follows():
    gau = _gau(causal=True, seed=1)
    x = torch.randn(1, 8, 6, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(gau(x)[:, :5], gau(x[:, :5]))


def test_queries_and_keys_have_their_own_scale_and_offset():
    gau = _gau(seed=2)
    assert {"q_gamma", "q_beta", "k_gamma", "k_beta"} <= set(dict(gau.named_parameters()))
    x = torch.randn(1, 4, 6, dtype=torch.float64)
    with torch.no_grad():
        base = gau(x)
        gau.k_beta.add_(0.5)  # move K only: the output must change
        assert not torch.allclose(gau(x), base)


def test_rejects_bad_input():
    with pytest.raises(ValueError, match="d_model"):
        GatedAttentionUnit(4)(torch.randn(1, 3, 5))
