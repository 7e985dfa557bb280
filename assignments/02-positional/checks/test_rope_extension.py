"""Hidden checks for Exercise 6c: the speeds and scaling of each extension method.

Values against :func:`toolkit.long_context.rope_extension` for other head sizes, bases
and lengths than the notebook's, then the properties: inside the training length every
method but the static ones configured for ``s = 1`` leaves RoPE alone, YaRN's scaling is
``0.1 ln s + 1``, and dynamic NTK uses its own configured factor.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.long_context import EXTENSIONS, rope_extension

pytestmark = pytest.mark.grade_cell("test_rope_extension")

NO_TEMPERATURE = "YaRN applied without its attention temperature"
DYNAMIC_STATIC = "Dynamic NTK given the static scale instead of its configured factor"

CASES = [(32, 10000.0, 100, 350), (64, 500000.0, 256, 2048), (16, 10000.0, 128, 1024),
         (16, 10000.0, 128, 90)]


def _student(submission, method, d, base, L, T, **kwargs):
    out = submission.call("rope_extension", method, d, base, L, T, **kwargs)
    name = f"rope_extension({method!r}, d_head={d}, base={base:g}, train_len={L}, seq_len={T})"
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure(f"{name} should return a tuple (inv_freq, attention_scaling)")
    inv, scaling = out
    expect_tensor(inv, shape=(d // 2,), dtype=torch.float32, name=f"{name}[0]")
    if isinstance(scaling, bool) or not isinstance(scaling, (int, float)):
        raise CheckFailure(f"{name}[1] should be a float, got {type(scaling).__name__}")
    return inv, float(scaling), name


@pytest.mark.weight(2)
@pytest.mark.pitfall(DYNAMIC_STATIC)
def test_every_method_matches_the_reference(submission):
    """Speeds and scaling of every method on hidden models and lengths."""
    for d, base, L, T in CASES:
        for method in EXTENSIONS:
            inv, scaling, name = _student(submission, method, d, base, L, T)
            ref_inv, ref_scaling = rope_extension(method, d, base, L, T)
            assert_close(inv, ref_inv, atol=0, rtol=1e-6, name=name,
                         hint="static methods use s = max(1, seq_len / train_len); dynamic NTK "
                              "uses seq_len, train_len and dynamic_factor")
            if not math.isclose(scaling, ref_scaling, rel_tol=1e-12):
                raise CheckFailure(f"{name}: attention_scaling should be {ref_scaling:.6g}, "
                                   f"got {scaling:.6g}")


@pytest.mark.weight(1)
@pytest.mark.pitfall(NO_TEMPERATURE)
def test_yarn_scaling_is_its_temperature(submission):
    """YaRN's scaling is 0.1 ln s + 1 for s = seq_len / train_len (1 inside the window)."""
    for L, T in ((100, 800), (64, 200), (64, 50)):
        _, scaling, name = _student(submission, "YaRN", 32, 10000.0, L, T)
        s = max(1.0, T / L)
        if not math.isclose(scaling, 0.1 * math.log(s) + 1, rel_tol=1e-12):
            raise CheckFailure(f"{name}: attention_scaling should be YaRN's 0.1 ln s + 1 = "
                               f"{0.1 * math.log(s) + 1:.6g} with s = {s:g}, got {scaling:.6g}")


@pytest.mark.weight(1)
@pytest.mark.pitfall(DYNAMIC_STATIC)
def test_dynamic_ntk_uses_its_factor(submission):
    """Dynamic NTK: plain inside the window, then the base for the configured factor."""
    for factor in (1.0, 2.0, 8.0):
        for L, T in ((128, 128), (128, 512), (50, 333)):
            inv, _, name = _student(submission, "dynamic NTK", 32, 10000.0, L, T,
                                    dynamic_factor=factor)
            g = factor * max(T, L) / L - (factor - 1)  # the slowest pair slows by g
            theta_last = 10000.0 ** (-30 / 32)
            if not math.isclose(theta_last / inv[-1].item(), g, rel_tol=1e-5):
                raise CheckFailure(
                    f"{name}, dynamic_factor={factor:g}: the slowest pair should be "
                    f"{g:.5g} times slower (HF's dynamic NTK with factor {factor:g}), got "
                    f"{theta_last / inv[-1].item():.5g}")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_unknown_method_is_rejected(submission):
    """A method that is not one of none, PI, NTK, dynamic NTK, YaRN raises ValueError."""
    with expect_value_error("method = 'LongRoPE'", "rope_extension accepted method='LongRoPE'"):
        submission.call("rope_extension", "LongRoPE", 32, 10000.0, 128, 512)
    with expect_value_error("seq_len = 0", "rope_extension accepted seq_len = 0"):
        submission.call("rope_extension", "PI", 32, 10000.0, 128, 0)
