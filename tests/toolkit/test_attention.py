"""Tests for toolkit.attention and toolkit.masks.

Two kinds of test: agreement with PyTorch's own implementations (to float tolerance),
and *properties* that any correct attention has (rows sum to 1, permutation
equivariance without positions, no leak from the future under a causal mask). The
last section writes the classic mistakes as small buggy variants and checks that the
same comparisons and properties reject each of them.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from toolkit.attention import (
    MultiHeadAttention,
    attention_weights,
    merge_heads,
    scaled_dot_product_attention,
    split_heads,
)
from toolkit.masks import (
    causal_mask,
    combine_masks,
    mask_to_additive,
    padding_mask,
    padding_mask_from_attention_mask,
)

TOL = {torch.float32: dict(atol=1e-5, rtol=1e-5), torch.float64: dict(atol=1e-12, rtol=1e-10)}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _qkv(batch, T_q, T_k, d_k, d_v, dtype=torch.float32, seed=0):
    g = _gen(seed)
    q = torch.randn(*batch, T_q, d_k, generator=g, dtype=dtype)
    k = torch.randn(*batch, T_k, d_k, generator=g, dtype=dtype)
    v = torch.randn(*batch, T_k, d_v, generator=g, dtype=dtype)
    return q, k, v


def _make_mask(kind: str, batch, T_q, T_k, dtype, seed=1):
    """A mask of the requested kind in which every query row keeps >= 1 key."""
    g = _gen(seed)
    if kind == "none":
        return None
    if kind == "causal":
        return causal_mask(T_q, T_k, offset=T_k - T_q)  # last T_q rows of a T_k x T_k mask
    if kind == "padding":
        B = batch[0] if batch else 1
        lengths = torch.randint(1, T_k + 1, (B,), generator=g)
        m = padding_mask(lengths, T_k)  # (B, 1, 1, T_k)
        return m.view(B, *[1] * (len(batch) - 1), 1, T_k) if batch else m[0, 0]
    if kind == "combined":
        pad = _make_mask("padding", batch, T_q, T_k, dtype, seed)
        return combine_masks(_make_mask("causal", batch, T_q, T_k, dtype), pad)
    if kind == "bool_random":
        m = torch.rand(*batch, T_q, T_k, generator=g) > 0.5
        m[..., 0] = True  # keep one visible key per row
        return m
    if kind == "float_bias":
        return torch.randn(*batch, T_q, T_k, generator=g, dtype=dtype)
    if kind == "float_inf":
        return mask_to_additive(_make_mask("combined", batch, T_q, T_k, dtype, seed), dtype)
    raise AssertionError(kind)


MASK_KINDS = ["none", "causal", "padding", "combined", "bool_random", "float_bias", "float_inf"]
SHAPES = [  # (batch dims, T_q, T_k, d_k, d_v)
    ((2, 3), 5, 5, 8, 8),
    ((1, 1), 1, 1, 4, 4),
    ((3, 2), 4, 7, 16, 6),
    ((2,), 6, 6, 5, 3),
    ((2, 2, 3), 3, 4, 8, 8),
]


# ---------------------------------------------------------------------------
# scaled_dot_product_attention vs torch
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", MASK_KINDS)
def test_sdpa_matches_torch(kind, shape, dtype):
    batch, T_q, T_k, d_k, d_v = shape
    q, k, v = _qkv(batch, T_q, T_k, d_k, d_v, dtype)
    mask = _make_mask(kind, batch, T_q, T_k, dtype)
    ours = scaled_dot_product_attention(q, k, v, mask)
    ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert ours.dtype == dtype and ours.shape == ref.shape
    torch.testing.assert_close(ours, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sdpa_is_causal_flag_and_custom_scale(dtype):
    q, k, v = _qkv((2, 3), 6, 6, 8, 8, dtype)
    ours = scaled_dot_product_attention(q, k, v, causal_mask(6))
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, is_causal=True),
                               **TOL[dtype])
    ours = scaled_dot_product_attention(q, k, v, scale=0.3)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, scale=0.3),
                               **TOL[dtype])


def test_weights_rows_sum_to_one_and_masked_entries_are_zero():
    q, k, _ = _qkv((2, 2), 5, 5, 8, 8)
    mask = _make_mask("combined", (2, 2), 5, 5, torch.float32)
    w = attention_weights(q, k, mask)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 2, 5))
    assert (w[~mask.expand_as(w)] == 0).all()


def test_fully_masked_row_is_zero_without_nan_and_has_finite_gradient():
    q, k, v = _qkv((1, 2), 3, 3, 4, 4, torch.float64)
    q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True)
    mask = torch.tensor([[False, False, False], [True, False, False], [True, True, True]])
    out = scaled_dot_product_attention(q, k, v, mask)
    assert not out.isnan().any()
    assert (out[..., 0, :] == 0).all()
    torch.testing.assert_close(out[..., 1:, :], F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask)[..., 1:, :])
    out.square().sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert (q.grad[..., 0, :] == 0).all()  # the empty row depends on nothing


def test_fully_masked_row_float_mask_gradient_is_finite():
    q, k, v = _qkv((1, 1), 2, 2, 4, 4, torch.float64)
    q.requires_grad_(True), k.requires_grad_(True)
    mask = mask_to_additive(torch.tensor([[False, False], [True, True]]), torch.float64)
    out = scaled_dot_product_attention(q, k, v, mask)
    assert not out.isnan().any()
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and torch.isfinite(k.grad).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_row_masked_with_finfo_min_is_what_the_addition_leaves(dtype):
    """The documented finite-mask convention: uniform where finfo.min swamps every score;
    in float16, uniform over the keys that scored above -16 (the others overflow)."""
    q = torch.tensor([[1.0, 0.0]], dtype=dtype)
    k = torch.tensor([[4.0, 0.0], [-40.0, 0.0], [1.0, 0.0], [-20.0, 0.0]], dtype=dtype)
    mask = torch.full((1, 4), torch.finfo(dtype).min, dtype=dtype)
    weights = attention_weights(q, k, mask).float()
    scores = (q.float() @ k.float().T) / 2**0.5  # 2.8, -28.3, 0.7, -14.1
    kept = torch.ones(4) if dtype != torch.float16 else (scores[0] > -16).float()
    torch.testing.assert_close(weights[0], kept / kept.sum(), atol=2e-3, rtol=0)


def test_integer_mask_is_refused_with_a_clear_error():
    q, k, v = _qkv((1, 1), 2, 2, 4, 4, torch.float32)
    with pytest.raises(ValueError, match="bool"):
        scaled_dot_product_attention(q, k, v, torch.ones(2, 2, dtype=torch.long))


def test_split_and_merge_heads_are_inverse_and_slice_features():
    x = torch.randn(2, 5, 12)
    heads = split_heads(x, 3)
    assert heads.shape == (2, 3, 5, 4)
    torch.testing.assert_close(heads[:, 1], x[..., 4:8])  # head 1 owns features 4..7
    torch.testing.assert_close(merge_heads(heads), x)


# ---------------------------------------------------------------------------
# MultiHeadAttention vs torch.nn.MultiheadAttention
# ---------------------------------------------------------------------------


def _torch_mha_from(ours: MultiHeadAttention) -> nn.MultiheadAttention:
    bias = ours.q_proj.bias is not None
    ref = nn.MultiheadAttention(ours.d_model, ours.n_heads, bias=bias, batch_first=True)
    ref = ref.to(ours.q_proj.weight.dtype)
    with torch.no_grad():
        ref.in_proj_weight.copy_(
            torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
        )
        ref.out_proj.weight.copy_(ours.out_proj.weight)
        if bias:
            ref.in_proj_bias.copy_(
                torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias])
            )
            ref.out_proj.bias.copy_(ours.out_proj.bias)
    return ref


def _mha(d_model=16, n_heads=4, bias=True, dtype=torch.float64, seed=0):
    torch.manual_seed(seed)
    return MultiHeadAttention(d_model, n_heads, bias=bias).to(dtype)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("n_heads", [1, 2, 4])
def test_mha_self_attention_matches_torch(bias, n_heads):
    ours = _mha(16, n_heads, bias)
    ref = _torch_mha_from(ours)
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    expected, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(ours(x), expected)


def test_mha_cross_attention_matches_torch():
    ours = _mha()
    ref = _torch_mha_from(ours)
    x_q = torch.randn(2, 4, 16, dtype=torch.float64)
    memory = torch.randn(2, 9, 16, dtype=torch.float64)
    expected, _ = ref(x_q, memory, memory, need_weights=False)
    torch.testing.assert_close(ours(x_q, memory), expected)


def test_mha_key_padding_and_causal_masks_match_torch():
    ours = _mha()
    ref = _torch_mha_from(ours)
    x = torch.randn(3, 6, 16, dtype=torch.float64)
    lengths = torch.tensor([6, 3, 1])
    keep = padding_mask(lengths, 6)  # (B, 1, 1, T): True = real token
    # torch's key_padding_mask and bool attn_mask use the OPPOSITE sense: True = ignore.
    expected, _ = ref(x, x, x, key_padding_mask=~keep[:, 0, 0], need_weights=False)
    torch.testing.assert_close(ours(x, mask=keep), expected)

    causal = causal_mask(6)
    expected, _ = ref(x, x, x, attn_mask=~causal, key_padding_mask=~keep[:, 0, 0],
                      need_weights=False)
    torch.testing.assert_close(ours(x, mask=combine_masks(causal, keep)), expected)


def test_mha_cross_attention_with_source_padding_matches_torch():
    ours = _mha()
    ref = _torch_mha_from(ours)
    x_q = torch.randn(2, 3, 16, dtype=torch.float64)
    memory = torch.randn(2, 5, 16, dtype=torch.float64)
    keep = padding_mask(torch.tensor([2, 5]), 5)
    expected, _ = ref(x_q, memory, memory, key_padding_mask=~keep[:, 0, 0], need_weights=False)
    torch.testing.assert_close(ours(x_q, memory, keep), expected)


def test_mha_rejects_indivisible_heads():
    with pytest.raises(ValueError, match="n_heads"):
        MultiHeadAttention(10, 3)


# ---------------------------------------------------------------------------
# Properties
# ---------------------------------------------------------------------------


def _sinusoid(T: int, d: int, dtype=torch.float64) -> torch.Tensor:
    pos = torch.arange(T, dtype=dtype)[:, None]
    freq = 10000 ** (-torch.arange(0, d, 2, dtype=dtype) / d)
    pe = torch.zeros(T, d, dtype=dtype)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(pos * freq), torch.cos(pos * freq)
    return pe


def _permutation_gap(mha: nn.Module, x: torch.Tensor, perm: torch.Tensor) -> float:
    """max |f(P x) - P f(x)|: zero iff f is equivariant for this permutation."""
    with torch.no_grad():
        return (mha(x[:, perm]) - mha(x)[:, perm]).abs().max().item()


def test_self_attention_without_positions_is_permutation_equivariant():
    mha = _mha()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    for seed in range(3):
        perm = torch.randperm(6, generator=_gen(seed))
        assert _permutation_gap(mha, x, perm) < 1e-12


def test_positions_break_permutation_equivariance():
    mha = _mha()
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    pe = _sinusoid(6, 16)
    perm = torch.tensor([5, 4, 3, 2, 1, 0])

    def with_positions(h):
        return mha(h + pe)

    assert _permutation_gap(with_positions, x, perm) > 1e-3


def _future_leak(attend, T: int = 6, d: int = 16, seed: int = 0) -> float:
    """Largest change at positions < t when only token t changes, over all t.

    ``attend(x, mask)`` is a (B, T, d) -> (B, T, d) attention under ``mask``.
    """
    g = _gen(seed)
    x = torch.randn(2, T, d, generator=g, dtype=torch.float64)
    mask = causal_mask(T)
    with torch.no_grad():
        base = attend(x, mask)
        worst = 0.0
        for t in range(1, T):
            x2 = x.clone()
            x2[:, t] += torch.randn(2, d, generator=g, dtype=torch.float64) * 5
            worst = max(worst, (attend(x2, mask)[:, :t] - base[:, :t]).abs().max().item())
    return worst


def test_causal_mask_leaks_nothing_exactly():
    mha = _mha()
    assert _future_leak(lambda x, m: mha(x, mask=m)) == 0.0
    # ...and the check has teeth: without the mask the future does leak.
    assert _future_leak(lambda x, m: mha(x)) > 1e-3


# ---------------------------------------------------------------------------
# masks
# ---------------------------------------------------------------------------


def test_causal_mask_definition():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    i, j = torch.meshgrid(torch.arange(4), torch.arange(4), indexing="ij")
    assert torch.equal(m, j <= i)
    assert torch.equal(m, torch.ones(4, 4, dtype=torch.bool).tril())


@pytest.mark.parametrize("past,new", [(0, 5), (3, 1), (3, 4), (7, 2)])
def test_causal_mask_with_offset_is_bottom_rows_of_full_mask(past, new):
    full = causal_mask(past + new)
    assert torch.equal(causal_mask(new, past + new, offset=past), full[past:])
    assert torch.equal(causal_mask(new, offset=past), full[past:])


def test_padding_mask_from_lengths():
    m = padding_mask(torch.tensor([3, 1, 4]))
    assert m.shape == (3, 1, 1, 4) and m.dtype == torch.bool
    expected = torch.tensor(
        [[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], dtype=torch.bool
    )
    assert torch.equal(m[:, 0, 0], expected)
    assert padding_mask(torch.tensor([2]), max_seq_len=5).shape == (1, 1, 1, 5)
    hf = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert torch.equal(padding_mask_from_attention_mask(hf), m)


def test_combine_masks_broadcasts_to_batch_1_T_T():
    causal = causal_mask(4)
    pad = padding_mask(torch.tensor([4, 2]))
    m = combine_masks(causal, None, pad)
    assert m.shape == (2, 1, 4, 4)
    for b in range(2):
        for i in range(4):
            for j in range(4):
                assert m[b, 0, i, j] == (bool(causal[i, j]) and bool(pad[b, 0, 0, j]))
    assert combine_masks(None, None) is None
    assert combine_masks(causal) is causal


def test_mask_to_additive_gives_same_attention():
    q, k, v = _qkv((2, 2), 4, 4, 8, 8)
    mask = combine_masks(causal_mask(4), padding_mask(torch.tensor([4, 2])))
    bias = mask_to_additive(mask)
    assert set(bias.unique().tolist()) == {0.0, float("-inf")}
    torch.testing.assert_close(
        scaled_dot_product_attention(q, k, v, bias), scaled_dot_product_attention(q, k, v, mask)
    )


# ---------------------------------------------------------------------------
# Named mistakes are caught
# ---------------------------------------------------------------------------


def _correct(q, k, v, mask):
    return scaled_dot_product_attention(q, k, v, mask)


def _bug_no_scale(q, k, v, mask):
    scores = q @ k.transpose(-2, -1)  # BUG: forgot / sqrt(d_k)
    return torch.softmax(scores.masked_fill(~mask, float("-inf")), -1) @ v


def _bug_mask_after_softmax(q, k, v, mask):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), -1)
    return (w * mask) @ v  # BUG: zeroes weights after the softmax; rows no longer sum to 1


def _bug_transposed_mask(q, k, v, mask):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    scores = scores.masked_fill(~mask.transpose(-2, -1), float("-inf"))  # BUG: wrong axis
    return torch.softmax(scores, -1) @ v


def _matches_torch_sdpa(attn) -> bool:
    """The comparison used above, as a yes/no check on any sdpa implementation."""
    for seed, (batch, T_q, T_k, d_k, d_v) in enumerate(SHAPES):
        q, k, v = _qkv(batch, T_q, T_k, d_k, d_v, torch.float64, seed)
        for kind in ("causal", "combined"):
            mask = _make_mask(kind, batch, T_q, T_k, torch.float64)
            ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            if not torch.allclose(attn(q, k, v, mask), ref, **TOL[torch.float64]):
                return False
    return True


def _leak_of(sdpa) -> float:
    mha = _mha()

    def attend(x, mask):
        q = split_heads(mha.q_proj(x), mha.n_heads)
        k = split_heads(mha.k_proj(x), mha.n_heads)
        v = split_heads(mha.v_proj(x), mha.n_heads)
        return mha.out_proj(merge_heads(sdpa(q, k, v, mask)))

    return _future_leak(attend)


def test_reference_passes_the_checks():
    assert _matches_torch_sdpa(_correct)
    assert _leak_of(_correct) == 0.0


@pytest.mark.parametrize(
    "bug,leaks",
    [(_bug_no_scale, False), (_bug_mask_after_softmax, True), (_bug_transposed_mask, True)],
    ids=["forgotten_scale", "mask_after_softmax", "transposed_mask"],
)
def test_named_sdpa_mistakes_are_caught(bug, leaks):
    assert not _matches_torch_sdpa(bug)
    # Masking after the softmax leaks too: the future's score still sits in the
    # normaliser. A transposed causal mask lets queries read only the future.
    assert (_leak_of(bug) > 1e-6) == leaks


class _WrongHeadSplitMHA(MultiHeadAttention):
    """BUG: ``view(B, h, T, d_k)`` straight from ``(B, T, d_model)``, no transpose.

    Each "head" then holds a block of *time steps* mixed with features, so heads
    see pieces of several tokens.
    """

    def forward(self, x_q, x_kv=None, mask=None):
        x_kv = x_q if x_kv is None else x_kv
        B, T_q, _ = x_q.shape
        T_k = x_kv.size(1)
        h, d_k = self.n_heads, self.d_k
        q = self.q_proj(x_q).view(B, h, T_q, d_k)
        k = self.k_proj(x_kv).view(B, h, T_k, d_k)
        v = self.v_proj(x_kv).view(B, h, T_k, d_k)
        out = scaled_dot_product_attention(q, k, v, mask)
        return self.out_proj(out.reshape(B, T_q, self.d_model))


def test_wrong_head_split_is_caught():
    ours = _mha()
    bad = _WrongHeadSplitMHA(16, 4).double()
    bad.load_state_dict(ours.state_dict())
    ref = _torch_mha_from(ours)
    x = torch.randn(2, 6, 16, dtype=torch.float64)
    expected, _ = ref(x, x, x, need_weights=False)
    torch.testing.assert_close(ours(x), expected)
    assert not torch.allclose(bad(x), expected, atol=1e-6)
    # It also breaks permutation equivariance: tokens are mixed before attention runs.
    perm = torch.tensor([1, 0, 3, 2, 5, 4])
    assert _permutation_gap(bad, x, perm) > 1e-6
    # But a causality test alone would NOT catch it: the bad view maps pseudo-row r to
    # token floor((head * T * d_k + r * d_k) / d_model), which never decreases with r,
    # so a causal mask on pseudo-rows is still causal on tokens. Compare with a reference.
    assert _future_leak(lambda x, m: bad(x, mask=m)) == 0.0
