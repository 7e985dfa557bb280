"""Hidden checks for Exercise 6: the soft-target, cosine and distillation losses.

References come from :mod:`toolkit.distill` and from the definition of the KL divergence
written out here. Each classic mistake has a recognisable value (the KL without ``T^2``,
with the arguments swapped, with probabilities where log-probabilities belong, averaged
over the vocabulary too), which the first check names when it sees it.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.distill import distillation_loss, hidden_cosine_loss, soft_target_loss

pytestmark = pytest.mark.grade_cell("test_distillation")

T2 = "Distillation without T^2"
SWAP = "KL with teacher and student swapped"
LOG = "Softmax where the loss needs log-probabilities"
MEAN = "KL averaged over the vocabulary too (reduction='mean')"
TOL = dict(atol=1e-10, rtol=1e-8)

# In the student's kernel: the gradient of their soft loss with respect to the student's logits.
GRADIENTS = """
_out = []
for _T in inputs["temperatures"]:
    _s = inputs["student"].clone().requires_grad_(True)
    _t = inputs["teacher"].clone().requires_grad_(True)
    _loss = soft_target_loss(_s, _t, _T)
    _loss.backward()
    _out.append((_s.grad.norm().item(), _t.grad is None or bool((_t.grad == 0).all())))
result = _out
"""

# In the student's kernel: does distillation_loss leave the teacher alone?
TEACHER_GRAD = """
_s = inputs["s"].clone().requires_grad_(True)
_t = inputs["t"].clone().requires_grad_(True)
_hs = inputs["hs"].clone().requires_grad_(True)
_ht = inputs["ht"].clone().requires_grad_(True)
distillation_loss(_s, _t, inputs["labels"], 2.0, 0.5, 0.5, 1.0, _hs, _ht).backward()
result = (_t.grad is None or bool((_t.grad == 0).all()),
          _ht.grad is None or bool((_ht.grad == 0).all()), _s.grad is not None)
"""


def _logits(*shape, seed, scale=2.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64) * scale


def _kl(p, q):
    """KL(p || q) per row, from the definition."""
    return (p * (p.log() - q.log())).sum(-1)


def _same(a, b) -> bool:
    return isinstance(a, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, **TOL)


@pytest.mark.weight(3)
@pytest.mark.pitfall(T2)
def test_soft_target_loss(submission):
    """soft_target_loss = T^2 KL(softmax(z_t/T) || softmax(z_s/T)), mean over rows, T = 1..8."""
    s, t = _logits(8, 12, seed=1), _logits(8, 12, seed=2, scale=3.0)
    for T in (1.0, 2.5, 8.0):
        got = submission.call("soft_target_loss", s, t, T)
        expect_tensor(got, shape=(), dtype=torch.float64, name=f"soft_target_loss at T={T}")
        p_t, p_s = torch.softmax(t / T, -1), torch.softmax(s / T, -1)
        expected = T**2 * _kl(p_t, p_s).mean()
        mistakes = {
            "you forgot the T^2 factor": _kl(p_t, p_s).mean(),
            "you computed KL(student || teacher): the teacher's softened distribution is the "
            "target (F.kl_div(log_softmax(z_s / T), softmax(z_t / T)))":
                T**2 * _kl(p_s, p_t).mean(),
            "F.kl_div received probabilities where it expects log-probabilities: use "
            "F.log_softmax for the student": T**2 * F.kl_div(p_s, p_t, reduction="batchmean"),
            "the KL is averaged over the vocabulary too: use reduction='batchmean' "
            "(sum over the vocabulary, mean over rows)": T**2 * _kl(p_t, p_s).mean() / 12,
        }
        if T != 1.0:
            for message, value in mistakes.items():
                if _same(got, value) and not _same(got, expected):
                    raise CheckFailure(f"at T={T}: {message}")
        assert_close(got, expected, **TOL, name=f"soft_target_loss(z_s, z_t, T={T})",
                     hint="T^2 * KL(softmax(z_t / T) || softmax(z_s / T)), averaged over rows")


@pytest.mark.pitfall(MEAN)
def test_every_position_is_a_row(submission):
    """(B, T, V) logits: the mean KL per position, as for the same logits flattened to (B*T, V)."""
    s, t = _logits(2, 5, 9, seed=3), _logits(2, 5, 9, seed=4)
    got = submission.call("soft_target_loss", s, t, 2.0)
    assert_close(got, soft_target_loss(s, t, 2.0), **TOL, name="soft_target_loss on (2, 5, 9)",
                 hint="reshape both to (-1, V) before F.kl_div(..., reduction='batchmean'): "
                      "'batchmean' divides by the first axis only")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LOG)
@pytest.mark.property
def test_zero_exactly_when_they_agree(submission):
    """A student that equals its teacher has soft loss 0; any other student has more."""
    t = _logits(6, 10, seed=5)
    same = submission.call("soft_target_loss", t.clone(), t.clone(), 3.0)
    expect_tensor(same, shape=(), name="soft_target_loss(z, z, T)")
    if abs(same.item()) > 1e-10:
        raise CheckFailure(f"soft_target_loss(z, z, T=3) = {same.item():.4g}, but identical "
                           "distributions have KL 0. Does F.kl_div get the student's "
                           "*log*-probabilities (F.log_softmax)?")
    other = submission.call("soft_target_loss", _logits(6, 10, seed=6), t, 3.0)
    if not other.item() > 0:
        raise CheckFailure("the soft loss of a student that differs from its teacher must be > 0")


@pytest.mark.weight(2)
@pytest.mark.pitfall(T2)
@pytest.mark.property
def test_gradient_scale_independent_of_temperature(submission):
    """The gradient of T^2 KL keeps its size from T = 2 to T = 16; the teacher gets none."""
    s, t = _logits(32, 16, seed=7), _logits(32, 16, seed=8)
    got = submission.run(GRADIENTS, student=s, teacher=t, temperatures=[2.0, 16.0])
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("could not backpropagate through your soft_target_loss")
    (low, _), (high, _) = got
    if not high > 0 or low / high > 2.0:
        raise CheckFailure(f"the gradient with respect to the student's logits shrinks from "
                           f"{low:.3g} at T=2 to {high:.3g} at T=16: without T^2 the soft loss "
                           "fades like 1/T^2 as the temperature rises. Multiply the KL by T^2")


def test_hidden_cosine_loss(submission):
    """mean(1 - cos) over positions, only the real ones when attention_mask is given."""
    hs, ht = _logits(2, 5, 6, seed=9), _logits(2, 5, 6, seed=10)
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 0]])
    got = submission.call("hidden_cosine_loss", hs, ht)
    assert_close(got, hidden_cosine_loss(hs, ht), **TOL, name="hidden_cosine_loss(h_s, h_t)",
                 hint="F.cosine_similarity over the last axis, then mean of 1 - cos")
    got = submission.call("hidden_cosine_loss", hs, ht, mask)
    assert_close(got, hidden_cosine_loss(hs, ht, mask), **TOL,
                 name="hidden_cosine_loss(h_s, h_t, attention_mask)",
                 hint="average only over positions where attention_mask is 1")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SWAP)
def test_distillation_loss(submission):
    """alpha_soft T^2 KL + alpha_hard CE on the labelled rows, + alpha_cos cosine."""
    s, t = _logits(2, 6, 11, seed=11), _logits(2, 6, 11, seed=12)
    labels = torch.tensor([[3, -100, 1, -100, 7, 0], [-100, -100, 10, 2, -100, 5]])
    hs, ht = _logits(2, 6, 4, seed=13), _logits(2, 6, 4, seed=14)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2])
    cases = [
        ((s, t, labels), {}),
        ((s, t, labels, 3.0, 0.7, 0.3), {}),
        ((s, t, labels, 2.0, 5.0, 2.0, 1.0, hs, ht, mask), {}),
    ]
    for args, kwargs in cases:
        got = submission.call("distillation_loss", *args, **kwargs)
        expected = distillation_loss(*args, **kwargs)
        assert_close(got, expected, **TOL, name=f"distillation_loss with {len(args)} arguments",
                     hint="alpha_soft * soft_target_loss + alpha_hard * cross_entropy over the "
                          "rows whose label is not -100, + alpha_cos * hidden_cosine_loss")


@pytest.mark.property
def test_teacher_is_not_trained(submission):
    """Backpropagating the loss gives the student gradients and leaves the teacher alone."""
    got = submission.run(TEACHER_GRAD, s=_logits(5, 7, seed=15), t=_logits(5, 7, seed=16),
                         hs=_logits(1, 5, 3, seed=17), ht=_logits(1, 5, 3, seed=18),
                         labels=torch.tensor([1, -100, 3, 4, -100]))
    if got != (True, True, True):
        raise CheckFailure("distillation_loss sent gradients into the teacher's logits or hidden "
                           "states: the teacher is fixed, use teacher_logits.detach()")


@pytest.mark.structural
def test_alpha_cos_needs_hidden_states(submission):
    """alpha_cos > 0 without hidden states raises ValueError."""
    s, t = _logits(3, 5, seed=19), _logits(3, 5, seed=20)
    with expect_value_error("alpha_cos=1.0 without hidden states",
                            "alpha_cos=1.0 without student_hidden and teacher_hidden should "
                            "raise ValueError"):
        submission.call("distillation_loss", s, t, torch.tensor([1, 2, 3]), 2.0, 0.5, 0.5, 1.0)
