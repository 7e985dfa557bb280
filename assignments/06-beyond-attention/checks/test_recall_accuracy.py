"""Hidden checks for Exercise 7b: ``recall_accuracy``, scored at the query positions only."""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure

pytestmark = pytest.mark.grade_cell("test_recall_accuracy")

ALL_POSITIONS = "Recall measured over all positions instead of the queries"


def _expected(logits, targets) -> float:
    scored = targets != -100
    return (logits.argmax(-1)[scored] == targets[scored]).float().mean().item()


def _case(seed, B=4, T=24, V=16, share_scored=0.3, share_right=0.5):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g)
    answers = torch.randint(V, (B, T), generator=g)
    right = torch.rand(B, T, generator=g) < share_right
    logits[right] = logits[right].scatter(-1, answers[right][:, None], 10.0)  # make them hits
    scored = torch.rand(B, T, generator=g) < share_scored
    scored[0, 0] = True
    return logits, torch.where(scored, answers, torch.full_like(answers, -100))


def _recall(submission, logits, targets) -> float:
    value = submission.call("recall_accuracy", logits, targets)
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        value = value.item()
    if not isinstance(value, (int, float)):
        raise CheckFailure(f"recall_accuracy should return a float, got {type(value).__name__}")
    return float(value)


@pytest.mark.weight(3)
@pytest.mark.pitfall(ALL_POSITIONS)
@pytest.mark.parametrize("seed, share_scored, share_right", [(0, 0.3, 0.5), (1, 0.1, 0.8),
                                                              (2, 0.6, 0.2)])
def test_matches_reference(submission, seed, share_scored, share_right):
    """Recall = share of the scored positions (targets != -100) whose arg-max is the target"""
    logits, targets = _case(seed, share_scored=share_scored, share_right=share_right)
    got, want = _recall(submission, logits, targets), _expected(logits, targets)
    if abs(got - want) > 1e-6:
        everywhere = (logits.argmax(-1) == targets).float().mean().item()
        hint = (" (that is the share over all positions: count only targets != -100)"
                if abs(got - everywhere) < 1e-6 else "")
        raise CheckFailure(f"expected {want:.4f}, got {got:.4f}{hint}")


def test_extremes(submission):
    """All scored positions right gives 1.0, all wrong gives 0.0, whatever the others do"""
    logits, targets = _case(3, share_scored=0.4)
    scored = targets != -100
    perfect = logits.clone()
    perfect[scored] = torch.nn.functional.one_hot(targets[scored], 16).float() * 20
    wrong = logits.clone()
    wrong[scored] = torch.nn.functional.one_hot((targets[scored] + 1) % 16, 16).float() * 20
    for name, x, want in (("perfect", perfect, 1.0), ("all wrong", wrong, 0.0)):
        got = _recall(submission, x, targets)
        if abs(got - want) > 1e-6:
            raise CheckFailure(f"{name} answers at the scored positions: expected {want}, "
                               f"got {got}")
