"""Sparse attention patterns in toolkit.masks: exact cell counts and definitions."""

from __future__ import annotations

import pytest
import torch

from toolkit.masks import (
    band_mask,
    bigbird_mask,
    causal_mask,
    dilated_mask,
    global_token_mask,
    mask_cell_count,
    random_block_mask,
    receptive_field,
    sliding_window_mask,
)


def brute(n, rule):
    return torch.tensor([[rule(i, j) for j in range(n)] for i in range(n)])


# -- sliding window and band ------------------------------------------------------------


@pytest.mark.parametrize("n,w", [(8, 1), (8, 3), (10, 4), (5, 9)])
def test_sliding_window_matches_definition(n, w):
    assert torch.equal(sliding_window_mask(n, w), brute(n, lambda i, j: i - w < j <= i))


def test_sliding_window_counts():
    # row i sees min(i + 1, w) keys
    assert mask_cell_count(sliding_window_mask(8, 3)) == 1 + 2 + 3 * 6 == 21
    assert mask_cell_count(sliding_window_mask(8, 1)) == 8  # only itself
    assert torch.equal(sliding_window_mask(6, 6), causal_mask(6))  # w >= n: plain causal
    assert torch.equal(sliding_window_mask(6, 50), causal_mask(6))


def test_band_counts_are_exact():
    assert mask_cell_count(band_mask(8, 1)) == 22  # not 8 * 3 = 24: the edges lose a cell
    assert mask_cell_count(band_mask(8, 0)) == 8
    assert mask_cell_count(band_mask(8, 2)) == 8 + 2 * 7 + 2 * 6 == 34
    assert mask_cell_count(band_mask(8, 7)) == 64
    n, r = 13, 4
    assert mask_cell_count(band_mask(n, r)) == n + 2 * sum(n - k for k in range(1, r + 1))


def test_band_is_symmetric_and_matches_definition():
    m = band_mask(9, 2)
    assert torch.equal(m, m.T)
    assert torch.equal(m, brute(9, lambda i, j: abs(i - j) <= 2))


# -- dilated ----------------------------------------------------------------------------


def test_dilated_matches_definition():
    n, w, dil = 12, 3, 2
    causal = brute(n, lambda i, j: 0 <= i - j <= (w - 1) * dil and (i - j) % dil == 0)
    assert torch.equal(dilated_mask(n, w, dil), causal)
    both = brute(n, lambda i, j: abs(i - j) <= (w - 1) * dil and abs(i - j) % dil == 0)
    assert torch.equal(dilated_mask(n, w, dil, causal=False), both)


def test_dilation_one_reduces_to_window_and_band():
    assert torch.equal(dilated_mask(10, 4, 1), sliding_window_mask(10, 4))
    assert torch.equal(dilated_mask(10, 4, 1, causal=False), band_mask(10, 3))


def test_dilated_same_cells_longer_span():
    # Away from the start, every row has exactly `window` keys whatever the dilation.
    m = dilated_mask(40, 4, 3)
    assert (m[20:].sum(-1) == 4).all()
    assert m[39, 39 - 9] and not m[39, 39 - 12]  # span (w-1)*d = 9


# -- global and random ------------------------------------------------------------------


def test_global_tokens_attend_to_and_from_all():
    base = band_mask(8, 1)
    m = global_token_mask(8, [0, 5], base=base)
    assert m[0].all() and m[5].all() and m[:, 0].all() and m[:, 5].all()
    assert (m | ~base).all()  # base is kept
    # 22 band cells + rows/cols 0 and 5: exact count by inclusion-exclusion
    expected = brute(8, lambda i, j: abs(i - j) <= 1 or i in (0, 5) or j in (0, 5))
    assert torch.equal(m, expected)
    assert mask_cell_count(m) == int(expected.sum())
    assert torch.equal(global_token_mask(4, torch.tensor([1])), global_token_mask(4, [1]))


def test_global_token_mask_rejects_out_of_range():
    with pytest.raises(ValueError, match="global_indices"):
        global_token_mask(4, [4])
    with pytest.raises(ValueError, match="base"):
        global_token_mask(4, [0], base=torch.ones(3, 3, dtype=torch.bool))


def test_random_block_mask_reproducible_and_block_structured():
    a = random_block_mask(16, 4, 2, seed=3)
    b = random_block_mask(16, 4, 2, seed=3)
    g = torch.Generator().manual_seed(3)
    c = random_block_mask(16, 4, 2, generator=g)
    assert torch.equal(a, b) and torch.equal(a, c)
    assert not all(
        torch.equal(a, random_block_mask(16, 4, 2, seed=s)) for s in range(4, 10)
    )
    blocks = a.view(4, 4, 4, 4).permute(0, 2, 1, 3)  # (qb, kb, 4, 4)
    per_block = blocks.flatten(2)
    assert ((per_block.all(-1)) | (~per_block.any(-1))).all()  # whole blocks on or off
    assert (per_block.all(-1).sum(-1) == 2).all()  # exactly 2 key blocks per query block
    assert mask_cell_count(a) == 4 * 2 * 16


def test_random_block_mask_uneven_and_errors():
    m = random_block_mask(10, 4, 3, seed=0)  # blocks of 4, 4, 2: all three chosen
    assert m.all()
    with pytest.raises(ValueError, match="n_random_blocks"):
        random_block_mask(10, 4, 4)
    with pytest.raises(ValueError, match="block_size"):
        random_block_mask(10, 0, 1)


def test_bigbird_contains_its_parts():
    m = bigbird_mask(32, 4, window_blocks=3, global_blocks=1, random_blocks=1, seed=0)
    assert m[:4].all() and m[:, :4].all()  # global block
    block = torch.arange(32) // 4
    window = (block[:, None] - block[None, :]).abs() <= 1
    assert (m | ~window).all()


# -- counting and receptive field -------------------------------------------------------


def test_mask_cell_count_requires_bool():
    with pytest.raises(ValueError, match="mask"):
        mask_cell_count(torch.ones(3, 3))


def test_receptive_field_mistral():
    assert receptive_field(32, 4096) == 131_072
    assert receptive_field(32, 4096, exact=True) == 32 * 4095 + 1


@pytest.mark.parametrize("layers,w", [(1, 3), (2, 3), (3, 4), (4, 2)])
def test_receptive_field_exact_matches_mask_powers(layers, w):
    n = 40
    hop = sliding_window_mask(n, w).to(torch.int64)
    reach = torch.eye(n, dtype=torch.int64)
    for _ in range(layers):
        reach = ((hop @ reach) > 0).to(torch.int64)  # who can influence position i
    assert int(reach[-1].sum()) == receptive_field(layers, w, exact=True)


@pytest.mark.parametrize(
    "call,name",
    [
        (lambda: sliding_window_mask(8, 0), "window"),
        (lambda: band_mask(0, 1), "n"),
        (lambda: band_mask(8, -1), "radius"),
        (lambda: dilated_mask(8, 2, 0), "dilation"),
        (lambda: receptive_field(0, 4), "n_layers"),
    ],
)
def test_bad_arguments_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()
