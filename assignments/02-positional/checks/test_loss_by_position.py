"""Hidden checks for Exercise 6a: loss by position.

The check builds small models of its own (no positions and learned positions, random
weights scaled up so the logits are far from uniform), sends their weights to the
student's kernel, and compares the student's ``loss_by_position`` with the toolkit's on
windows it draws: values, the float64 dtype, and the causal property (the loss at
position ``t`` does not change when later tokens do).
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.long_context import loss_by_position, position_model

pytestmark = pytest.mark.grade_cell("test_loss_by_position")

UNSHIFTED = "Loss by position scores the token the model just read (targets not shifted)"
SOFTMAX_AXIS = "Loss by position normalised over the positions instead of the vocabulary"

BUILD = (
    "import torch\n"
    "from toolkit.long_context import position_model\n"
    "model = position_model(inputs['position'], inputs['train_len'], n_layers=1, d_model=32,\n"
    "                       n_heads=4, max_seq_len=inputs['max_seq_len'])\n"
    "model.load_state_dict(inputs['state'])\n"
)


def _model(position: str, seed: int, train_len: int = 48, max_seq_len: int = 96):
    torch.manual_seed(seed)
    model = position_model(position, train_len, n_layers=1, d_model=32, n_heads=4,
                           max_seq_len=max_seq_len)
    with torch.no_grad():
        model.wte.weight.mul_(10)  # sharper predictions than the 0.02 initialisation gives
    return model.eval(), {"position": position, "train_len": train_len, "max_seq_len": max_seq_len}


def _student(submission, model, spec, windows):
    state = {k: v.clone() for k, v in model.state_dict().items()}
    out = submission.run(BUILD + "result = loss_by_position(model, inputs['windows'])\n",
                         state=state, windows=windows, **spec)
    return expect_tensor(out, shape=(windows.shape[1] - 1,), dtype=torch.float64,
                         name=f"loss_by_position(model, windows of shape {tuple(windows.shape)})")


@pytest.mark.weight(2)
@pytest.mark.pitfall(UNSHIFTED)
def test_values_on_hidden_models(submission):
    """Per-position next-token loss of two models on hidden windows, against the reference."""
    g = torch.Generator().manual_seed(3)
    for seed, (position, n, T) in enumerate((("none", 4, 60), ("learned", 3, 48),
                                              ("none", 1, 2))):
        model, spec = _model(position, seed)
        windows = torch.randint(0, 256, (n, T + 1), generator=g)
        expected = loss_by_position(model, windows)
        assert_close(_student(submission, model, spec, windows), expected, atol=1e-6, rtol=1e-6,
                     name=f"loss by position ({position} model, {n} windows of {T + 1} tokens)",
                     hint="logits of model(windows[:, :-1]); targets windows[:, 1:]; "
                          "-log_softmax over the vocabulary, averaged over the windows")


@pytest.mark.weight(1)
@pytest.mark.pitfall(SOFTMAX_AXIS)
def test_mean_matches_the_models_own_loss(submission):
    """The mean over positions equals the model's mean next-token cross-entropy."""
    model, spec = _model("none", 11)
    windows = torch.randint(0, 256, (5, 41), generator=torch.Generator().manual_seed(4))
    per_position = _student(submission, model, spec, windows)
    with torch.no_grad():
        _, loss = model(windows[:, :-1], windows[:, 1:])
    if abs(per_position.mean().item() - loss.item()) > 1e-4:
        raise CheckFailure(
            f"the mean of your per-position losses is {per_position.mean().item():.5f}, the "
            f"model's own mean next-token loss is {loss.item():.5f}: take log_softmax over the "
            "vocabulary (the last axis) and score windows[:, 1:]")


@pytest.mark.property
def test_loss_at_t_ignores_later_tokens(submission):
    """Changing tokens after position t + 1 leaves the loss at positions <= t unchanged."""
    model, spec = _model("learned", 12)
    g = torch.Generator().manual_seed(5)
    windows = torch.randint(0, 256, (3, 41), generator=g)
    changed = windows.clone()
    changed[:, 25:] = torch.randint(0, 256, (3, 16), generator=g)
    a = _student(submission, model, spec, windows)
    b = _student(submission, model, spec, changed)
    if not torch.allclose(a[:24], b[:24], atol=1e-6):
        raise CheckFailure("the loss at position t changed when only tokens after t + 1 did: "
                           "a causal model's prediction at t reads tokens 0..t only")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_bad_windows_are_rejected(submission):
    """A 1-D tensor, a single column and float windows raise ValueError."""
    model, spec = _model("none", 13)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    for bad, what in ((torch.zeros(10, dtype=torch.long), "1-D windows"),
                      (torch.zeros(3, 1, dtype=torch.long), "windows with one column"),
                      (torch.zeros(3, 8), "float windows")):
        with expect_value_error(what, f"loss_by_position accepted {what}"):
            submission.run(BUILD + "result = loss_by_position(model, inputs['windows'])\n",
                           state=state, windows=bad, **spec)
