"""Hidden checks for Exercise 4: ``wkv_recurrent``, RWKV's stable WKV recurrence.

References: the direct O(T^2) formula :func:`toolkit.rwkv.wkv_parallel` on short float64
inputs, and :func:`toolkit.rwkv.wkv_recurrent` (which the project's tests prove equal to
Hugging Face's ``rwkv_linear_attention_cpu``), in float64, on long inputs with large keys.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.rwkv import wkv_parallel, wkv_recurrent

pytestmark = pytest.mark.grade_cell("test_wkv")

OVERFLOW = "WKV without the max-subtraction stabiliser (overflows on long inputs)"
BONUS = "Bonus u applied to the past tokens instead of the current one"
LEAK = "The future leaks into earlier outputs"

TOL = dict(atol=1e-10, rtol=1e-8)


def _inputs(batch=2, T=10, C=4, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(batch, T, C, generator=g, dtype=dtype)
    v = torch.randn(batch, T, C, generator=g, dtype=dtype)
    w = torch.rand(C, generator=g, dtype=dtype) + 0.05
    u = torch.randn(C, generator=g, dtype=dtype) + 1.0
    return k, v, w, u


def _bonus_on_past(k, v, w, u):
    """What a bonus on the past computes: e^u on every token i < t, none on i = t."""
    T = k.size(1)
    t = torch.arange(T)
    distance = (t[:, None] - 1 - t[None, :]).to(k.dtype)[..., None]  # t - 1 - i: (T, T, 1)
    exponent = -distance * w + k[:, None, :, :] + u  # (batch, T, T, C)
    diagonal = torch.eye(T, dtype=torch.bool)[..., None]
    exponent = torch.where(diagonal, k[:, :, None, :], exponent)  # the current token: k_t only
    exponent = exponent.masked_fill((t[None, :] > t[:, None])[..., None], float("-inf"))
    weights = exponent.exp()
    return (weights * v[:, None]).sum(2) / weights.sum(2)


def _bonus_hint(out, k, v, w, u) -> None:
    if isinstance(out, torch.Tensor) and out.shape == k.shape and torch.allclose(
            out.to(k.dtype), _bonus_on_past(k, v, w, u), atol=1e-9):
        raise CheckFailure("the bonus u weights your past tokens: it belongs to the current token "
                           "only (e^{u + k_t} in the output); the past keeps e^{k_i} decayed by "
                           "e^{-w} per step")


@pytest.mark.weight(2)
@pytest.mark.pitfall(BONUS)
def test_matches_the_formula(submission):
    """Equals the direct formula on short float64 sequences."""
    k, v, w, u = _inputs(seed=1)
    out = submission.call("wkv_recurrent", k, v, w, u)
    _bonus_hint(out, k, v, w, u)
    assert_close(out, wkv_parallel(k, v, w, u), **TOL, name="wkv_recurrent(k, v, w, u)",
                 hint="wkv_t = (a + e^{u+k_t} v_t) / (b + e^{u+k_t}); then a, b decay by e^{-w} "
                      "and add e^{k_t} v_t, e^{k_t}")


@pytest.mark.pitfall(BONUS)
def test_first_two_tokens(submission):
    """wkv_0 = v_0; wkv_1 = (e^{k_0} v_0 + e^{u+k_1} v_1) / (e^{k_0} + e^{u+k_1})."""
    k, v, w, u = _inputs(batch=1, T=2, C=3, seed=2)
    out = expect_tensor(submission.call("wkv_recurrent", k, v, w, u), shape=(1, 2, 3),
                        name="wkv_recurrent on two tokens")
    assert_close(out[:, 0], v[:, 0], **TOL, name="wkv_0", hint="a single value averages to itself")
    past, now = k[:, 0].exp(), (u + k[:, 1]).exp()
    _bonus_hint(out, k, v, w, u)
    assert_close(out[:, 1], (past * v[:, 0] + now * v[:, 1]) / (past + now), **TOL, name="wkv_1")


@pytest.mark.weight(3)
@pytest.mark.pitfall(OVERFLOW)
def test_long_input_with_large_keys(submission):
    """float32, 2048 tokens, keys up to 86: finite and equal to the float64 reference."""
    g = torch.Generator().manual_seed(3)
    T, C = 2048, 4
    k = 80.0 + 6.0 * torch.rand(1, T, C, generator=g)  # e^86 fits in float32; their sum does not
    v = torch.randn(1, T, C, generator=g)
    w = torch.tensor([1e-4, 1e-2, 0.3, 3.0])
    u = torch.tensor([0.5, -1.0, 2.0, 0.0])
    out = submission.call("wkv_recurrent", k, v, w, u, timeout=120)
    if isinstance(out, torch.Tensor) and not torch.isfinite(out).all():
        first = int((~torch.isfinite(out)).any(-1).any(0).nonzero()[0])
        raise CheckFailure(f"your output becomes inf/NaN at token {first} of a 2048-token input "
                           "with keys around 80: e^k overflows float32. Keep the running maximum "
                           "exponent p and subtract it before every exp (every exp <= 1)")
    expected = wkv_recurrent(k.double(), v.double(), w.double(), u.double()).float()
    assert_close(out, expected, atol=1e-4, rtol=1e-4, name="wkv_recurrent on a long input",
                 hint="the sums overflow long before a single key does: store a and b divided "
                      "by e^p and rescale with exp(p - q), q the new maximum")


def test_state_continues(submission):
    """return_state gives (a, b, p); state= continues a split sequence."""
    k, v, w, u = _inputs(T=12, seed=4)
    code = (
        "k, v, w, u = inputs['k'], inputs['v'], inputs['w'], inputs['u']\n"
        "head, state = wkv_recurrent(k[:, :7], v[:, :7], w, u, return_state=True)\n"
        "tail = wkv_recurrent(k[:, 7:], v[:, 7:], w, u, state=state)\n"
        "result = (head, tail, tuple(state))\n"
    )
    got = submission.run(code, k=k, v=v, w=w, u=u)
    if not isinstance(got, tuple) or len(got) != 3 or len(got[2]) != 3:
        raise CheckFailure("wkv_recurrent(..., return_state=True) should return (wkv, (a, b, p))")
    assert_close(torch.cat([got[0], got[1]], 1), wkv_parallel(k, v, w, u), **TOL,
                 name="wkv from two calls with state", hint="start from `state` when it is given")
    _, (a, b, p) = wkv_recurrent(k[:, :7], v[:, :7], w, u, return_state=True)
    scale = torch.exp(got[2][2].to(p.dtype) - p)  # any common rescaling of (a, b) is fine
    assert_close(got[2][0].double() * scale, a, **TOL, name="the state a (times e^p)")
    assert_close(got[2][1].double() * scale, b, **TOL, name="the state b (times e^p)")


@pytest.mark.pitfall(LEAK)
@pytest.mark.property
def test_causal(submission):
    """Changing keys and values after t never changes outputs up to t."""
    k, v, w, u = _inputs(T=10, seed=5)
    base = expect_tensor(submission.call("wkv_recurrent", k, v, w, u), shape=k.shape,
                         name="wkv_recurrent")
    k2, v2 = k.clone(), v.clone()
    k2[:, 6:] += 3.0
    v2[:, 6:] -= 2.0
    moved = expect_tensor(submission.call("wkv_recurrent", k2, v2, w, u), shape=k.shape,
                          name="wkv_recurrent")
    if not torch.allclose(moved[:, :6], base[:, :6], atol=1e-12):
        raise CheckFailure("changing keys/values 6.. changed the outputs 0..5: the future leaks")
    if torch.allclose(moved[:, 6:], base[:, 6:], atol=1e-12):
        raise CheckFailure("changing keys/values 6.. did not change their own outputs: wkv_t "
                           "must include the current token, weighted e^{u + k_t}")


@pytest.mark.property
def test_token_by_token_equals_the_whole_sequence(submission):
    """Generation form = training form: one call per token, passing the state (a, b, p)
    on, gives the outputs of one call on the whole sequence (float32, large keys)."""
    g = torch.Generator().manual_seed(6)
    k = 60.0 + 20.0 * torch.rand(1, 9, 3, generator=g)
    v = torch.randn(1, 9, 3, generator=g)
    w, u = torch.tensor([0.01, 0.5, 2.0]), torch.tensor([1.0, 0.0, -1.0])
    code = (
        "k, v, w, u = inputs['k'], inputs['v'], inputs['w'], inputs['u']\n"
        "whole = wkv_recurrent(k, v, w, u)\n"
        "steps, state = [], None\n"
        "for t in range(k.shape[1]):\n"
        "    out, state = wkv_recurrent(k[:, t:t + 1], v[:, t:t + 1], w, u, state=state,\n"
        "                               return_state=True)\n"
        "    steps.append(out)\n"
        "result = (whole, torch.cat(steps, 1))\n"
    )
    got = submission.run(code, k=k, v=v, w=w, u=u)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("wkv_recurrent(..., return_state=True) should return (wkv, (a, b, p))")
    whole = expect_tensor(got[0], shape=(1, 9, 3), name="wkv_recurrent on 9 tokens")
    if not torch.isfinite(whole).all():
        raise CheckFailure("wkv_recurrent returned inf/NaN for keys around 70: subtract the "
                           "running maximum exponent before every exp")
    assert_close(got[1], whole, atol=1e-5, rtol=1e-5,
                 name="9 one-token calls that pass the state on",
                 hint="the state (a, b, p) must carry the whole past: start from it when given "
                      "and return it after the last token")
