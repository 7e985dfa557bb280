"""Hidden checks for Exercise 3a: position interpolation and NTK-aware scaling."""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import ntk_base, rope_inv_freq, rope_inv_freq_linear, rope_inv_freq_ntk

pytestmark = pytest.mark.grade_cell("test_pi_ntk")

NTK = "NTK base scaled by s instead of s^(d/(d-2))"
CASES = [(64, 10000.0, 4.0), (128, 500000.0, 8.0), (32, 10000.0, 2.5), (8, 100.0, 1.0)]


def _call64(submission, fn: str, d, base, scale) -> torch.Tensor:
    code = (f"import torch\nresult = {fn}(inputs['d'], inputs['base'], inputs['scale'], "
            "dtype=torch.float64)\n")
    out = submission.run(code, d=d, base=base, scale=scale)
    return expect_tensor(out, shape=(d // 2,), dtype=torch.float64,
                         name=f"{fn}({d}, {base:g}, {scale:g}, dtype=torch.float64)")


def test_linear_values(submission):
    """Position interpolation divides every speed by s (float32 default, float64 on request)."""
    for d, base, scale in CASES:
        out = submission.call("rope_inv_freq_linear", d, base, scale)
        expected = rope_inv_freq_linear(d, base, scale)
        expect_tensor(out, shape=expected.shape, dtype=torch.float32,
                      name=f"rope_inv_freq_linear({d}, {base:g}, {scale:g})")
        assert_close(out, expected, atol=0, rtol=1e-6,
                     name=f"rope_inv_freq_linear({d}, {base:g}, {scale:g})",
                     hint="theta_i / s: positions divided by s")
    out = _call64(submission, "rope_inv_freq_linear", 48, 10000.0, 3.0)
    assert_close(out, rope_inv_freq_linear(48, 10000.0, 3.0, dtype=torch.float64), atol=0,
                 rtol=1e-12, name="rope_inv_freq_linear(48, scale=3, float64)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NTK)
def test_ntk_values(submission):
    """NTK-aware speeds: plain RoPE with base' = base * s^(d/(d-2))."""
    for d, base, scale in CASES:
        out = submission.call("rope_inv_freq_ntk", d, base, scale)
        expected = rope_inv_freq_ntk(d, base, scale)
        expect_tensor(out, shape=expected.shape, dtype=torch.float32,
                      name=f"rope_inv_freq_ntk({d}, {base:g}, {scale:g})")
        assert_close(out, expected, atol=0, rtol=1e-5,
                     name=f"rope_inv_freq_ntk({d}, {base:g}, {scale:g})",
                     hint="theta'_i = base'^(-2i/d) with base' = base * s ** (d / (d - 2))")
    got = submission.call("ntk_base", 64, 10000.0, 4.0)
    if not isinstance(got, (int, float)) or not math.isclose(got, ntk_base(64, 10000.0, 4.0),
                                                               rel_tol=1e-9):
        raise CheckFailure(f"ntk_base(64, 10000, 4) should be 10000 * 4^(64/62) = "
                           f"{ntk_base(64, 10000.0, 4.0):.6g}, got {got!r}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NTK)
def test_ntk_keeps_fastest_and_interpolates_slowest(submission):
    """NTK: pair 0 unchanged, the slowest pair divided by exactly s, the rest in between."""
    for d, scale in ((64, 4.0), (128, 16.0)):
        theta = rope_inv_freq(d, dtype=torch.float64)
        ntk = _call64(submission, "rope_inv_freq_ntk", d, 10000.0, scale)
        if not math.isclose(ntk[0].item(), theta[0].item(), rel_tol=1e-12):
            raise CheckFailure("NTK scaling must leave the fastest pair (theta_0 = 1) unchanged")
        if not math.isclose(ntk[-1].item(), theta[-1].item() / scale, rel_tol=1e-9):
            raise CheckFailure(
                f"d = {d}, s = {scale:g}: the slowest pair should become exactly theta/s "
                f"(ratio {1 / scale:.4g}), got ratio {(ntk[-1] / theta[-1]).item():.4g}. The "
                "exponent d/(d-2) in base * s^(d/(d-2)) is what makes it exact")
        ratio = ntk / theta
        if not bool((ratio[1:] <= ratio[:-1] + 1e-12).all()):
            raise CheckFailure("the slow-down factor theta'/theta should fall monotonically")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_bad_scale_is_rejected(submission):
    """A scale below 1 raises ValueError (for both functions)."""
    for fn in ("rope_inv_freq_linear", "rope_inv_freq_ntk"):
        with expect_value_error(f"{fn} with scale 0.5", f"{fn} accepted scale = 0.5: "
                                "s = L_new / L_train must be >= 1 (check_context_scale)"):
            submission.call(fn, 64, 10000.0, 0.5)
