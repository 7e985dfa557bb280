"""Hidden checks for Exercise 4a: ALiBi slopes for any number of heads.

References from :func:`toolkit.position.alibi_slopes` (which matches the paper's code and
Hugging Face BLOOM), then the structure of the rule for non-powers of two.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import alibi_slopes, geometric_slopes

pytestmark = pytest.mark.grade_cell("test_alibi_slopes")

NON_POW2 = "ALiBi slopes wrong for non-power-of-two heads"


def _slopes(submission, n) -> torch.Tensor:
    out = submission.call("alibi_slopes", n)
    return expect_tensor(out, shape=(n,), name=f"alibi_slopes({n})")


def test_powers_of_two(submission):
    """n a power of two: m_h = 2^(-8h/n), h = 1..n."""
    for n in (1, 2, 4, 8, 16, 32, 64):
        assert_close(_slopes(submission, n), alibi_slopes(n), atol=0, rtol=1e-6,
                     name=f"alibi_slopes({n})", hint="m_h = 2 ** (-8 h / n) for h = 1 .. n")


@pytest.mark.weight(3)
@pytest.mark.pitfall(NON_POW2)
def test_non_powers_of_two(submission):
    """n not a power of two: the n' slopes, then every other slope of the 2n' sequence."""
    for n in (3, 5, 6, 12, 20, 24, 40, 112):
        out = _slopes(submission, n)
        if torch.allclose(out.double(), torch.tensor(geometric_slopes(n), dtype=torch.float64),
                          rtol=1e-6):
            raise CheckFailure(
                f"alibi_slopes({n}) uses 2^(-8h/{n}) for every head: that rule holds only when n "
                "is a power of two. Otherwise take the slopes for n' (the largest power of two "
                "below n), then the 1st, 3rd, 5th, ... slopes of the 2n' sequence until there "
                "are n")
        assert_close(out, alibi_slopes(n), atol=0, rtol=1e-6, name=f"alibi_slopes({n})",
                     hint=f"n' = {2 ** (n.bit_length() - 1)}: its {2 ** (n.bit_length() - 1)} "
                          f"slopes, then geometric_slopes({2 ** n.bit_length()})[0::2] cut to "
                          f"{n - 2 ** (n.bit_length() - 1)}")


@pytest.mark.pitfall(NON_POW2)
def test_non_power_structure(submission):
    """For n = 12: the first 8 slopes are those of 8 heads, the rest lie between them."""
    out = _slopes(submission, 12).double()
    eight = torch.tensor([2.0 ** -h for h in range(1, 9)], dtype=torch.float64)
    if not torch.allclose(out[:8], eight, rtol=1e-6):
        raise CheckFailure("alibi_slopes(12) should start with the 8 slopes for 8 heads, "
                           "1/2, 1/4, ..., 1/256")
    extra = torch.tensor([2.0 ** -(h - 0.5) for h in range(1, 5)], dtype=torch.float64)
    assert_close(out[8:], extra, atol=0, rtol=1e-6, name="alibi_slopes(12)[8:]",
                 hint="the extra slopes are the odd-numbered ones of the 16-head sequence: "
                      "2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5")
    if len(set(out.tolist())) != 12 or not bool(((out > 0) & (out < 1)).all()):
        raise CheckFailure("the 12 slopes should be distinct numbers between 0 and 1")


def test_geometric_helper(submission):
    """geometric_slopes(n) is [2^(-8h/n) for h = 1..n]."""
    for n in (1, 4, 6):
        out = submission.call("geometric_slopes", n)
        if not isinstance(out, (list, tuple)) or len(out) != n:
            raise CheckFailure(f"geometric_slopes({n}) should be a list of {n} floats")
        assert_close(torch.tensor(out, dtype=torch.float64),
                     torch.tensor(geometric_slopes(n), dtype=torch.float64), atol=0, rtol=1e-12,
                     name=f"geometric_slopes({n})", hint="2 ** (-8 h / n) for h = 1 .. n")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_dtype_and_bad_count(submission):
    """The slopes are float32, and n_heads = 0 raises ValueError."""
    expect_tensor(submission.call("alibi_slopes", 6), shape=(6,), dtype=torch.float32,
                  name="alibi_slopes(6)")
    with expect_value_error("n_heads = 0", "n_heads = 0 was accepted: raise ValueError "
                            "(check_int)"):
        submission.call("alibi_slopes", 0)
