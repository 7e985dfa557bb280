"""Hidden checks for Exercise 3b: Mamba's ``selective_scan`` (sequential).

References: :func:`toolkit.ssm.selective.selective_scan` and the parallel (associative
scan) form :func:`toolkit.ssm.selective.selective_scan_parallel`; the project's tests
prove both equal to Hugging Face's Mamba scan. Inputs are float64 unless stated.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.ssm.selective import selective_scan, selective_scan_parallel

pytestmark = pytest.mark.grade_cell("test_selective_scan")

SIGN = "A used without the minus sign or the exp"
LEAK = "Scan over the wrong axis (the future leaks)"
NO_D = "Missing D skip term"
ZOH = "Exact ZOH B_bar where Mamba's delta * B is asked"

TOL = dict(atol=1e-10, rtol=1e-8)


def _inputs(batch=2, L=9, d_inner=5, N=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(batch, L, d_inner, generator=g, dtype=dtype)
    delta = torch.rand(batch, L, d_inner, generator=g, dtype=dtype) + 0.05
    A_log = torch.randn(d_inner, N, generator=g, dtype=dtype) * 0.5
    B = torch.randn(batch, L, N, generator=g, dtype=dtype)
    C = torch.randn(batch, L, N, generator=g, dtype=dtype)
    D = torch.randn(d_inner, generator=g, dtype=dtype)
    return u, delta, A_log, B, C, D


def _scan(u, delta, A, B, C, D=None, zoh=False):
    """The scan with ``A`` given directly (not from A_log), to recognise wrong variants."""
    dA = delta[..., None] * A  # (batch, L, d_inner, N)
    B_bar = torch.expm1(dA) / A * B[:, :, None, :] if zoh else delta[..., None] * B[:, :, None, :]
    h, ys = torch.zeros(u.size(0), *A.shape, dtype=u.dtype), []
    for t in range(u.size(1)):
        h = torch.exp(dA[:, t]) * h + B_bar[:, t] * u[:, t, :, None]
        ys.append((h * C[:, t, None, :]).sum(-1))
    y = torch.stack(ys, 1)
    return y + D * u if D is not None else y


def _diagnose(out, u, delta, A_log, B, C, D) -> None:
    """Name the mistake when the output matches a known wrong variant."""
    if not isinstance(out, torch.Tensor) or out.shape != u.shape:
        return
    out = out.to(u.dtype)
    if not torch.isfinite(out).all():
        raise CheckFailure("your output contains inf or NaN on inputs where the scan is finite: "
                           "start h from zeros (or from `state` when it is given), never from "
                           "torch.empty, and keep A = -exp(A_log) negative")
    if torch.allclose(out, _scan(u, delta, A_log.exp(), B, C, D), **TOL):
        raise CheckFailure("your A is +exp(A_log): every exp(delta A) > 1 and the state grows "
                           "without bound. A = -exp(A_log) is negative by construction")
    if torch.allclose(out, _scan(u, delta, -A_log, B, C, D), **TOL):
        raise CheckFailure("your A is -A_log: the parameter stores log(-A), so A = -exp(A_log)")
    if D is not None and torch.allclose(out, _scan(u, delta, -A_log.exp(), B, C, None), **TOL):
        raise CheckFailure("your output lacks the skip term: y_t = C_t h_t + D * u_t")
    if torch.allclose(out, _scan(u, delta, -A_log.exp(), B, C, D, zoh=True), **TOL):
        raise CheckFailure("your B_bar is the exact zero-order hold of Exercise 3a. Mamba's scan "
                           "(and this exercise) uses its simplification B_bar = delta_t * B_t")


@pytest.mark.weight(3)
@pytest.mark.pitfall(SIGN)
def test_matches_reference(submission):
    """y equals the reference for batch 2, L = 9, d_inner = 5, N = 4 (with D)."""
    args = _inputs(seed=1)
    out = submission.call("selective_scan", *args)
    _diagnose(out, *args)
    assert_close(out, selective_scan(*args), **TOL, name="selective_scan(u, delta, A_log, B, C, D)",
                 hint="A = -exp(A_log); h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t; "
                      "y_t = C_t . h_t + D u_t")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SIGN)
def test_a_is_minus_exp_a_log(submission):
    """A = -exp(A_log): with A_log = log 2 and delta = 0.25 each step multiplies h by e^-0.5."""
    u = torch.tensor([[[1.0], [0.0], [0.0], [3.0]]], dtype=torch.float64)
    delta = torch.full_like(u, 0.25)
    A_log = torch.full((1, 1), 2.0, dtype=torch.float64).log()
    ones = torch.ones(1, 4, 1, dtype=torch.float64)
    out = expect_tensor(submission.call("selective_scan", u, delta, A_log, ones, ones),
                        shape=(1, 4, 1), name="selective_scan on a 1-channel example")
    _diagnose(out, u, delta, A_log, ones, ones, None)
    h, expected = 0.0, []
    for x in (1.0, 0.0, 0.0, 3.0):
        h = math.exp(-0.5) * h + 0.25 * x  # exp(delta A) h + delta B u, A = -2
        expected.append(h)
    assert_close(out, torch.tensor(expected, dtype=torch.float64).reshape(1, 4, 1), **TOL,
                 name="1-channel example (A_log = log 2, delta = 0.25)",
                 hint="A = -exp(A_log) = -2 here, so each step multiplies h by exp(-0.5)")


@pytest.mark.pitfall(ZOH)
def test_uses_mambas_simplified_b(submission):
    """B_bar_t = delta_t B_t (Mamba's code), with large steps where ZOH would differ."""
    u, delta, A_log, B, C, D = _inputs(batch=1, L=6, d_inner=3, N=2, seed=2)
    delta = delta * 4
    out = submission.call("selective_scan", u, delta, A_log, B, C, D)
    _diagnose(out, u, delta, A_log, B, C, D)
    assert_close(out, selective_scan(u, delta, A_log, B, C, D), **TOL,
                 name="selective_scan with large steps", hint="B_bar_t = delta_t * B_t here")


@pytest.mark.pitfall(NO_D)
def test_skip_term_and_no_skip(submission):
    """With D the output gains D * u; with D = None there is no skip term."""
    u, delta, A_log, B, C, D = _inputs(L=5, d_inner=4, N=3, seed=3)
    with_d = submission.call("selective_scan", u, delta, A_log, B, C, D)
    _diagnose(with_d, u, delta, A_log, B, C, D)
    assert_close(with_d, selective_scan(u, delta, A_log, B, C, D), **TOL,
                 name="selective_scan with D", hint="add D * u to C_t h_t")
    without = submission.call("selective_scan", u, delta, A_log, B, C, None)
    assert_close(without, selective_scan(u, delta, A_log, B, C, None), **TOL,
                 name="selective_scan with D=None")


def test_equals_the_parallel_scan(submission):
    """The sequential scan equals the associative (parallel) scan, L = 33."""
    args = _inputs(batch=1, L=33, d_inner=3, N=5, seed=4)
    out = submission.call("selective_scan", *args)
    assert_close(out, selective_scan_parallel(*args), atol=1e-9, rtol=1e-8,
                 name="selective_scan vs the parallel form")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LEAK)
@pytest.mark.property
def test_causal(submission):
    """Changing u, delta, B, C after position t never changes outputs up to t (L = d_inner = 6)."""
    # Square shapes on purpose: a scan over the channel axis then still runs, and leaks.
    u, delta, A_log, B, C, D = _inputs(batch=1, L=6, d_inner=6, N=3, seed=5)
    base = expect_tensor(submission.call("selective_scan", u, delta, A_log, B, C, D),
                         shape=(1, 6, 6), name="selective_scan")
    changed = [t.clone() for t in (u, delta, B, C)]
    for t in changed:
        t[:, 4:] += 0.7
    moved = expect_tensor(submission.call("selective_scan", changed[0], changed[1], A_log,
                                          changed[2], changed[3], D),
                          shape=(1, 6, 6), name="selective_scan")
    if not torch.allclose(moved[:, :4], base[:, :4], atol=1e-12):
        raise CheckFailure("changing the inputs at positions 4 and 5 changed the outputs at "
                           "positions 0..3: the future leaks. Loop over the time axis (dim 1 of "
                           "u), in increasing order, and read C_t h_t right after step t")
    if torch.allclose(moved[:, 4:], base[:, 4:], atol=1e-12):
        raise CheckFailure("changing the inputs at positions 4 and 5 did not change their own "
                           "outputs: y_t must read u_t, delta_t, B_t and C_t")


def test_state_in_and_out(submission):
    """return_state gives h_L (batch, d_inner, N); state= continues a split sequence."""
    u, delta, A_log, B, C, D = _inputs(L=10, seed=6)
    code = (
        "u, delta, A_log, B, C, D = (inputs[n] for n in ('u', 'delta', 'A_log', 'B', 'C', 'D'))\n"
        "y1, h1 = selective_scan(u[:, :6], delta[:, :6], A_log, B[:, :6], C[:, :6], D,\n"
        "                        return_state=True)\n"
        "y2 = selective_scan(u[:, 6:], delta[:, 6:], A_log, B[:, 6:], C[:, 6:], D, state=h1)\n"
        "result = (y1, h1, y2)\n"
    )
    got = submission.run(code, u=u, delta=delta, A_log=A_log, B=B, C=C, D=D)
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure("selective_scan(..., return_state=True) should return (y, state)")
    y, h = selective_scan(u, delta, A_log, B, C, D, return_state=True)
    _, h6 = selective_scan(u[:, :6], delta[:, :6], A_log, B[:, :6], C[:, :6], D,
                           return_state=True)
    assert_close(got[1], h6, **TOL, name="the state after 6 steps (batch, d_inner, N)")
    assert_close(torch.cat([got[0], got[2]], 1), y, **TOL, name="y from two calls with state",
                 hint="start the loop from `state` when it is given")


@pytest.mark.property
def test_token_by_token_equals_the_whole_sequence(submission):
    """Generation form = training form: L calls of one token each, passing the state on,
    give the outputs of one call on the whole sequence."""
    u, delta, A_log, B, C, D = _inputs(batch=1, L=7, d_inner=3, N=2, seed=8)
    code = (
        "u, delta, A_log, B, C, D = (inputs[n] for n in ('u', 'delta', 'A_log', 'B', 'C', 'D'))\n"
        "whole = selective_scan(u, delta, A_log, B, C, D)\n"
        "steps, state = [], None\n"
        "for t in range(u.shape[1]):\n"
        "    s = slice(t, t + 1)\n"
        "    y, state = selective_scan(u[:, s], delta[:, s], A_log, B[:, s], C[:, s], D,\n"
        "                              state=state, return_state=True)\n"
        "    steps.append(y)\n"
        "result = (whole, torch.cat(steps, 1))\n"
    )
    got = submission.run(code, u=u, delta=delta, A_log=A_log, B=B, C=C, D=D)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("selective_scan(..., return_state=True) should return (y, state)")
    whole = expect_tensor(got[0], shape=(1, 7, 3), name="selective_scan on 7 tokens")
    assert_close(got[1], whole, **TOL, name="7 one-token calls that pass the state on",
                 hint="everything the past contributes must live in the returned state h: "
                      "start from `state` when it is given and return the last h")


@pytest.mark.structural
def test_float32(submission):
    """float32 in, float32 out, shape (batch, L, d_inner)."""
    args = _inputs(L=4, seed=7, dtype=torch.float32)
    out = submission.call("selective_scan", *args)
    assert_close(out, selective_scan(*args), atol=1e-5, rtol=1e-4, name="float32 selective_scan")
