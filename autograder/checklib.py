"""Helpers for hidden checks: validate what came back, compare, and explain failures.

Every failure message is written for the student who reads it in their feedback:
what was expected, what was found, and a hint where a common mistake fits.
"""

from __future__ import annotations

import torch


class CheckFailure(AssertionError):
    """A check that did not pass; its message is shown to the student."""


def expect_tensor(value, *, shape=None, dtype=None, name="your result") -> torch.Tensor:
    """``value`` must be a tensor of this shape and dtype with finite entries."""
    if not isinstance(value, torch.Tensor):
        raise CheckFailure(f"{name} should be a torch.Tensor, got {type(value).__name__}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckFailure(f"{name} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    if dtype is not None and value.dtype != dtype:
        raise CheckFailure(f"{name} has dtype {value.dtype}, expected {dtype}")
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = "NaN" if torch.isnan(value).any() else "inf"
        raise CheckFailure(f"{name} contains {bad} values")
    return value


def assert_close(
    actual, expected: torch.Tensor, *, atol=1e-5, rtol=1e-4, hint="", name="your result"
) -> None:
    """Compare a student's tensor with our reference, with a readable message."""
    # A correct answer keeps the dtype of its inputs (float64 in, float64 out).
    actual = expect_tensor(actual, shape=expected.shape, dtype=expected.dtype, name=name)
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        diff = (actual - expected).abs().max().item()
        message = f"{name} differs from the expected values (largest difference {diff:.3g})"
        raise CheckFailure(message + (f". Hint: {hint}" if hint else ""))


def assert_equal(actual, expected, *, hint="", name="your result") -> None:
    if isinstance(expected, torch.Tensor):
        actual = expect_tensor(actual, shape=expected.shape, dtype=expected.dtype, name=name)
        if not torch.equal(actual, expected):
            wrong = (actual != expected).sum().item()
            raise CheckFailure(
                f"{name}: {wrong} entries differ from the expected values"
                + (f". Hint: {hint}" if hint else "")
            )
    elif actual != expected:
        raise CheckFailure(
            f"{name} is {actual!r}, expected {expected!r}" + (f". Hint: {hint}" if hint else "")
        )
