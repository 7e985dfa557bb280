"""Hidden checks for Exercise 1b: ``load_balancing_loss``, alpha * N * sum_i f_i P_i.

The reference is :func:`toolkit.moe.routing.load_balancing_loss`, which the project's
tests prove equal to Hugging Face's Mixtral ``load_balancing_loss_func``.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.moe.routing import load_balancing_loss

pytestmark = pytest.mark.grade_cell("test_load_balancing_loss")

SAME = "Load-balancing loss with f and P from the same tensor"
NO_N = "Load-balancing loss without the factor N"

TOL = dict(atol=1e-12, rtol=1e-10)


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _scalar(value, name) -> torch.Tensor:
    value = expect_tensor(value, name=name)
    if value.numel() != 1:
        raise CheckFailure(f"{name} should be a scalar tensor, got shape {tuple(value.shape)}")
    return value.reshape(())


def _diagnose(got: torch.Tensor, logits: torch.Tensor, k: int, alpha: float = 1.0) -> None:
    n_experts = logits.size(-1)
    expected = load_balancing_loss(logits, k, alpha=alpha)
    if torch.allclose(got.double(), expected / n_experts, atol=1e-10):
        raise CheckFailure(f"your loss is the expected value divided by N = {n_experts}: multiply "
                           "by the number of experts, so that balanced routing costs alpha * k "
                           "whatever N is")
    probs = torch.softmax(logits, -1)
    soft = alpha * n_experts * (probs.mean(0) ** 2).sum()
    if torch.allclose(got.double(), soft, atol=1e-10):
        raise CheckFailure("your f_i is the mean router probability, like P_i: f_i must be the "
                           "share of tokens actually routed to expert i (hard top-k counts)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SAME)
def test_matches_reference_top2(submission):
    """N * sum_i f_i P_i for top-2 routing of 64 tokens over 8 experts."""
    logits = _randn(64, 8, seed=1)
    got = _scalar(submission.call("load_balancing_loss", logits, 2), "load_balancing_loss")
    _diagnose(got, logits, 2)
    assert_close(got, load_balancing_loss(logits, 2), **TOL, name="load_balancing_loss(k=2)",
                 hint="f_i: share of tokens whose top-k contains i; P_i: mean softmax "
                      "probability of i; return alpha * N * sum_i f_i P_i")


@pytest.mark.pitfall(NO_N)
def test_switch_top1_with_alpha(submission):
    """k = 1 and alpha = 0.01 give Switch's loss alpha * N * sum_i f_i P_i."""
    logits = _randn(40, 5, seed=2)
    got = _scalar(submission.call("load_balancing_loss", logits, 1, alpha=0.01),
                  "load_balancing_loss(k=1, alpha=0.01)")
    _diagnose(got, logits, 1, alpha=0.01)
    probs = torch.softmax(logits, -1)
    f = torch.stack([(probs.argmax(-1) == i).double().mean() for i in range(5)])
    assert_close(got, 0.01 * 5 * (f * probs.mean(0)).sum(), **TOL,
                 name="load_balancing_loss(k=1, alpha=0.01)", hint="multiply by alpha")


@pytest.mark.weight(2)
def test_layers_and_padding(submission):
    """A tuple of three layers' logits and an attention mask: padding counts nowhere."""
    layers = tuple(_randn(3 * 6, 8, seed=s) for s in (3, 4, 5))
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
    got = _scalar(submission.call("load_balancing_loss", layers, 2, mask),
                  "load_balancing_loss(layers, 2, attention_mask)")
    unmasked = load_balancing_loss(layers, 2)
    if torch.allclose(got.double(), unmasked, atol=1e-10):
        raise CheckFailure("padding tokens were counted: average f and P with the per-token "
                           "`weight` (0 for padding), dividing by the number of real tokens")
    assert_close(got, load_balancing_loss(layers, 2, mask), **TOL,
                 name="load_balancing_loss with layers and padding",
                 hint="f = (routed * weight[:, None]).sum(0) / weight.sum(), the same for P")


@pytest.mark.property
def test_padding_logits_change_nothing(submission):
    """Whatever the router says at padded positions, the loss stays the same."""
    logits = _randn(2 * 5, 6, seed=7)
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    moved = logits.clone()
    moved[3:5] = 10.0 * _randn(2, 6, seed=8)  # the padded tokens of sequence 0
    got = [_scalar(submission.call("load_balancing_loss", x, 2, mask),
                   "load_balancing_loss(logits, 2, attention_mask)") for x in (logits, moved)]
    assert_close(got[1], got[0], **TOL, name="the loss after changing padded tokens' logits",
                 hint="padding (attention_mask 0) counts in neither f nor P: weight each token")


@pytest.mark.pitfall(SAME)
def test_gradient_flows_through_p_only(submission):
    """The gradient with respect to the logits is that of alpha * N * sum_i f_i P_i, f fixed."""
    logits = _randn(32, 6, seed=6)
    code = (
        "logits = inputs['logits'].clone().requires_grad_(True)\n"
        "loss = load_balancing_loss(logits, 2)\n"
        "loss.backward()\n"
        "result = (loss.detach(), logits.grad)\n"
    )
    got = submission.run(code, logits=logits)
    if not isinstance(got, tuple) or len(got) != 2 or got[1] is None:
        raise CheckFailure("no gradient reached the logits: P_i must come from the softmax of "
                           "the logits, with its graph (do not detach it)")
    reference = logits.clone().requires_grad_(True)
    expected = load_balancing_loss(reference, 2)
    expected.backward()
    assert_close(got[0], expected.detach(), **TOL, name="the loss")
    assert_close(got[1], reference.grad, **TOL, name="d loss / d logits",
                 hint="f_i comes from hard counts (no gradient), P_i from the probabilities")


@pytest.mark.pitfall(NO_N)
def test_balanced_routing_costs_alpha_k(submission):
    """Perfectly balanced routing with uniform probabilities costs alpha * k for any N."""
    for n_experts in (4, 16):
        logits = torch.eye(n_experts, dtype=torch.float64) * 1e-6  # expert i first for token i
        got = _scalar(submission.call("load_balancing_loss", logits, 1, alpha=0.3),
                      f"load_balancing_loss with {n_experts} balanced experts")
        if abs(got.item() - 0.3) > 1e-5:
            raise CheckFailure(f"with {n_experts} experts used evenly the loss should be alpha * k "
                               f"= 0.3, got {got.item():.6f}. The factor N makes that level "
                               "independent of the number of experts")
