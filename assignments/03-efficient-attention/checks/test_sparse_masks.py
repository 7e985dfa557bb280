"""Hidden checks for Exercise 1: ``sliding_window_mask``, ``band_mask`` and ``dilated_mask``.

References come from :mod:`toolkit.masks`; cell counts are also checked against the
closed forms, so an off-by-one in the window shows up as a wrong count.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal, expect_tensor
from toolkit.masks import band_mask, causal_mask, dilated_mask, sliding_window_mask

pytestmark = pytest.mark.grade_cell("test_sparse_masks")

WINDOW = "Sliding window off by one (i - w <= j)"
BAND = "Band without the absolute value (one-sided)"
COUNT = "Cell count of a band or window taken as n x (keys per row)"


def _grid(m: torch.Tensor) -> str:
    return "\n".join(" ".join("1" if v else "0" for v in row) for row in m.tolist())


def _get_mask(submission, name, *args, **kwargs) -> torch.Tensor:
    label = f"{name}({', '.join(map(str, args))}" + "".join(
        f", {k}={v}" for k, v in kwargs.items()) + ")"
    got = expect_tensor(submission.call(name, *args, **kwargs), name=label)
    n = args[0]
    if tuple(got.shape) != (n, n):
        raise CheckFailure(f"{label} has shape {tuple(got.shape)}, expected ({n}, {n})")
    if got.dtype != torch.bool:
        raise CheckFailure(f"{label} has dtype {got.dtype}, expected torch.bool "
                           "(True = may attend)")
    return got


def _window_hint(got: torch.Tensor, n: int, w: int) -> str:
    if torch.equal(got, sliding_window_mask(n, w + 1)):
        return (f"each query sees w + 1 = {w + 1} keys: the window is i - w < j <= i (strict on "
                "the left), w keys counting the query itself")
    if w > 1 and torch.equal(got, sliding_window_mask(n, w - 1)):
        return f"each query sees only w - 1 = {w - 1} keys: the query itself counts as one of the w"
    if torch.equal(got, got.T) and not torch.equal(got, torch.eye(n, dtype=torch.bool)):
        return "the window must be causal: no key after the query (j <= i)"
    return "query i sees keys i - window < j <= i"


@pytest.mark.weight(2)
@pytest.mark.pitfall(WINDOW)
def test_sliding_window_values(submission):
    """sliding_window_mask(n, w): query i sees exactly the keys i - w < j <= i."""
    for n, w in ((7, 3), (10, 4), (6, 1), (5, 5), (4, 9)):
        got = _get_mask(submission, "sliding_window_mask", n, w)
        expected = sliding_window_mask(n, w)
        if not torch.equal(got, expected):
            raise CheckFailure(f"sliding_window_mask({n}, {w}) is\n{_grid(got)}\nwhich is wrong: "
                               + _window_hint(got, n, w))


@pytest.mark.pitfall(WINDOW)
def test_sliding_window_cell_count(submission):
    """A causal window has exactly sum_i min(i + 1, w) = n w - w (w - 1) / 2 cells (w <= n)."""
    for n, w in ((8, 3), (32, 4), (12, 12)):
        got = _get_mask(submission, "sliding_window_mask", n, w)
        expected = n * w - w * (w - 1) // 2
        count = int(got.sum())
        if count != expected:
            raise CheckFailure(
                f"sliding_window_mask({n}, {w}) has {count} True cells, expected {expected} "
                f"(query i sees min(i + 1, {w}) keys)")


def test_wide_window_is_causal(submission):
    """A window at least as long as the sequence is the plain causal mask."""
    got = _get_mask(submission, "sliding_window_mask", 6, 6)
    assert_equal(got, causal_mask(6), name="sliding_window_mask(6, 6)",
                 hint="with window >= n every query sees all keys j <= i")


@pytest.mark.weight(2)
@pytest.mark.pitfall(BAND)
def test_band_values(submission):
    """band_mask(n, r): query i sees the keys with |i - j| <= r."""
    for n, r in ((8, 1), (9, 3), (5, 0), (4, 6)):
        got = _get_mask(submission, "band_mask", n, r)
        expected = band_mask(n, r)
        if not torch.equal(got, expected):
            hint = "query i sees keys with |i - j| <= radius, on both sides"
            if not torch.equal(got, got.T):
                hint = ("your band is not symmetric: it must reach r keys to the left *and* to the "
                        "right (|i - j| <= r, with the absolute value)")
            raise CheckFailure(f"band_mask({n}, {r}) is\n{_grid(got)}\nwhich is wrong: {hint}")


@pytest.mark.pitfall(COUNT)
def test_band_cell_count(submission):
    """The band of radius r has n + 2 sum_{k<=r} (n - k) cells: 22 for n = 8, r = 1 (not 24)."""
    for n, r in ((8, 1), (16, 3)):
        got = _get_mask(submission, "band_mask", n, r)
        expected = n + 2 * sum(n - k for k in range(1, r + 1))
        count = int(got.sum())
        if count != expected:
            raise CheckFailure(f"band_mask({n}, {r}) has {count} True cells, expected {expected}: "
                               "the edge rows have fewer neighbours")


@pytest.mark.weight(2)
def test_dilated_values(submission):
    """dilated_mask: keys i - m*dilation (and i + m*dilation if not causal), m < window."""
    cases = (((9, 3, 2), {}), ((12, 3, 3), {}), ((10, 2, 4), {"causal": False}),
             ((11, 3, 2), {"causal": False}), ((7, 4, 1), {}))
    for args, kwargs in cases:
        got = _get_mask(submission, "dilated_mask", *args, **kwargs)
        expected = dilated_mask(*args, **kwargs)
        if not torch.equal(got, expected):
            n, w, dil = args
            raise CheckFailure(
                f"dilated_mask({n}, {w}, {dil}{', causal=False' if kwargs else ''}) is\n"
                f"{_grid(got)}\nwhich is wrong: query i sees keys i - m*{dil} for m = 0..{w - 1}"
                + (f" and i + m*{dil}" if kwargs else " (nothing after the query)"))


def test_dilation_one_is_the_plain_window(submission):
    """dilation = 1 gives the sliding window (causal) and the band of radius w - 1."""
    got = _get_mask(submission, "dilated_mask", 8, 3, 1)
    assert_equal(got, sliding_window_mask(8, 3), name="dilated_mask(8, 3, 1)")
    got = _get_mask(submission, "dilated_mask", 8, 3, 1, causal=False)
    assert_equal(got, band_mask(8, 2), name="dilated_mask(8, 3, 1, causal=False)")


@pytest.mark.structural
def test_masks_accept_device(submission):
    """The builders accept device=... and return bool masks there."""
    for name, args in (("sliding_window_mask", (5, 2)), ("band_mask", (5, 1)),
                       ("dilated_mask", (5, 2, 2))):
        got = expect_tensor(submission.call(name, *args, device="cpu"),
                            name=f"{name}(device='cpu')")
        if got.dtype != torch.bool or tuple(got.shape) != (5, 5):
            raise CheckFailure(f"{name}(..., device='cpu') should be a bool (5, 5) mask")
