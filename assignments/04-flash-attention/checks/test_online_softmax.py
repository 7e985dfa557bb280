"""Hidden checks for Exercise 1: ``online_softmax``.

The reference is ``torch.softmax`` in this (trusted) process; in the student's kernel
every PyTorch softmax is switched off, so the answer has to be built from m and l.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor

pytestmark = pytest.mark.grade_cell("test_online_softmax")

RESCALE = "Online softmax without rescaling (running sum)"
OVERFLOW = "Online softmax without subtracting the running max (overflow)"


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _no_rescale(x: torch.Tensor, block: int) -> torch.Tensor:
    """What forgetting exp(m - m') gives: every block's terms summed relative to its own max."""
    m = torch.full(x.shape[:-1], float("-inf"), dtype=x.dtype)
    l = torch.zeros(x.shape[:-1], dtype=x.dtype)
    for s in range(0, x.shape[-1], block):
        xb = x[..., s : s + block]
        m = torch.maximum(m, xb.amax(-1))
        l = l + torch.exp(xb - m.unsqueeze(-1)).sum(-1)
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)


def _check(submission, x, block, tol=1e-12):
    label = f"online_softmax(x of shape {tuple(x.shape)}, block={block})"
    got = expect_tensor(submission.call("online_softmax", x, block), shape=x.shape, name=label)
    expected = torch.softmax(x, -1)
    if not torch.allclose(got.to(x.dtype), expected, atol=tol, rtol=0):
        if torch.allclose(got.to(x.dtype), _no_rescale(x, block), atol=1e-9):
            raise CheckFailure(f"{label}: the running sum is not rescaled. When a block raises the "
                               "maximum from m to m', multiply l by exp(m - m') before adding the "
                               "block's terms")
        assert_close(got, expected, atol=tol, rtol=0, name=label,
                     hint="m' = max(m, max(x_block)); l' = l exp(m - m') + sum exp(x_block - m'); "
                          "finally exp(x - m) / l")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall(RESCALE)
def test_matches_softmax_for_any_block(submission):
    """Equals softmax over the last axis for blocks that divide N, do not, are 1 or exceed N."""
    x = _randn(4, 13, seed=1)
    for block in (1, 4, 5, 13, 20):
        _check(submission, x, block)


@pytest.mark.weight(2)
@pytest.mark.pitfall(RESCALE)
def test_maximum_in_a_late_block(submission):
    """Rows whose maximum arrives late (so the running sum must be rescaled) are right."""
    x = torch.linspace(-3.0, 6.0, 24, dtype=torch.float64).repeat(3, 1)  # rising rows
    x[1] = x[1].flip(0)  # falling row: the first block already holds the max
    x[2, 17] = 12.0  # a spike in a late block
    _check(submission, x, 4)
    _check(submission, x, 7)


def test_batched_leading_axes(submission):
    """Works over the last axis of a (B, H, T, N) tensor of scores."""
    _check(submission, _randn(2, 3, 4, 9, seed=2), 4)


@pytest.mark.pitfall(OVERFLOW)
def test_large_inputs_do_not_overflow(submission):
    """Scores in the thousands (exp overflows float32) still give the exact softmax."""
    x = (_randn(3, 16, seed=3, dtype=torch.float32) * 5 + 2000.0)
    x[0, 11] = 2100.0
    got = _check(submission, x, 4, tol=1e-6)
    if got.dtype != torch.float32:
        raise CheckFailure(f"a float32 input should give a float32 softmax, got {got.dtype}")
