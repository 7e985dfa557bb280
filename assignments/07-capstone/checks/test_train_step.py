"""Hidden checks for Exercise 6: ``train_step``.

Most checks train a tiny model written here (an embedding and a linear layer, defined
again inside the checker's code in the student's kernel) with plain SGD, whose update
is proportional to the gradient, so clipping and stale gradients show in the weights.
The same steps run here with :func:`toolkit.train.train_step`. The last check runs the
student's own ``train_step`` on the student's own small ``GPT`` and asks the loss to fall.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close
from toolkit.train import train_step

pytestmark = pytest.mark.grade_cell("test_train_step")

ZERO = "Gradients not reset between steps (they accumulate)"
CLIP = "No gradient clipping"

TINY = """
import torch
import torch.nn.functional as F
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab=16, d=8):
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.proj = nn.Linear(d, vocab)

    def forward(self, idx, targets=None):
        logits = self.proj(self.embed(idx))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
        return logits, loss
"""

# In the student's kernel: TinyLM with our weights, SGD, the student's train_step per batch.
RUN = TINY + """
model = TinyLM().double()
model.load_state_dict(inputs["state"])
optimizer = torch.optim.SGD(model.parameters(), lr=inputs["lr"])
returned = []
for x, y in inputs["batches"]:
    returned.append(train_step(model, optimizer, x, y, grad_clip=inputs["clip"]))
grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
result = ([[float(a), float(b)] for a, b in returned],
          {n: p.detach().clone() for n, p in model.named_parameters()}, grads,
          [isinstance(a, float) and isinstance(b, float) for a, b in returned])
"""

_namespace: dict = {}
exec(compile(TINY, "<TinyLM>", "exec"), _namespace)
TinyLM = _namespace["TinyLM"]


def _initial_state(seed: int, scale: float = 1.0) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = TinyLM().double()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(scale)
    return {k: v.clone() for k, v in model.state_dict().items()}


def _batches(n: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    return [(torch.randint(0, 16, (4, 6), generator=g), torch.randint(0, 16, (4, 6), generator=g))
            for _ in range(n)]


def _reference(state, batches, lr, clip):
    model = TinyLM().double()
    model.load_state_dict(state)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    returned = [train_step(model, optimizer, x, y, grad_clip=clip) for x, y in batches]
    params = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return returned, params, grads


def _run(submission, state, batches, lr=0.5, clip=1.0):
    got = submission.run(RUN, state=state, batches=batches, lr=lr, clip=clip)
    if not isinstance(got, tuple) or len(got) != 4:
        raise CheckFailure("could not read the results of your train_step")
    returned, params, grads, floats = got
    return [tuple(r) for r in returned], params, grads, floats


def _compare_params(params, expected, hint):
    if not isinstance(params, dict) or set(params) != set(expected):
        raise CheckFailure("could not read the model's parameters after your train_step")
    for name, value in expected.items():
        assert_close(params[name], value, atol=1e-7, rtol=1e-6,
                     name=f"parameter {name} after the step(s)", hint=hint)


@pytest.mark.weight(2)
@pytest.mark.pitfall(CLIP)
def test_one_step_matches_reference(submission):
    """One step: the loss, the pre-clipping gradient norm and the updated weights match."""
    state, batches = _initial_state(1, scale=3.0), _batches(1, 2)
    returned, params, _, _ = _run(submission, state, batches, clip=1.0)
    exp_returned, exp_params, _ = _reference(state, batches, 0.5, 1.0)
    (loss, norm), (exp_loss, exp_norm) = returned[0], exp_returned[0]
    if not math.isclose(loss, exp_loss, rel_tol=1e-9):
        raise CheckFailure(f"train_step returned the loss {loss:.6g}, expected {exp_loss:.6g}: "
                           "the loss of the batch, computed before the update")
    if math.isclose(norm, 1.0, rel_tol=1e-6) and exp_norm > 1.0:
        raise CheckFailure("train_step returned the gradient norm *after* clipping (1.0): "
                           "return the norm measured before clipping")
    if not math.isclose(norm, exp_norm, rel_tol=1e-7):
        raise CheckFailure(f"train_step returned the gradient norm {norm:.6g}, expected "
                           f"{exp_norm:.6g}: sqrt(sum over parameters of ||grad||^2), before "
                           "clipping")
    _compare_params(params, exp_params, "zero_grad, loss.backward(), clip, optimizer.step()")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ZERO)
@pytest.mark.property
def test_steps_do_not_accumulate(submission):
    """Three steps on three batches: each step uses only its own batch's gradient."""
    state, batches = _initial_state(3), _batches(3, 4)
    returned, params, _, _ = _run(submission, state, batches, clip=None)
    exp_returned, exp_params, _ = _reference(state, batches, 0.5, None)
    norms, exp_norms = [r[1] for r in returned], [r[1] for r in exp_returned]
    if len(norms) == 3 and norms[0] == pytest.approx(exp_norms[0], rel=1e-7) and not (
            norms[1:] == pytest.approx(exp_norms[1:], rel=1e-7)):
        raise CheckFailure("from the second step on the gradients are wrong: they still hold "
                           "the previous steps' gradients. Call optimizer.zero_grad() first")
    _compare_params(params, exp_params, "call optimizer.zero_grad(set_to_none=True) each step")


@pytest.mark.weight(2)
@pytest.mark.pitfall(CLIP)
def test_clips_to_grad_clip(submission):
    """grad_clip=0.05: the gradients left in .grad have norm 0.05 and the step uses them."""
    state, batches = _initial_state(5, scale=3.0), _batches(1, 6)
    returned, params, grads, _ = _run(submission, state, batches, clip=0.05)
    exp_returned, exp_params, exp_grads = _reference(state, batches, 0.5, 0.05)
    if not isinstance(grads, dict) or set(grads) != set(exp_grads):
        raise CheckFailure("after train_step every parameter should have a .grad")
    total = math.sqrt(sum(float(g.pow(2).sum()) for g in grads.values()))
    if total > 0.05 * (1 + 1e-6):
        raise CheckFailure(f"after train_step(grad_clip=0.05) the gradient norm is {total:.4g}: "
                           "clip it with torch.nn.utils.clip_grad_norm_(model.parameters(), "
                           "grad_clip) before optimizer.step()")
    if not math.isclose(returned[0][1], exp_returned[0][1], rel_tol=1e-7):
        raise CheckFailure("the returned norm should be the norm before clipping")
    _compare_params(params, exp_params, "clip the gradients before optimizer.step()")


def test_no_clipping_when_off(submission):
    """grad_clip=None: the full gradient is used and its norm returned."""
    state, batches = _initial_state(7, scale=3.0), _batches(2, 8)
    returned, params, _, _ = _run(submission, state, batches, clip=None)
    exp_returned, exp_params, _ = _reference(state, batches, 0.5, None)
    for (_, norm), (_, exp_norm) in zip(returned, exp_returned):
        if not math.isclose(norm, exp_norm, rel_tol=1e-7):
            raise CheckFailure(f"with grad_clip=None, train_step returned the norm {norm:.6g}, "
                               f"expected {exp_norm:.6g} (grad_norm(model))")
    _compare_params(params, exp_params, "with grad_clip=None (or 0), do not clip")


@pytest.mark.structural
def test_returns_python_floats(submission):
    """train_step returns (loss, grad_norm) as two Python floats."""
    _, _, _, floats = _run(submission, _initial_state(9), _batches(1, 10))
    if list(floats) != [True]:
        raise CheckFailure("return (float(loss), float(norm)): Python floats, not tensors")


@pytest.mark.weight(2)
def test_loss_falls_on_your_gpt(submission):
    """Your train_step on your own small GPT: the loss falls over 25 steps on one batch."""
    code = """
import torch as _torch
from toolkit.models import GPTConfig as _GPTConfig
from toolkit.train import configure_optimizer as _configure

_torch.manual_seed(0)
_model = GPT(_GPTConfig.modern(d_model=32, n_layers=1, n_heads=4, max_seq_len=16)).train()
_opt = _configure(_model, 1e-2, 0.1)
result = [train_step(_model, _opt, inputs["x"], inputs["y"], grad_clip=1.0)[0]
          for _ in range(25)]
"""
    g = torch.Generator().manual_seed(11)
    x = torch.randint(0, 256, (4, 16), generator=g)
    y = torch.roll(x, -1, dims=1)
    losses = submission.run(code, x=x, y=y, timeout=120)
    if not isinstance(losses, tuple) or len(losses) != 25:
        raise CheckFailure("could not read 25 losses from your train_step")
    kinds = {"a tensor" if isinstance(v, torch.Tensor) else type(v).__name__ for v in losses
             if not isinstance(v, (int, float))}
    if kinds:
        raise CheckFailure(f"train_step returned the loss as {', '.join(sorted(kinds))}: return "
                           "loss.item(), a Python float, so that no graph is kept alive")
    if not all(math.isfinite(v) for v in losses):
        raise CheckFailure("train_step's loss became NaN or inf within 25 steps on a tiny "
                           "model: check the order zero_grad, backward, clip, step")
    if not losses[-1] < 0.7 * losses[0]:
        raise CheckFailure(f"the loss went from {losses[0]:.3f} to {losses[-1]:.3f} in 25 steps on "
                           "one repeated batch; it should fall well below 70% of the start")
