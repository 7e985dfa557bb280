"""Multi-head latent attention (arXiv 2405.04434): absorption, caching, cache arithmetic."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from toolkit.flash import PeakMemoryCounter
from toolkit.mla import (
    LatentKVCache,
    MultiHeadLatentAttention,
    deepseek_v2_cache_reduction,
    mla_cache_bytes,
)
from toolkit.position import apply_rope

CFG = {"d_model": 48, "n_heads": 4, "d_head": 8, "d_latent": 16, "d_rope": 4}


def make(seed=0, **over):
    torch.manual_seed(seed)
    return MultiHeadLatentAttention(**{**CFG, **over}).double()


def x_(B=2, T=7, seed=1):
    return torch.randn(B, T, CFG["d_model"], generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


@pytest.mark.parametrize("d_q_latent", [None, 12])
@pytest.mark.parametrize("causal", [True, False])
def test_absorbed_path_equals_explicit(d_q_latent, causal):
    m = make(d_q_latent=d_q_latent)
    x = x_()
    torch.testing.assert_close(m(x, causal=causal, absorb=True), m(x, causal=causal))


def test_value_width_can_differ():
    m = make(d_value=6)
    x = x_()
    assert m.o_proj.in_features == 4 * 6
    torch.testing.assert_close(m(x, absorb=True), m(x))


def test_explicit_path_matches_formulas_and_torch_sdpa():
    m = make(d_q_latent=12)
    x = x_(B=1, T=5)
    B, T, H, d, dc, dr = 1, 5, 4, 8, 16, 4
    pos = torch.arange(T)
    c_q = m.q_a_layernorm(m.q_a_proj(x))  # c_Q = W_DQ x
    q = m.q_b_proj(c_q).view(B, T, H, d + dr).transpose(1, 2)
    q_c, q_r = q[..., :d], apply_rope(q[..., d:], pos)
    kv_a = m.kv_a_proj_with_mqa(x)
    c_kv = m.kv_a_layernorm(kv_a[..., :dc])  # c_KV = W_DKV x
    k_r = apply_rope(kv_a[..., dc:].unsqueeze(1), pos)  # one shared RoPE key
    W = m.kv_b_proj.weight.view(H, d + d, dc)
    k_c = torch.einsum("btc,hdc->bhtd", c_kv, W[:, :d])  # K^C = c W_UK
    v = torch.einsum("btc,hdc->bhtd", c_kv, W[:, d:])  # V = c W_UV
    qq = torch.cat([q_c, q_r], -1)
    kk = torch.cat([k_c, k_r.expand(B, H, T, dr)], -1)
    out = F.scaled_dot_product_attention(qq, kk, v, is_causal=True, scale=1 / math.sqrt(d + dr))
    ref = m.o_proj(out.transpose(1, 2).reshape(B, T, H * d))
    torch.testing.assert_close(m(x), ref)


@pytest.mark.parametrize("absorb", [False, True])
def test_cached_decoding_equals_full_forward(absorb):
    m = make(d_q_latent=12)
    x = x_(T=9)
    full = m(x)
    cache = LatentKVCache()
    steps = [m(x[:, :3], cache=cache, absorb=absorb)]
    steps += [m(x[:, t : t + 1], cache=cache, absorb=absorb) for t in range(3, 9)]
    torch.testing.assert_close(torch.cat(steps, 1), full)
    # the cache holds only d_c + d_R numbers per token and layer
    assert cache.latents(0).shape == (2, 1, 9, 16)
    assert cache.rope_keys(0).shape == (2, 1, 9, 4)
    assert cache.nbytes() == mla_cache_bytes(1, 16, 4, 9, batch=2, bytes_per_element=8)


def test_absorbed_decoding_never_builds_per_head_keys_or_values():
    m = make()
    x = x_(B=1, T=8)
    for absorb, expect_kv in ((False, True), (True, False)):
        cache = LatentKVCache()
        with torch.no_grad():
            m(x[:, :7], cache=cache)
            with PeakMemoryCounter() as counter:
                m(x[:, 7:], cache=cache, absorb=absorb)
        per_head_kv = (1, 4, 8, 8)  # (B, n_heads, T_k = 8, d_head)
        assert (per_head_kv in counter.shapes) == expect_kv


def test_causal_no_future_leak():
    m = make()
    x = x_(T=8)
    x2 = x.clone()
    x2[:, 5:] += 3.0
    torch.testing.assert_close(m(x2, absorb=True)[:, :5], m(x, absorb=True)[:, :5])


def test_cache_bytes_and_reported_reduction():
    assert mla_cache_bytes(60, 512, 64, 1) == 69_120  # DeepSeek-V2, fp16, per token
    assert mla_cache_bytes(60, 512, 64, 1000, batch=2, bytes_per_element=1) == 60 * 576 * 2000
    r = deepseek_v2_cache_reduction()
    assert r["deepseek_67b_bytes_per_token"] == 2 * 95 * 8 * 128 * 2
    assert r["deepseek_v2_bytes_per_token_6bit"] == 25_920
    assert round(r["reduction_vs_67b_6bit"], 3) == 0.933  # the paper's 93.3%
    assert round(r["reduction_vs_67b_fp16"], 3) == 0.822
    assert round(r["reduction_vs_mha_fp16"], 3) == 0.982


def test_bad_arguments():
    with pytest.raises(ValueError, match="d_rope"):
        MultiHeadLatentAttention(32, 4, 8, 16, 3)
    with pytest.raises(ValueError, match="d_latent"):
        MultiHeadLatentAttention(32, 4, 8, 0, 4)
    with pytest.raises(ValueError, match="bytes_per_element"):
        mla_cache_bytes(1, 1, 1, 1, bytes_per_element=-1)
