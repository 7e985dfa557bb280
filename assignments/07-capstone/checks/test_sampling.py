"""Hidden checks for Exercise 4: ``apply_temperature``, ``top_k_filter``, ``top_p_filter``.

References come from :mod:`toolkit.generate` in this process, on float64 logits, and
are compared exactly where the filters are deterministic (which tokens survive, and
their values). The last check draws many tokens through the notebook's given
``sample_next_token`` (which calls the student's filters) and compares the empirical
distribution with the distribution the filters define.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, assert_equal, expect_tensor
from toolkit.generate import apply_temperature, filter_logits, top_k_filter, top_p_filter

pytestmark = pytest.mark.grade_cell("test_sampling")

EMPTY = "Top-p that can return an empty set"
TEMP = "Temperature multiplies the logits instead of dividing them"
TOPK = "Top-k keeps more or fewer than k tokens"


def _logits(*shape, seed: int, scale: float = 2.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def _kept(x: torch.Tensor) -> torch.Tensor:
    return torch.isfinite(x)


def _check_filtered(got, expected, name, hint):
    """Same surviving tokens, unchanged values, -inf elsewhere."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        raise CheckFailure(f"{name} should return a tensor of shape {tuple(expected.shape)}, "
                           f"got {getattr(got, 'shape', type(got).__name__)}")
    got = got.to(expected.dtype)
    if torch.isnan(got).any():
        raise CheckFailure(f"{name} contains NaN")
    if not torch.equal(_kept(got), _kept(expected)):
        wrong = (_kept(got) != _kept(expected)).sum().item()
        raise CheckFailure(f"{name}: {wrong} tokens kept or removed wrongly. Hint: {hint}")
    if not (got[~_kept(got)] == float("-inf")).all():
        raise CheckFailure(f"{name}: removed tokens must be set to -inf")
    if not torch.equal(got[_kept(got)], expected[_kept(expected)]):
        raise CheckFailure(f"{name}: the kept logits must be returned unchanged")


@pytest.mark.weight(2)
@pytest.mark.pitfall(TEMP)
def test_temperature_divides(submission):
    """apply_temperature(z, t) = z / t for t below and above 1."""
    z = _logits(3, 20, seed=1)
    for t in (0.5, 1.7):
        got = expect_tensor(submission.call("apply_temperature", z, t), shape=z.shape,
                            name=f"apply_temperature(z, {t})")
        if t != 1 and torch.allclose(got.to(z.dtype), z * t):
            raise CheckFailure(f"apply_temperature(z, {t}) returned z * t: divide, z / t, so that "
                               "t < 1 sharpens the distribution and t > 1 flattens it")
        assert_close(got, apply_temperature(z, t), atol=1e-12, rtol=1e-12,
                     name=f"apply_temperature(z, {t})", hint="return logits / temperature")


@pytest.mark.pitfall(TEMP)
def test_temperature_limits(submission):
    """t -> 0 tends to the one-hot argmax, t -> infinity to the uniform distribution."""
    z = _logits(2, 30, seed=2)
    cold = submission.call("apply_temperature", z, 1e-3)
    hot = submission.call("apply_temperature", z, 1e4)
    cold = torch.softmax(expect_tensor(cold, shape=z.shape, name="apply_temperature(z, 1e-3)")
                         .to(torch.float64), dim=-1)
    hot = torch.softmax(expect_tensor(hot, shape=z.shape, name="apply_temperature(z, 1e4)")
                        .to(torch.float64), dim=-1)
    onehot = torch.nn.functional.one_hot(z.argmax(-1), 30).to(torch.float64)
    if not torch.allclose(cold, onehot, atol=1e-6):
        raise CheckFailure("with t = 1e-3 the distribution should be (almost) one-hot on the "
                           "argmax")
    if not torch.allclose(hot, torch.full_like(hot, 1 / 30), atol=1e-4):
        raise CheckFailure("with t = 1e4 the distribution should be (almost) uniform")


@pytest.mark.structural
def test_temperature_rejects_bad_values(submission):
    """t = 0, t < 0 and t = inf raise ValueError."""
    code = """
out = []
for t in inputs["values"]:
    try:
        apply_temperature(inputs["z"], t)
        out.append("no error")
    except ValueError:
        out.append("ValueError")
    except NotImplementedError:
        raise  # not written yet: the student reads that, not "expected ValueError"
    except Exception as exc:
        out.append(type(exc).__name__)
result = out
"""
    values = [0.0, -0.5, float("inf")]
    got = submission.run(code, z=_logits(1, 5, seed=3), values=values)
    for t, outcome in zip(values, got or ()):
        if outcome != "ValueError":
            raise CheckFailure(f"apply_temperature(z, {t}) gave {outcome!r}, expected ValueError")


@pytest.mark.weight(2)
@pytest.mark.pitfall(TOPK)
def test_top_k_keeps_exactly_k(submission):
    """top_k_filter keeps exactly the k largest logits per row, unchanged, and -inf elsewhere."""
    z = _logits(4, 50, seed=4)
    for k in (1, 5, 17):
        got = submission.call("top_k_filter", z, k)
        counts = _kept(got).sum(-1) if isinstance(got, torch.Tensor) else None
        if counts is not None and got.shape == z.shape and not (counts == k).all():
            raise CheckFailure(f"top_k_filter(z, {k}) kept {counts.tolist()} tokens per row, "
                               f"expected exactly {k}")
        _check_filtered(got, top_k_filter(z, k), f"top_k_filter(z, {k})",
                        "keep the k largest logits of each row (sort descending, take k)")


@pytest.mark.pitfall(TOPK)
def test_top_k_ties(submission):
    """With ties, exactly k survive: the lower token ids first."""
    z = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0, 3.0], [2.0, 2.0, 2.0, 2.0, 2.0, 2.0]],
                     dtype=torch.float64)
    for k in (2, 3):
        _check_filtered(submission.call("top_k_filter", z, k), top_k_filter(z, k),
                        f"top_k_filter with ties, k={k}",
                        "use a stable descending sort so that equal logits keep ascending ids, "
                        "and keep the first k of that order (a threshold `z >= k-th largest` "
                        "keeps every tied token)")


def test_top_k_batch_shapes_and_large_k(submission):
    """Any leading shape (..., V) works; k >= V returns the logits unchanged."""
    z = _logits(2, 3, 12, seed=5)
    _check_filtered(submission.call("top_k_filter", z, 4), top_k_filter(z, 4),
                    "top_k_filter on (2, 3, 12) logits", "filter along the last axis")
    for k in (12, 40):
        got = submission.call("top_k_filter", z, k)
        assert_equal(expect_tensor(got, shape=z.shape, name=f"top_k_filter(z, {k})")
                     .to(z.dtype), z, name=f"top_k_filter(z, k={k} >= V)",
                     hint="k >= V: nothing to filter")


@pytest.mark.weight(2)
@pytest.mark.pitfall(EMPTY)
def test_top_p_matches_reference(submission):
    """top_p_filter keeps the smallest most-probable set with mass >= p (several p)."""
    z = _logits(8, 40, seed=6)
    for p in (0.1, 0.5, 0.9, 0.99):
        _check_filtered(submission.call("top_p_filter", z, p), top_p_filter(z, p),
                        f"top_p_filter(z, {p})",
                        "sort by probability; keep a token iff the mass ranked before it is < p")


@pytest.mark.weight(2)
@pytest.mark.pitfall(EMPTY)
def test_top_p_never_empty(submission):
    """However small p is, the most probable token is kept (and with a tiny p, only it)."""
    peaked = torch.tensor([[5.0, 1.0, 0.0, -1.0, 0.5]], dtype=torch.float64)  # top prob ~0.96
    flat = torch.zeros(1, 5, dtype=torch.float64)  # a tie: token 0 is first
    z = torch.cat([peaked, flat, _logits(3, 20, seed=7)[:, :5]])
    for p in (1e-6, 0.3, 0.9):
        got = submission.call("top_p_filter", z, p)
        if isinstance(got, torch.Tensor) and got.shape == z.shape:
            empty = (~_kept(got)).all(-1)
            if empty.any():
                raise CheckFailure(
                    f"top_p_filter(z, {p}) removed every token of {int(empty.sum())} row(s): "
                    "the set must never be empty. Keep a token iff the mass ranked *before* it "
                    "is < p (the top token has 0 before it), not iff cumsum <= p")
        _check_filtered(got, top_p_filter(z, p), f"top_p_filter(z, {p})",
                        "the top token is always kept; with a tiny p it is the only one")


def test_top_p_is_the_smallest_set(submission):
    """The kept mass reaches p, and dropping the least probable kept token would fall below p."""
    z = _logits(6, 30, seed=8)
    p = 0.75
    got = submission.call("top_p_filter", z, p)
    if not isinstance(got, torch.Tensor) or got.shape != z.shape:
        raise CheckFailure("top_p_filter should return a tensor of the logits' shape")
    probs = torch.softmax(z, -1)
    kept = _kept(got)
    mass = (probs * kept).sum(-1)
    smallest = torch.where(kept, probs, torch.full_like(probs, 2.0)).amin(-1)
    if (mass < p - 1e-12).any():
        raise CheckFailure(f"the kept tokens hold only {mass.min():.3f} of the mass, less than "
                           f"p = {p}")
    if (mass - smallest >= p).any():
        raise CheckFailure("the kept set is not the smallest: without its least probable token "
                           f"it would still reach p = {p}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(EMPTY)
def test_sampling_distribution(submission):
    """20000 draws with t=0.8, top-k=6, top-p=0.8 follow the filtered, renormalised distribution."""
    z = _logits(1, 16, seed=9, scale=1.5)
    n = 20000
    code = """
g = torch.Generator().manual_seed(0)
result = sample_next_token(inputs["z"].expand(inputs["n"], -1).float(), temperature=0.8,
                           top_k=6, top_p=0.8, generator=g)
"""
    draws = expect_tensor(submission.run(code, z=z, n=n), shape=(n,), name="the sampled tokens")
    expected = torch.softmax(filter_logits(z[0], 0.8, 6, 0.8), dim=-1)
    counts = torch.bincount(draws.long().clamp(0, 15), minlength=16).to(torch.float64)
    if ((counts > 0) & (expected == 0)).any():
        bad = ((counts > 0) & (expected == 0)).nonzero().flatten().tolist()
        raise CheckFailure(f"tokens {bad} were sampled although the filters remove them")
    tv = 0.5 * (counts / n - expected).abs().sum().item()
    if tv > 0.02:
        raise CheckFailure(f"the sampled frequencies are {tv:.3f} (total variation) away from "
                           "softmax(filter_logits(z)): temperature, then top-k, then top-p")
