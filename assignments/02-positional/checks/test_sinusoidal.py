"""Hidden checks for Exercise 1b: ``sinusoidal_encoding``.

Values against :func:`toolkit.position.sinusoidal_encoding`, then the properties that
make the table useful: a shift is a fixed rotation ``PE(p+k) = M_k PE(p)``, and
``PE(m) . PE(n)`` depends only on ``m - n``.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import sinusoidal_encoding, sinusoidal_shift_matrix

pytestmark = pytest.mark.grade_cell("test_sinusoidal")

DOUBLED = "Sinusoid exponent doubled (arange(0, d, 2) multiplied by 2 again)"
SWAPPED = "Sine and cosine columns swapped"
FLOAT32 = "Angles computed in float32 lose precision at large positions"


def _table64(submission, n, d, base=10000.0) -> torch.Tensor:
    code = ("import torch\n"
            "result = sinusoidal_encoding(inputs['n'], inputs['d'], inputs['base'], "
            "dtype=torch.float64)\n")
    out = submission.run(code, n=n, d=d, base=base)
    return expect_tensor(out, shape=(n, d), dtype=torch.float64,
                         name=f"sinusoidal_encoding({n}, {d}, {base:g}, dtype=torch.float64)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DOUBLED)
def test_table_matches_reference(submission):
    """The default float32 table (50 positions, d = 16) has the reference values."""
    out = submission.call("sinusoidal_encoding", 50, 16)
    expected = sinusoidal_encoding(50, 16)
    expect_tensor(out, shape=expected.shape, dtype=torch.float32,
                  name="sinusoidal_encoding(50, 16)")
    assert_close(out, expected, atol=1e-6, rtol=1e-5, name="sinusoidal_encoding(50, 16)",
                 hint="PE[p, 2i] = sin(p w_i), PE[p, 2i+1] = cos(p w_i), w_i = base^(-2i/d)")


@pytest.mark.pitfall(DOUBLED)
def test_other_base_and_width(submission):
    """Another base and width, in float64: exact to rounding."""
    out = _table64(submission, 33, 10, base=100.0)
    assert_close(out, sinusoidal_encoding(33, 10, 100.0, dtype=torch.float64), atol=1e-12,
                 rtol=1e-10, name="sinusoidal_encoding(33, 10, base=100)",
                 hint="use the given base in w_i = base^(-2i/d)")


@pytest.mark.pitfall(SWAPPED)
def test_sine_then_cosine_interleaved(submission):
    """Column 2i holds the sine and column 2i+1 the cosine of the same angle."""
    out = _table64(submission, 12, 8)
    p = torch.arange(12, dtype=torch.float64)
    if torch.allclose(out[:, 0], torch.cos(p), atol=1e-9):
        raise CheckFailure("column 0 holds cos(p): sine and cosine are swapped. Even columns "
                           "2i are sin(p w_i), odd columns 2i+1 are cos(p w_i)")
    if torch.allclose(out[:, 4], torch.cos(p), atol=1e-9):
        raise CheckFailure("the cosines sit in the second half of the columns: this table "
                           "interleaves them, sin in column 2i and cos in column 2i+1")
    assert_close(out[:, 0], torch.sin(p), atol=1e-12, name="column 0", hint="sin(p * w_0) = sin(p)")
    assert_close(out[:, 1], torch.cos(p), atol=1e-12, name="column 1", hint="cos(p * w_0) = cos(p)")


@pytest.mark.pitfall(FLOAT32)
def test_large_positions_are_precise(submission):
    """At positions up to 8191 the float64 table is exact (angles computed in float64)."""
    out = _table64(submission, 8192, 32)
    expected = sinusoidal_encoding(8192, 32, dtype=torch.float64)
    assert_close(out, expected, atol=1e-9, rtol=0, name="sinusoidal_encoding(8192, 32, float64)",
                 hint="compute positions, speeds and angles in float64 and cast only at the end; "
                      "float32 angles near p = 8000 are off by about 3e-4, and this check "
                      "asks for 1e-9")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DOUBLED)
def test_shift_is_a_fixed_rotation(submission):
    """PE(p + k) = M_k PE(p) for the reference rotation M_k, for every p."""
    d = 24
    pe = _table64(submission, 60, d)
    for k in (1, 7, 20):
        m_k = sinusoidal_shift_matrix(k, d, dtype=torch.float64)
        shifted = pe[:-k] @ m_k.T  # row p -> M_k PE(p)
        assert_close(shifted, pe[k:], atol=1e-9, name=f"M_{k} PE(p) against PE(p + {k})",
                     hint="each pair must be (sin(p w_i), cos(p w_i)) with w_i = base^(-2i/d), "
                          "so that a shift by k rotates it by k w_i")


@pytest.mark.property
def test_dot_products_depend_only_on_offset(submission):
    """PE(m) . PE(n) depends only on m - n (the Gram matrix is constant along diagonals)."""
    pe = _table64(submission, 48, 16)
    gram = pe @ pe.T
    for k in (0, 1, 3, 17):
        diagonal = torch.diagonal(gram, offset=k)
        if not torch.allclose(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-9):
            raise CheckFailure(f"PE(p) . PE(p + {k}) changes with p: each pair must hold the sine "
                               "and cosine of the *same* angle p w_i")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_dtype_and_empty_table(submission):
    """`dtype` is respected and n_positions = 0 gives an empty (0, d) table."""
    out = _table64(submission, 3, 8)
    expect_tensor(out, shape=(3, 8), dtype=torch.float64, name="sinusoidal_encoding(3, 8, float64)")
    empty = submission.call("sinusoidal_encoding", 0, 8)
    expect_tensor(empty, shape=(0, 8), name="sinusoidal_encoding(0, 8)")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_odd_width_is_rejected(submission):
    """An odd d_model raises ValueError."""
    with expect_value_error("d_model = 7", "d_model = 7 was accepted: features come in "
                            "(sin, cos) pairs, so raise ValueError for an odd width (check_even "
                            "does it)"):
        submission.call("sinusoidal_encoding", 4, 7)
