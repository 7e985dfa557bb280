"""Hidden checks for Exercise 2: ``causal_mask``, ``padding_mask`` and ``combine_masks``.

Only the mask builders are exercised here, so a bug in the student's attention costs no
points in this grade cell. References come from :mod:`toolkit.masks`.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal, expect_tensor
from toolkit.masks import causal_mask, combine_masks, padding_mask

pytestmark = pytest.mark.grade_cell("test_masks")

AXIS = "Mask broadcast over the wrong axis (future leaks)"
INVERTED = "Inverted causal mask"
OR = "Masks combined with OR instead of AND"
PADDING = "Key padding mask on the wrong axis"


def _grid(m: torch.Tensor) -> str:
    return "\n".join(" ".join("1" if v else "0" for v in row) for row in m.tolist())


def _causal_hint(got: torch.Tensor, expected: torch.Tensor) -> str:
    if got.shape == expected.shape and torch.equal(got, expected.T):
        return "your mask is transposed: query i sees keys j >= i, the future"
    if got.shape == expected.shape and torch.equal(got, ~expected):
        return "your mask is inverted: True must mean *may attend*, for keys j <= i"
    return "query i may attend to key j iff j <= i + offset"


@pytest.mark.weight(2)
@pytest.mark.pitfall(AXIS)
def test_causal_mask_square(submission):
    """causal_mask(T) is the (T, T) bool lower-triangular matrix (query i sees keys j <= i)."""
    expected = causal_mask(6)
    got = expect_tensor(submission.call("causal_mask", 6), name="causal_mask(6)")
    if got.shape != expected.shape:
        raise CheckFailure(
            f"causal_mask(6) has shape {tuple(got.shape)}, expected (6, 6). Hint: compare a "
            "(T_q, 1) column of query indices with a (1, T_k) row of key indices")
    if got.dtype != torch.bool:
        raise CheckFailure(f"causal_mask(6) has dtype {got.dtype}, expected torch.bool "
                           "(True = may attend)")
    if not torch.equal(got, expected):
        raise CheckFailure(f"causal_mask(6) is\n{_grid(got)}\nwhich is wrong: "
                           + _causal_hint(got, expected))


@pytest.mark.pitfall(INVERTED)
def test_causal_mask_never_shows_the_future(submission):
    """Every query sees itself and its past, and no key after it."""
    got = expect_tensor(submission.call("causal_mask", 9), shape=(9, 9), dtype=torch.bool,
                        name="causal_mask(9)")
    if got.triu(diagonal=1).any():
        raise CheckFailure("causal_mask(9) lets a query see a later key (True above the "
                           "diagonal): the future leaks")
    if not got[torch.ones(9, 9, dtype=torch.bool).tril()].all():
        raise CheckFailure("causal_mask(9) hides a key j <= i from query i (False on or below "
                           "the diagonal): each query must see itself and every earlier key")


@pytest.mark.weight(2)
@pytest.mark.pitfall(AXIS)
def test_causal_mask_rectangular_and_offset(submission):
    """causal_mask with n_keys and a KV-cache offset: query i sees keys j <= i + offset."""
    cases = [  # (args, kwargs)
        ((3, 8), {"offset": 5}),  # 3 new queries after 5 cached tokens
        ((2,), {"offset": 4}),  # n_keys defaults to n_queries + offset
        ((3, 6), {}),  # more keys than queries, offset 0
        ((1,), {"offset": 7}),  # one generation step
    ]
    for args, kwargs in cases:
        expected = causal_mask(*args, **kwargs)
        label = f"causal_mask({', '.join(map(str, args))}" + "".join(
            f", {k}={v}" for k, v in kwargs.items()) + ")"
        got = expect_tensor(submission.call("causal_mask", *args, **kwargs), name=label)
        if got.shape != expected.shape:
            raise CheckFailure(f"{label} has shape {tuple(got.shape)}, expected "
                               f"{tuple(expected.shape)} (n_queries, n_keys); n_keys defaults "
                               "to n_queries + offset")
        assert_equal(got, expected, name=label, hint=_causal_hint(got, expected))


@pytest.mark.weight(2)
@pytest.mark.pitfall(PADDING)
def test_padding_mask(submission):
    """padding_mask(lengths) is (B, 1, 1, T_k) with True on the real tokens."""
    lengths = torch.tensor([3, 1, 5])
    expected = padding_mask(lengths)
    got = expect_tensor(submission.call("padding_mask", lengths), name="padding_mask([3, 1, 5])")
    if got.shape != expected.shape:
        raise CheckFailure(
            f"padding_mask([3, 1, 5]) has shape {tuple(got.shape)}, expected (B, 1, 1, T_k) = "
            f"{tuple(expected.shape)} so that it broadcasts over heads and queries")
    assert_equal(got, expected, name="padding_mask([3, 1, 5])",
                 hint="key j of sequence b is real (True) iff j < lengths[b]")
    lengths = torch.tensor([2, 4], dtype=torch.int32)
    got = submission.call("padding_mask", lengths, max_seq_len=6)
    assert_equal(got, padding_mask(lengths, 6), name="padding_mask([2, 4], max_seq_len=6)",
                 hint="max_seq_len sets T_k, even when it is larger than every length")


@pytest.mark.weight(2)
@pytest.mark.pitfall(OR)
def test_combine_causal_and_padding(submission):
    """combine_masks(causal (T, T), padding (B, 1, 1, T)) is their AND, shape (B, 1, T, T)."""
    causal, pad = causal_mask(5), padding_mask(torch.tensor([2, 5, 4]))
    expected = combine_masks(causal, pad)
    got = expect_tensor(submission.call("combine_masks", causal, pad),
                        name="combine_masks(causal, padding)")
    if got.shape != expected.shape:
        raise CheckFailure(f"combine_masks(causal (5, 5), padding (3, 1, 1, 5)) has shape "
                           f"{tuple(got.shape)}, expected {tuple(expected.shape)} (broadcast)")
    if got.shape == expected.shape and torch.equal(got, causal | pad):
        raise CheckFailure("your masks are combined with OR: a key must be visible only if "
                           "*every* mask allows it (AND)")
    assert_equal(got, expected, name="combine_masks(causal, padding)",
                 hint="a key is visible only if every mask allows it: logical AND")


def test_combine_skips_none(submission):
    """combine_masks ignores None arguments and returns None when given only None."""
    a = causal_mask(4)
    b = torch.tensor([True, False, True, True])
    got = submission.call("combine_masks", None, a, None, b)
    assert_equal(got, a & b, name="combine_masks(None, a, None, b)",
                 hint="skip the None arguments and AND the others")
    got = submission.call("combine_masks", a, None)
    assert_equal(got, a, name="combine_masks(a, None)")
    if submission.call("combine_masks", None, None) is not None:
        raise CheckFailure("combine_masks(None, None) should return None (no mask at all)")
