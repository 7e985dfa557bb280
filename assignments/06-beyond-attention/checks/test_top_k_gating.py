"""Hidden checks for Exercise 1a: ``top_k_gating`` under both gate conventions.

References come from :mod:`toolkit.moe.routing` in this (trusted) process. Inputs are
float64 with well-separated logits, so ties never decide the expert order.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, assert_equal, expect_tensor
from toolkit.moe.routing import top_k_gating

pytestmark = pytest.mark.grade_cell("test_top_k_gating")

ALL = "Softmax over all experts where the convention asks the k selected"
SELECTED = "Softmax over the k selected experts where the convention asks all of them"
GATHER = "Top-k probabilities not gathered per token"

TOL = dict(atol=1e-12, rtol=1e-10)


def _logits(*shape, seed: int) -> torch.Tensor:
    """Random float64 logits: continuous values, so ties (which would make the top-k
    order ambiguous) do not occur."""
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * 2


def _gates(submission, logits, k, gating, renormalize=False, name="top_k_gating"):
    got = submission.call("top_k_gating", logits, k, gating, renormalize=renormalize)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure(f"{name} should return a pair (gates, indices)")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall(ALL)
def test_mixtral_convention(submission):
    """topk_then_softmax: a softmax over each token's k selected logits (Mixtral)."""
    logits = _logits(3, 7, 8, seed=1)
    gates, indices = _gates(submission, logits, 2, "topk_then_softmax")
    expected_gates, expected_indices = top_k_gating(logits, 2, "topk_then_softmax")
    expect_tensor(gates, shape=(3, 7, 2), name="gates")
    wrong = torch.softmax(logits, -1).gather(-1, expected_indices)
    if torch.allclose(gates.to(wrong.dtype), wrong, atol=1e-9):
        raise CheckFailure("with gating='topk_then_softmax' your gates are softmax probabilities "
                           "over all experts: take the softmax over the k selected logits only "
                           "(the gates must sum to 1)")
    assert_close(gates, expected_gates, **TOL, name="gates (topk_then_softmax)",
                 hint="softmax(top_logits, dim=-1) with top_logits from logits.topk(k, dim=-1)")
    assert_equal(indices, expected_indices, name="indices (topk_then_softmax)",
                 hint="logits.topk(k, dim=-1).indices: each token's k largest, largest first")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SELECTED)
@pytest.mark.parametrize("k", [1, 3])
def test_switch_convention(submission, k):
    """softmax_then_topk without renormalisation: each token's own probabilities (Switch)."""
    logits = _logits(16, 6, seed=2 + k)
    gates, indices = _gates(submission, logits, k, "softmax_then_topk")
    expected_gates, expected_indices = top_k_gating(logits, k, "softmax_then_topk")
    expect_tensor(gates, shape=(16, k), name="gates")
    if torch.allclose(gates.to(logits.dtype), top_k_gating(logits, k, "topk_then_softmax")[0],
                      atol=1e-9):
        raise CheckFailure("with gating='softmax_then_topk' and renormalize=False your gates are a "
                           "softmax over the k selected logits (they sum to 1): take the softmax "
                           "over all experts, then keep each token's k largest probabilities")
    assert_close(gates, expected_gates, **TOL, name=f"gates (softmax_then_topk, k={k})",
                 hint="probs = softmax(logits, -1) over all experts; gates = probs at each token's "
                      "top-k indices")
    assert_equal(indices, expected_indices, name=f"indices (softmax_then_topk, k={k})")


@pytest.mark.pitfall(GATHER)
def test_each_token_gets_its_own_probabilities(submission):
    """Token t's gates are p[t, i_tj]: its own probabilities at its own experts."""
    # Every token prefers a different expert, so another token's row is always wrong.
    logits = torch.full((8, 8), -1.0, dtype=torch.float64)
    logits[torch.arange(8), torch.arange(8)] = 2.0
    logits[torch.arange(8), (torch.arange(8) + 3) % 8] = 1.0
    logits += 0.01 * _logits(8, 8, seed=5)
    gates, indices = _gates(submission, logits, 2, "softmax_then_topk")
    expect_tensor(gates, shape=(8, 2), name="gates")
    probs = torch.softmax(logits, -1)
    expected = torch.stack([probs[t, top_k_gating(logits, 2)[1][t]] for t in range(8)])
    if torch.allclose(gates.to(probs.dtype), probs.gather(0, top_k_gating(logits, 2)[1]),
                      atol=1e-9):
        raise CheckFailure("your gates come from other tokens' rows: gather along the expert axis "
                           "(probs.gather(-1, indices)), not the token axis")
    assert_close(gates, expected, **TOL, name="gates of each token",
                 hint="gates[t, j] = probs[t, indices[t, j]]: probs.gather(-1, indices)")


def test_renormalised_switch_equals_mixtral(submission):
    """softmax_then_topk with renormalize=True equals Mixtral's gates."""
    logits = _logits(4, 5, 6, seed=6)
    gates, _ = _gates(submission, logits, 2, "softmax_then_topk", renormalize=True)
    assert_close(gates, top_k_gating(logits, 2, "topk_then_softmax")[0], atol=1e-12, rtol=1e-9,
                 name="gates (softmax_then_topk, renormalize=True)",
                 hint="divide the k probabilities by their sum")


@pytest.mark.pitfall(GATHER)
@pytest.mark.property
@pytest.mark.parametrize("gating", ["topk_then_softmax", "softmax_then_topk"])
def test_renaming_the_experts_renames_the_choice(submission, gating):
    """Permuting the experts (the columns of the logits) permutes the chosen indices the same
    way and leaves the gates unchanged."""
    logits = _logits(12, 6, seed=8)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])  # new column c holds old expert perm[c]
    gates, indices = _gates(submission, logits, 2, gating)
    gates_p, indices_p = _gates(submission, logits[:, perm], 2, gating)
    expect_tensor(indices_p, shape=(12, 2), name="indices")
    assert_equal(perm[indices_p], indices, name="the experts chosen after renaming them",
                 hint="indices come from logits.topk(k, dim=-1), per token")
    assert_close(gates_p, gates, **TOL, name="the gates after renaming the experts",
                 hint="each token's gates depend only on its own logits, gathered along dim=-1")


def test_float32_and_leading_axes(submission):
    """float32 logits of shape (2, 3, 5, E) give float32 gates (2, 3, 5, k)."""
    logits = _logits(2, 3, 5, 8, seed=7).float()
    gates, indices = _gates(submission, logits, 3, "topk_then_softmax")
    expected_gates, expected_indices = top_k_gating(logits, 3, "topk_then_softmax")
    assert_close(gates, expected_gates, atol=1e-6, rtol=1e-5, name="float32 gates")
    assert_equal(indices, expected_indices, name="indices", hint="int64, from Tensor.topk")
