"""Hidden checks for Exercise 3d: Mamba-2's ``semiseparable_mask`` and ``ssd_attention``.

References: :func:`toolkit.ssm.duality.semiseparable_mask` (equal to Hugging Face's
Mamba-2 ``segment_sum``, exponentiated) and :func:`toolkit.ssm.duality.ssd_recurrent`, the
scan the attention form must equal. Inputs are float64 unless stated.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.ssm.duality import semiseparable_mask, ssd_recurrent

pytestmark = pytest.mark.grade_cell("test_ssd_attention")

WITH_J = "Decay mask includes a_j (L_ii = a_i instead of 1)"
NOT_CAUSAL = "Decay mask not causal"
RATIO = "Decay mask as a ratio of cumulative products (0 / 0 on long inputs)"

TOL = dict(atol=1e-10, rtol=1e-8)


def _log_a(*shape, seed=0, dtype=torch.float64):
    return -torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype) * 0.9


def _inputs(batch=2, L=10, H=3, P=4, N=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, H, P, generator=g, dtype=dtype)
    log_a = -torch.rand(batch, L, H, generator=g, dtype=dtype) * 0.9
    B = torch.randn(batch, L, H, N, generator=g, dtype=dtype)
    C = torch.randn(batch, L, H, N, generator=g, dtype=dtype)
    return x, log_a, B, C


def _diagnose_mask(out, log_a) -> None:
    if not isinstance(out, torch.Tensor) or out.shape != (*log_a.shape, log_a.size(-1)):
        return
    out = out.to(log_a.dtype)
    reference = semiseparable_mask(log_a)
    if torch.allclose(out.tril(), reference * log_a.exp()[..., None, :], **TOL):  # a_i ... a_j
        raise CheckFailure("your L_ij includes a_j (or the diagonal is a_i): token j enters the "
                           "state after step j's decay, so L_ij = a_i ... a_(j+1) and L_ii = 1")
    if torch.allclose(out.tril(), reference, **TOL) and not torch.allclose(
            out.triu(1), torch.zeros_like(out), atol=1e-12):
        raise CheckFailure("your mask is not 0 above the diagonal: a query (row i) must never "
                           "read a later key (column j > i)")


@pytest.mark.weight(3)
@pytest.mark.pitfall(WITH_J)
def test_mask_matches_reference(submission):
    """semiseparable_mask of (2, 3, 9) log decays: a_i ... a_(j+1) on and below the diagonal."""
    log_a = _log_a(2, 3, 9, seed=1)
    out = submission.call("semiseparable_mask", log_a)
    _diagnose_mask(out, log_a)
    assert_close(out, semiseparable_mask(log_a), **TOL, name="semiseparable_mask (2, 3, 9)",
                 hint="L_ij = exp(sum_{j < r <= i} log a_r) for j <= i, 0 above the diagonal")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NOT_CAUSAL)
def test_mask_is_zero_above_the_diagonal(submission):
    """The mask is exactly 0 above the diagonal and 1 on it (L = 7)."""
    log_a = _log_a(7, seed=2)
    out = expect_tensor(submission.call("semiseparable_mask", log_a), shape=(7, 7),
                        name="semiseparable_mask of 7 steps")
    _diagnose_mask(out, log_a)
    if not torch.equal(out.triu(1), torch.zeros(7, 7, dtype=out.dtype)):
        raise CheckFailure("your mask is not 0 above the diagonal: a query never reads a "
                           "later key")
    assert_close(torch.diagonal(out), torch.ones(7, dtype=torch.float64), **TOL,
                 name="the diagonal of the mask", hint="L_ii is the empty product, 1")


@pytest.mark.pitfall(RATIO)
def test_mask_on_a_long_sequence(submission):
    """L = 2000 steps of log a = -1, float32: finite, and equal to the reference."""
    log_a = torch.full((2000,), -1.0)
    out = submission.call("semiseparable_mask", log_a)
    out = expect_tensor(out, shape=(2000, 2000), dtype=torch.float32,
                        name="semiseparable_mask of 2000 steps (float32)")
    assert_close(out, semiseparable_mask(log_a), atol=1e-6, rtol=1e-4,
                 name="semiseparable_mask of 2000 steps",
                 hint="exp of segment sums of log a, never a ratio of cumulative products")


def _diagnose_attention(out, x, log_a, B, C) -> None:
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return
    out = out.to(x.dtype)
    with_j = torch.einsum("bhij,bihn,bjhn,bjhp->bihp",
                          semiseparable_mask(log_a.transpose(1, 2)) * log_a.exp().transpose(1, 2)
                          [..., None, :], C, B, x)
    if torch.allclose(out, with_j, **TOL):
        raise CheckFailure("your output decays each token by its own a_j as well: the mask is "
                           "L_ij = a_i ... a_(j+1), with L_ii = 1")


@pytest.mark.weight(3)
@pytest.mark.pitfall(WITH_J)
def test_attention_equals_the_recurrence(submission):
    """ssd_attention equals the scan h_t = a_t h_(t-1) + x_t B_t^T, y_t = h_t C_t
    (batch 2, L = 10, H = 3, P = 4, N = 5)."""
    args = _inputs(seed=3)
    out = submission.call("ssd_attention", *args)
    _diagnose_attention(out, *args)
    assert_close(out, ssd_recurrent(*args), **TOL, name="ssd_attention(x, log_a, B, C)",
                 hint="y_i = sum_{j <= i} L_ij (C_i . B_j) x_j per head")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NOT_CAUSAL)
@pytest.mark.property
def test_attention_is_causal(submission):
    """Changing x, log_a, B, C after step 5 never changes the outputs up to 5."""
    x, log_a, B, C = _inputs(batch=1, L=9, seed=4)
    base = expect_tensor(submission.call("ssd_attention", x, log_a, B, C), shape=x.shape,
                         name="ssd_attention")
    moved = [t.clone() for t in (x, log_a, B, C)]
    for t in moved:
        t[:, 6:] -= 0.5
    out = expect_tensor(submission.call("ssd_attention", *moved), shape=x.shape,
                        name="ssd_attention")
    if not torch.allclose(out[:, :6], base[:, :6], atol=1e-12):
        raise CheckFailure("changing steps 6.. changed the outputs at steps 0..5: the future "
                           "leaks. The mask must be 0 above the diagonal")


@pytest.mark.structural
def test_float32(submission):
    """float32 in, float32 out, (batch, L, H, P)."""
    args = _inputs(L=6, seed=5, dtype=torch.float32)
    out = submission.call("ssd_attention", *args)
    assert_close(out, ssd_recurrent(*args), atol=1e-5, rtol=1e-4, name="float32 ssd_attention")
