"""Hidden checks for Exercise 3a: ``discretize_zoh``, the exact zero-order hold.

Two independent references: :func:`toolkit.ssm.lti.discretize_zoh` and the matrix
exponential of the block matrix ``[[A, B], [0, 0]]`` (Van Loan), which needs no
formula for ``B_bar`` at all. Inputs are float64.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close
from toolkit.ssm.lti import discretize_zoh, discretize_zoh_matrix

pytestmark = pytest.mark.grade_cell("test_discretize_zoh")

EULER = "B_bar = delta * B where the exact zero-order hold is asked"

TOL = dict(atol=1e-12, rtol=1e-10)


def _ssm(H, N, seed):
    g = torch.Generator().manual_seed(seed)
    A = -torch.rand(H, N, generator=g, dtype=torch.float64) * 3 - 0.05
    return A, torch.randn(H, N, generator=g, dtype=torch.float64)


def _pair(submission, delta, A, B, name):
    got = submission.call("discretize_zoh", delta, A, B)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure(f"{name} should return a pair (A_bar, B_bar)")
    return got


def _euler_hint(B_bar, delta, B) -> None:
    delta = torch.as_tensor(delta, dtype=B.dtype)
    euler = delta[..., None] * B if delta.dim() else delta * B
    if isinstance(B_bar, torch.Tensor) and B_bar.shape == euler.shape and torch.allclose(
            B_bar.to(B.dtype), euler, atol=1e-10):
        raise CheckFailure("your B_bar is delta * B: that is Mamba's (Euler) simplification. This "
                           "exercise asks for the exact zero-order hold, B_bar = (delta A)^-1 "
                           "(exp(delta A) - 1) delta B = (exp(delta A) - 1) / A * B")


@pytest.mark.weight(2)
@pytest.mark.pitfall(EULER)
def test_per_channel_steps(submission):
    """One step per channel: delta (H,), A and B (H, N)."""
    A, B = _ssm(4, 6, seed=1)
    delta = torch.tensor([0.05, 0.5, 1.5, 4.0], dtype=torch.float64)
    A_bar, B_bar = _pair(submission, delta, A, B, "discretize_zoh(delta, A, B)")
    expected_A, expected_B = discretize_zoh(delta, A, B)
    assert_close(A_bar, expected_A, **TOL, name="A_bar", hint="A_bar = exp(delta A)")
    _euler_hint(B_bar, delta, B)
    assert_close(B_bar, expected_B, **TOL, name="B_bar",
                 hint="B_bar = (exp(delta A) - 1) / A * B; torch.expm1 keeps it accurate")


@pytest.mark.weight(2)
@pytest.mark.pitfall(EULER)
def test_matches_the_matrix_exponential(submission):
    """Equals exp(delta [[A, B], [0, 0]]) for every channel (exact for any step size)."""
    A, B = _ssm(3, 5, seed=2)
    delta = torch.tensor([0.3, 1.0, 2.5], dtype=torch.float64)
    A_bar, B_bar = _pair(submission, delta, A, B, "discretize_zoh(delta, A, B)")
    _euler_hint(B_bar, delta, B)
    for h in range(3):
        A_m, B_m = discretize_zoh_matrix(float(delta[h]), torch.diag(A[h]), B[h][:, None])
        assert_close(A_bar[h], torch.diag(A_m), **TOL, name=f"A_bar of channel {h}")
        assert_close(B_bar[h], B_m[:, 0], **TOL, name=f"B_bar of channel {h}",
                     hint="integrate e^{A s} B over the step: (exp(delta A) - 1) / A * B")


@pytest.mark.pitfall(EULER)
def test_scalar_step(submission):
    """A Python float delta applies to every entry."""
    A, B = _ssm(2, 3, seed=3)
    A_bar, B_bar = _pair(submission, 0.8, A, B, "discretize_zoh(0.8, A, B)")
    expected_A, expected_B = discretize_zoh(0.8, A, B)
    _euler_hint(B_bar, torch.tensor(0.8, dtype=torch.float64), B)
    assert_close(A_bar, expected_A, **TOL, name="A_bar (delta = 0.8)")
    assert_close(B_bar, expected_B, **TOL, name="B_bar (delta = 0.8)")


@pytest.mark.pitfall(EULER)
@pytest.mark.property
def test_two_half_steps_make_one_step(submission):
    """Holding the input for two steps of delta / 2 is one step of delta: A_bar(delta) =
    A_bar(delta/2)^2 and B_bar(delta) = A_bar(delta/2) B_bar(delta/2) + B_bar(delta/2)."""
    A, B = _ssm(3, 4, seed=7)
    delta = torch.tensor([0.4, 1.2, 3.0], dtype=torch.float64)
    A_full, B_full = _pair(submission, delta, A, B, "discretize_zoh(delta, A, B)")
    A_half, B_half = _pair(submission, delta / 2, A, B, "discretize_zoh(delta / 2, A, B)")
    assert_close(A_full, A_half * A_half, **TOL, name="A_bar(delta) vs A_bar(delta/2)^2")
    # h -> A_h (A_h h + B_h u) + B_h u: the second half-step decays what the first added.
    assert_close(B_full, A_half * B_half + B_half, **TOL,
                 name="B_bar(delta) vs the two half steps",
                 hint="only the exact hold composes: (exp(delta A) - 1) / A * B. delta * B "
                      "(Euler) forgets that the input added early in the step decays too")


def test_per_token_steps_broadcast(submission):
    """delta (batch, L, H) against A (H, N) and B (batch, L, 1, N): Mamba's shapes."""
    A, _ = _ssm(3, 4, seed=4)
    g = torch.Generator().manual_seed(5)
    delta = torch.rand(2, 5, 3, generator=g, dtype=torch.float64) + 0.01
    B = torch.randn(2, 5, 1, 4, generator=g, dtype=torch.float64)
    A_bar, B_bar = _pair(submission, delta, A, B, "discretize_zoh with per-token steps")
    expected_A, expected_B = discretize_zoh(delta, A, B)
    assert_close(A_bar, expected_A, **TOL, name="A_bar (batch, L, H, N)",
                 hint="multiply delta[..., None] (one step per leading index) by A")
    assert_close(B_bar, expected_B, **TOL, name="B_bar (batch, L, H, N)")


def test_small_steps_stay_accurate(submission):
    """Tiny steps (1e-9): B_bar ~ delta * B to full precision (use expm1, not exp - 1)."""
    A, B = _ssm(2, 3, seed=6)
    _, B_bar = _pair(submission, 1e-9, A, B, "discretize_zoh(1e-9, A, B)")
    assert_close(B_bar, discretize_zoh(1e-9, A, B)[1], atol=0, rtol=1e-9,
                 name="B_bar for delta = 1e-9",
                 hint="exp(x) - 1 loses all digits for tiny x: torch.expm1(x) does not")
