"""Helpers for hidden checks: validate what came back, compare, and explain failures.

Every failure message is written for the student who reads it in their feedback:
what was expected, what was found, and a hint where a common mistake fits.
"""

from __future__ import annotations

import contextlib
import math

import torch

from .trusted import ForbiddenShortcut, SubmissionError


class CheckFailure(AssertionError):
    """A check that did not pass; its message is shown to the student."""


@contextlib.contextmanager
def expect_value_error(what: str, accepted: str):
    """The block must make the student's code raise ValueError on a bad input.

    Args:
        what: the bad input, as the failure names it (``"n_heads = 0"``).
        accepted: the failure when the code ran without raising (say what to do).

    A stub's NotImplementedError goes on as it is: the student then reads that the function
    is not written yet, not that it "should raise ValueError".
    """
    try:
        yield
    except ForbiddenShortcut:
        raise
    except SubmissionError as exc:
        if "ValueError" in str(exc):
            return
        if str(exc).startswith("NotImplementedError"):
            raise
        raise CheckFailure(f"{what} should raise ValueError, got: {exc}") from None
    raise CheckFailure(accepted)


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
        message = (f"{name}: the values differ from the expected ones (largest difference "
                   f"{diff:.3g})")
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


def dense_attention(q, k, v, causal=False, scale=None, modulo=False, shift=None):
    """Plain float64 attention, the reference for tiled and fused kernels.

    Shapes: q (B, H, N_q, d), k (B, H_kv, N_k, d), v (B, H_kv, N_k, d_v), H a multiple
    of H_kv. Returns (out (B, H, N_q, d_v), lse (B, H, N_q), rowmax (B, H, N_q)); a row
    with every key masked gives out 0 and lse -inf. Two deliberate mistakes, so a check
    can recognise them and say what went wrong:

    * ``modulo``: query head h reads KV head h % H_kv (the right map is h // (H / H_kv));
    * ``shift``: the causal diagonal offset, j <= i + shift; the right one, and the
      default, is N_k - N_q (aligned bottom-right).
    """
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    if modulo:
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
    else:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale  # S = q k^T / sqrt(d)
    if causal:
        n_q, n_k = s.shape[-2:]
        shift = n_k - n_q if shift is None else shift
        future = torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + shift
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, torch.logsumexp(s, -1), s.amax(-1)

