"""Hidden checks for Exercise 2: ``linear_attention`` and ``causal_linear_attention``.

The causal prefix-sum form is compared with the toolkit's recurrent (RNN) form and with
the masked quadratic form; all three must agree. Inputs are float64.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.linear_attention import (
    causal_linear_attention,
    causal_linear_attention_recurrent,
    elu_feature_map,
    linear_attention,
    linear_attention_quadratic,
)

pytestmark = pytest.mark.grade_cell("test_linear_attention")

NORM = "Linear attention without the normaliser"
LEAK = "Causal linear attention sums over all keys (the future leaks)"
QUADRATIC = "Causal linear attention through the T x T matrix"

TOL = dict(atol=1e-10, rtol=1e-8)


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _unnormalised(q, k, v, causal=False):
    """phi(Q) phi(K)^T V without the division: what a missing normaliser gives."""
    a = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1)
    if causal:
        a = a * torch.ones(a.shape[-2:], dtype=torch.bool).tril()
    return a @ v


def _norm_hint(out, q, k, v, causal=False) -> None:
    if isinstance(out, torch.Tensor) and out.shape == v.shape[:2] + (q.shape[2], v.shape[-1]):
        if torch.allclose(out.to(v.dtype), _unnormalised(q, k, v, causal), atol=1e-8):
            raise CheckFailure("your output is phi(Q) S without the normaliser: divide by "
                               "phi(q_i)^T z (+ eps) so that each query's weights sum to 1")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NORM)
def test_linear_attention_matches_reference(submission):
    """linear_attention equals phi(Q) S / (phi(Q) z), also with T_q != T_k and d_v != d."""
    q, k, v = _randn(2, 3, 5, 4, seed=1), _randn(2, 3, 7, 4, seed=2), _randn(2, 3, 7, 6, seed=3)
    out = submission.call("linear_attention", q, k, v)
    _norm_hint(out, q, k, v)
    expected = linear_attention(q, k, v)
    assert_close(out, expected, **TOL, name="linear_attention(q, k, v)",
                 hint="S = phi(K)^T V, z = phi(K)^T 1, out = phi(Q) S / (phi(Q) z + eps)")
    assert_close(out, linear_attention_quadratic(q, k, v), atol=1e-9, rtol=1e-8,
                 name="linear_attention vs the quadratic form")


@pytest.mark.pitfall(NORM)
def test_weights_sum_to_one(submission):
    """With every value equal to 1 the output is 1: each query's weights sum to 1."""
    q, k = _randn(1, 2, 6, 3, seed=4), _randn(1, 2, 9, 3, seed=5)
    ones = torch.ones(1, 2, 9, 1, dtype=torch.float64)
    out = submission.call("linear_attention", q, k, ones)
    assert_close(out, torch.ones(1, 2, 6, 1, dtype=torch.float64), atol=1e-5, rtol=0,
                 name="linear_attention(q, k, ones)",
                 hint="without the normaliser phi(q_i)^T z the weights do not sum to 1")


def test_feature_map_and_eps_are_used(submission):
    """The given feature_map and eps are used (not a hard-coded elu + 1)."""
    q, k, v = _randn(1, 2, 4, 3, seed=6), _randn(1, 2, 5, 3, seed=7), _randn(1, 2, 5, 2, seed=8)
    code = (
        "phi = lambda x: torch.nn.functional.softplus(x) + 0.5\n"
        "result = (linear_attention(inputs['q'], inputs['k'], inputs['v'], feature_map=phi),\n"
        "          linear_attention(inputs['q'], inputs['k'], inputs['v'], eps=10.0))\n"
    )
    got = submission.run(code, q=q, k=k, v=v)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("linear_attention did not return a tensor")
    phi = lambda x: torch.nn.functional.softplus(x) + 0.5  # noqa: E731
    assert_close(got[0], linear_attention(q, k, v, feature_map=phi), **TOL,
                 name="linear_attention(..., feature_map=phi)",
                 hint="apply the feature_map argument to q and k")
    assert_close(got[1], linear_attention(q, k, v, eps=10.0), **TOL,
                 name="linear_attention(..., eps=10.0)", hint="add eps to the denominator")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LEAK)
def test_causal_matches_recurrent_form(submission):
    """causal_linear_attention equals the RNN form S_t = S_{t-1} + phi(k_t) v_t^T."""
    q, k, v = _randn(2, 2, 9, 4, seed=9), _randn(2, 2, 9, 4, seed=10), _randn(2, 2, 9, 3, seed=11)
    out = submission.call("causal_linear_attention", q, k, v)
    _norm_hint(out, q, k, v, causal=True)
    if isinstance(out, torch.Tensor) and out.shape == (2, 2, 9, 3) and torch.allclose(
            out.to(q.dtype), linear_attention(q, k, v), atol=1e-8):
        raise CheckFailure("your causal_linear_attention is the non-causal one: every query reads "
                           "every key. Use prefix sums (cumsum over time, dim=2)")
    assert_close(out, causal_linear_attention_recurrent(q, k, v), **TOL,
                 name="causal_linear_attention(q, k, v)",
                 hint="S_i and z_i are prefix sums over j <= i (torch.cumsum along dim=2)")


@pytest.mark.pitfall(LEAK)
def test_causal_matches_masked_quadratic_form(submission):
    """causal_linear_attention equals the masked, row-normalised T x T form."""
    q, k, v = _randn(1, 3, 8, 5, seed=12), _randn(1, 3, 8, 5, seed=13), _randn(1, 3, 8, 2, seed=14)
    out = submission.call("causal_linear_attention", q, k, v)
    assert_close(out, linear_attention_quadratic(q, k, v, causal=True), atol=1e-9, rtol=1e-8,
                 name="causal_linear_attention vs the masked quadratic form")


@pytest.mark.pitfall(LEAK)
@pytest.mark.property
def test_causal_future_does_not_leak(submission):
    """Changing keys and values after position t never changes the outputs up to t."""
    q, k = _randn(1, 2, 10, 4, seed=15), _randn(1, 2, 10, 4, seed=16)
    v = _randn(1, 2, 10, 3, seed=17)
    base = expect_tensor(submission.call("causal_linear_attention", q, k, v), shape=(1, 2, 10, 3),
                         name="causal_linear_attention(q, k, v)")
    k2, v2 = k.clone(), v.clone()
    k2[:, :, 6:] += 2.0
    v2[:, :, 6:] -= 3.0
    moved = expect_tensor(submission.call("causal_linear_attention", q, k2, v2),
                          shape=(1, 2, 10, 3), name="causal_linear_attention(q, k', v')")
    if not torch.allclose(moved[:, :, :6], base[:, :, :6], atol=1e-10):
        raise CheckFailure("changing keys/values 6.. changed the outputs at positions 0..5: the "
                           "future leaks. S_i and z_i may only sum j <= i")


@pytest.mark.pitfall(QUADRATIC)
def test_causal_never_builds_the_t_by_t_matrix(submission):
    """The prefix-sum form never creates a T x T tensor (it is linear in T)."""
    T = 12
    q, k, v = _randn(1, 2, T, 4, seed=18), _randn(1, 2, T, 4, seed=19), _randn(1, 2, T, 3, seed=20)
    code = (
        "from toolkit.flash import PeakMemoryCounter as _Counter\n"
        "with _Counter() as _counter:\n"
        "    _out = causal_linear_attention(inputs['q'], inputs['k'], inputs['v'])\n"
        f"result = (_out, any(len(s) >= 2 and tuple(s[-2:]) == ({T}, {T}) "
        "for s in _counter.shapes))\n"
    )
    got = submission.run(code, q=q, k=k, v=v)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("causal_linear_attention did not return a tensor")
    out, built_square = got
    assert_close(out, causal_linear_attention(q, k, v), **TOL, name="causal_linear_attention")
    if built_square:
        raise CheckFailure(f"your causal_linear_attention created a {T} x {T} tensor: that is the "
                           "quadratic form. Use prefix sums of phi(k_j) v_j^T instead (cumsum)")


@pytest.mark.structural
def test_shapes_and_dtype(submission):
    """float32 in, float32 out, shape (B, H, T, d_v) for both functions."""
    q, k, v = (_randn(1, 2, 5, 4, seed=s, dtype=torch.float32) for s in (21, 22, 23))
    for name in ("linear_attention", "causal_linear_attention"):
        expect_tensor(submission.call(name, q, k, v[..., :3]), shape=(1, 2, 5, 3),
                      dtype=torch.float32, name=f"{name} on float32 inputs")
