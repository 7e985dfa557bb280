"""Hidden checks for Exercise 3e: Mamba-2's ``ssd_chunked`` (quadratic inside chunks,
recurrent between them).

Reference: :func:`toolkit.ssm.duality.ssd_recurrent`; the chunked form must equal it for
every chunk size, lengths that are not a multiple of it included, and carry the state in
and out. Inputs are float64 unless stated.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close
from toolkit.ssm.duality import ssd_attention, ssd_recurrent

pytestmark = pytest.mark.grade_cell("test_ssd_chunked")

NOT_CARRIED = "Chunk states not carried between chunks"
NOT_DECAYED = "Carried chunk state read without its decay"

TOL = dict(atol=1e-10, rtol=1e-8)


def _inputs(batch=2, L=11, H=3, P=4, N=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, L, H, P, generator=g, dtype=dtype)
    log_a = -torch.rand(batch, L, H, generator=g, dtype=dtype) * 0.9
    B = torch.randn(batch, L, H, N, generator=g, dtype=dtype)
    C = torch.randn(batch, L, H, N, generator=g, dtype=dtype)
    return x, log_a, B, C


def _diagnose(out, x, log_a, B, C, chunk_size) -> None:
    if not isinstance(out, torch.Tensor) or out.shape != x.shape:
        return
    out = out.to(x.dtype)
    L = x.size(1)
    if chunk_size >= L:  # one chunk: it starts from the zero state, rightly
        return
    alone = torch.cat([ssd_attention(x[:, s:s + chunk_size], log_a[:, s:s + chunk_size],
                                     B[:, s:s + chunk_size], C[:, s:s + chunk_size])
                       for s in range(0, L, chunk_size)], dim=1)
    if torch.allclose(out, alone, **TOL):
        raise CheckFailure("every chunk starts from a zero state: the state at the end of a "
                           "chunk must be handed to the next one, and read there as "
                           "(a_0 ... a_i) h C_i")


@pytest.mark.weight(3)
@pytest.mark.pitfall(NOT_CARRIED)
@pytest.mark.parametrize("chunk_size", [3, 4])
def test_equals_the_recurrence(submission, chunk_size):
    """ssd_chunked equals the scan for L = 11 (not a multiple of the chunk size)."""
    args = _inputs(seed=1)
    out = submission.call("ssd_chunked", *args, chunk_size)
    _diagnose(out, *args, chunk_size)
    assert_close(out, ssd_recurrent(*args), **TOL, name=f"ssd_chunked with chunk_size={chunk_size}",
                 hint="y_i = [(L o C B^T) x]_i + (a_0 ... a_i) h C_i; then "
                      "h <- (a_0 ... a_(Q-1)) h + sum_j (a_(j+1) ... a_(Q-1)) x_j B_j^T")


@pytest.mark.pitfall(NOT_DECAYED)
@pytest.mark.parametrize("chunk_size", [1, 16])
def test_extreme_chunk_sizes(submission, chunk_size):
    """chunk_size 1 (the recurrence) and larger than L (the attention form), L = 13."""
    args = _inputs(L=13, seed=2)
    out = submission.call("ssd_chunked", *args, chunk_size)
    _diagnose(out, *args, chunk_size)
    assert_close(out, ssd_recurrent(*args), **TOL, name=f"ssd_chunked with chunk_size={chunk_size}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NOT_CARRIED)
def test_state_in_and_out(submission):
    """return_state gives the state after the last step; state= continues a split sequence."""
    x, log_a, B, C = _inputs(L=14, seed=3)
    code = (
        "x, log_a, B, C = (inputs[n] for n in ('x', 'log_a', 'B', 'C'))\n"
        "y1, h1 = ssd_chunked(x[:, :9], log_a[:, :9], B[:, :9], C[:, :9], 4, return_state=True)\n"
        "y2 = ssd_chunked(x[:, 9:], log_a[:, 9:], B[:, 9:], C[:, 9:], 2, state=h1)\n"
        "result = (y1, h1, y2)\n"
    )
    got = submission.run(code, x=x, log_a=log_a, B=B, C=C)
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure("ssd_chunked(..., return_state=True) should return (y, state)")
    _, h9 = ssd_recurrent(x[:, :9], log_a[:, :9], B[:, :9], C[:, :9], return_state=True)
    assert_close(got[1], h9, **TOL, name="the state after 9 steps (batch, H, P, N)",
                 hint="h <- (a_0 ... a_(Q-1)) h + sum_j (a_(j+1) ... a_(Q-1)) x_j B_j^T")
    assert_close(torch.cat([got[0], got[2]], 1), ssd_recurrent(x, log_a, B, C), **TOL,
                 name="y from two calls with state", hint="start from `state` when it is given")


@pytest.mark.structural
def test_float32(submission):
    """float32 in, float32 out."""
    args = _inputs(L=9, seed=4, dtype=torch.float32)
    out = submission.call("ssd_chunked", *args, 4)
    assert_close(out, ssd_recurrent(*args), atol=1e-5, rtol=1e-4, name="float32 ssd_chunked")
