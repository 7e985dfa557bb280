"""GQA / MQA and the KV cache: head mapping, agreement with PyTorch and HF, cache sizes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.attention import MultiHeadAttention, scaled_dot_product_attention
from toolkit.gqa import (
    DynamicKVCache,
    GroupedQueryAttention,
    grouped_attention,
    kv_cache_bytes,
    kv_head_for_query_head,
    repeat_kv,
)
from toolkit.masks import causal_mask
from toolkit.position import apply_rope


def rand(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# -- head mapping -----------------------------------------------------------------------


def test_query_head_uses_kv_head_by_integer_division():
    # 8 query heads, 2 KV heads: heads 0-3 -> 0, heads 4-7 -> 1 (modulo would alternate)
    assert [kv_head_for_query_head(h, 8, 2) for h in range(8)] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [kv_head_for_query_head(h, 8, 8) for h in range(8)] == list(range(8))  # MHA
    assert [kv_head_for_query_head(h, 8, 1) for h in range(8)] == [0] * 8  # MQA


def test_repeat_kv_is_repeat_interleave_not_tile():
    x = rand(2, 3, 5, 4)
    out = repeat_kv(x, 4)
    assert out.shape == (2, 12, 5, 4)
    assert torch.equal(out, torch.repeat_interleave(x, 4, dim=1))
    for h in range(12):
        assert torch.equal(out[:, h], x[:, h // 4])
    assert not torch.equal(out, x.repeat(1, 4, 1, 1))  # the modulo mapping
    assert repeat_kv(x, 1) is x


def test_repeat_kv_matches_hugging_face():
    hf = pytest.importorskip("transformers.models.llama.modeling_llama")
    x = rand(2, 2, 7, 8)
    assert torch.equal(repeat_kv(x, 3), hf.repeat_kv(x, 3))


@pytest.mark.parametrize("n_heads,n_kv", [(8, 2), (6, 3), (4, 1), (4, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_attention_matches_torch_enable_gqa(n_heads, n_kv, causal):
    q = rand(2, n_heads, 9, 16, seed=1)
    k, v = rand(2, n_kv, 9, 16, seed=2), rand(2, n_kv, 9, 16, seed=3)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)
    mask = causal_mask(9) if causal else None
    ours = grouped_attention(q, k, v, mask)
    expanded = scaled_dot_product_attention(q, repeat_kv(k, n_heads // n_kv),
                                            repeat_kv(v, n_heads // n_kv), mask)
    torch.testing.assert_close(ours, ref)
    torch.testing.assert_close(expanded, ref)


def test_modulo_mapping_gives_a_different_answer():
    q, k, v = rand(1, 4, 6, 8, seed=1), rand(1, 2, 6, 8, seed=2), rand(1, 2, 6, 8, seed=3)
    right = grouped_attention(q, k, v)
    wrong = scaled_dot_product_attention(q, k.repeat(1, 2, 1, 1), v.repeat(1, 2, 1, 1))
    assert not torch.allclose(right, wrong)


# -- the module ---------------------------------------------------------------------------


def test_module_shapes_for_mha_gqa_mqa():
    for n_kv in (8, 2, 1):
        m = GroupedQueryAttention(64, 8, n_kv)
        assert m.q_proj.weight.shape == (64, 64)
        assert m.k_proj.weight.shape == (n_kv * 8, 64)
        assert m.v_proj.weight.shape == (n_kv * 8, 64)
        assert m.o_proj.weight.shape == (64, 64)
        assert m(torch.randn(2, 5, 64)).shape == (2, 5, 64)


def test_module_matches_torch_sdpa_with_enable_gqa():
    torch.manual_seed(0)
    m = GroupedQueryAttention(32, 8, 2).double()
    x = rand(2, 7, 32)
    q = m.q_proj(x).view(2, 7, 8, 4).transpose(1, 2)
    k = m.k_proj(x).view(2, 7, 2, 4).transpose(1, 2)
    v = m.v_proj(x).view(2, 7, 2, 4).transpose(1, 2)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    ref = m.o_proj(ref.transpose(1, 2).reshape(2, 7, 32))
    torch.testing.assert_close(m(x), ref)


def test_n_kv_equal_n_heads_is_multi_head_attention():
    torch.manual_seed(0)
    gqa = GroupedQueryAttention(32, 4, 4).double()
    mha = MultiHeadAttention(32, 4, bias=False).double()
    for a, b in (("q_proj", "q_proj"), ("k_proj", "k_proj"), ("v_proj", "v_proj"),
                 ("o_proj", "out_proj")):
        getattr(mha, b).weight.data.copy_(getattr(gqa, a).weight.data)
    x = rand(2, 6, 32)
    torch.testing.assert_close(gqa(x), mha(x, mask=causal_mask(6)))
    torch.testing.assert_close(gqa(x, causal=False), mha(x))


@pytest.mark.parametrize("n_kv", [4, 2, 1])
@pytest.mark.parametrize("use_rope", [False, True])
def test_cached_decoding_equals_full_forward(n_kv, use_rope):
    torch.manual_seed(0)
    m = GroupedQueryAttention(32, 4, n_kv).double()
    rotary = (lambda t, pos: apply_rope(t, pos)) if use_rope else None
    x = rand(2, 9, 32)
    full = m(x, rotary=rotary)
    cache = DynamicKVCache()
    steps = [m(x[:, :4], cache=cache, rotary=rotary)]  # prompt, then one token at a time
    steps += [m(x[:, t : t + 1], cache=cache, rotary=rotary) for t in range(4, 9)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.length(0) == 9
    assert cache.get(0)[0].shape == (2, n_kv, 9, 8)  # only KV heads are cached


def test_cache_is_per_layer_and_sized_by_the_formula():
    cache = DynamicKVCache()
    k = torch.zeros(3, 2, 5, 16, dtype=torch.float16)
    cache.append(0, k, k)
    cache.append(1, k, k)
    cache.append(1, k[:, :, :1], k[:, :, :1])
    assert cache.n_layers == 2 and cache.length(0) == 5 and cache.length(1) == 6
    assert cache.length(7) == 0 and cache.get(7) is None
    expected = kv_cache_bytes(1, 2, 16, 5, batch=3) + kv_cache_bytes(1, 2, 16, 6, batch=3)
    assert cache.nbytes() == expected
    cache.reset()
    assert cache.n_layers == 0


def test_padding_mask_combines_with_causal():
    torch.manual_seed(0)
    m = GroupedQueryAttention(16, 4, 2).double()
    x = rand(1, 5, 16)
    keep = torch.tensor([True, True, True, False, False])[None, None, None, :]
    out = m(x, mask=keep)
    x2 = x.clone()
    x2[:, 3:] = 7.0  # padded tokens change; real query rows must not
    torch.testing.assert_close(m(x2, mask=keep)[:, :3], out[:, :3])


# -- cache arithmetic -------------------------------------------------------------------------


def test_kv_cache_bytes_llama2_70b():
    per_token = kv_cache_bytes(n_layers=80, n_kv_heads=8, d_head=128, n_tokens=1)
    assert per_token == 327_680  # 320 KiB per token in fp16
    assert kv_cache_bytes(80, 8, 128, 4096) == 1_342_177_280 == 1.25 * 2**30
    assert kv_cache_bytes(80, 64, 128, 4096) == 8 * kv_cache_bytes(80, 8, 128, 4096)  # MHA
    assert kv_cache_bytes(80, 8, 128, 4096, batch=4, bytes_per_element=4) == 4 * 2 * 1_342_177_280
    assert kv_cache_bytes(80, 8, 128, 1, bytes_per_element=0.75) == 122_880


def test_bad_head_counts_raise():
    with pytest.raises(ValueError, match="n_kv_heads"):
        GroupedQueryAttention(64, 8, 3)
    with pytest.raises(ValueError, match="d_model"):
        GroupedQueryAttention(30, 8, 2)
    with pytest.raises(ValueError, match="n_rep"):
        repeat_kv(torch.zeros(1, 2, 3, 4), 0)
    with pytest.raises(ValueError, match="n_layers"):
        kv_cache_bytes(-1, 8, 128, 10)
