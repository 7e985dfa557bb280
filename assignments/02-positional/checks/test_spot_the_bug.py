"""Hidden checks for Exercise 1a, spot the bug: ``sinusoid_frequencies``.

The circulating code steps ``dim = arange(0, d, 2)`` (already ``2i``) and then writes
``base ** (2 * dim / d)``, doubling the exponent. References come from
:mod:`toolkit.position` in this trusted process; everything is float64.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.position import sinusoid_frequencies

pytestmark = pytest.mark.grade_cell("test_spot_the_bug")

DOUBLED = "Sinusoid exponent doubled (arange(0, d, 2) multiplied by 2 again)"
CASES = [(64, 10000.0), (10, 100.0), (128, 500000.0), (6, 10000.0)]


def _doubled(d: int, base: float) -> torch.Tensor:
    dim = torch.arange(0, d, 2, dtype=torch.float64)
    return 1.0 / base ** (2 * dim / d)


def _frequencies(submission, d, base) -> torch.Tensor:
    out = submission.call("sinusoid_frequencies", d, base)
    return expect_tensor(out, shape=(d // 2,), name=f"sinusoid_frequencies({d}, {base:g})")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DOUBLED)
def test_frequencies_match_the_formula(submission):
    """w_i = base^(-2i/d) for several widths and bases."""
    for d, base in CASES:
        out = _frequencies(submission, d, base).to(torch.float64)
        if torch.allclose(out, _doubled(d, base), rtol=1e-9):
            raise CheckFailure(
                f"sinusoid_frequencies({d}, {base:g}) still has the blog's bug: the exponent is "
                "4i/d instead of 2i/d, because arange(0, d, 2) already steps through 2i. Divide "
                "that arange by d once, without multiplying it by 2 again")
        assert_close(out, sinusoid_frequencies(d, base), atol=0, rtol=1e-9,
                     name=f"sinusoid_frequencies({d}, {base:g})",
                     hint="w_i = base ** (-(2i) / d), i = 0 .. d/2 - 1")


@pytest.mark.pitfall(DOUBLED)
def test_slowest_wavelength(submission):
    """The slowest pair turns once every 2 pi base^((d-2)/d) tokens, the fastest every 2 pi."""
    d, base = 512, 10000.0
    w = _frequencies(submission, d, base).to(torch.float64)
    slowest = 2 * math.pi / w[-1].item()
    expected = 2 * math.pi * base ** ((d - 2) / d)
    if not math.isclose(slowest, expected, rel_tol=1e-9):
        raise CheckFailure(
            f"with d = {d} the slowest wavelength should be 2 pi base^((d-2)/d) = {expected:.5g} "
            f"tokens, got {slowest:.5g}")
    if not math.isclose(w[0].item(), 1.0, rel_tol=1e-12):
        raise CheckFailure(f"the first pair (i = 0) has speed base^0 = 1, got {w[0].item():.5g}")


def test_speeds_fall_geometrically(submission):
    """Neighbouring pairs differ by the constant factor base^(-2/d)."""
    d, base = 40, 1000.0
    w = _frequencies(submission, d, base).to(torch.float64)
    ratios = w[1:] / w[:-1]
    expected = torch.full_like(ratios, base ** (-2 / d))
    assert_close(ratios, expected, atol=0, rtol=1e-9, name="w_(i+1) / w_i",
                 hint="consecutive speeds should shrink by base^(-2/d) each")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_returns_float64(submission):
    """The speeds are a float64 tensor of shape (d/2,)."""
    out = submission.call("sinusoid_frequencies", 16, 10000.0)
    expect_tensor(out, shape=(8,), dtype=torch.float64, name="sinusoid_frequencies(16, 10000)")
