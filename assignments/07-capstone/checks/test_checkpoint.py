"""Hidden checks for part 7: the trained checkpoint handed in next to the notebook.

The student hands in ``capstone.safetensors`` (written by ``toolkit.train.save_checkpoint``
in the notebook's training section, which grading does not run). The grader copies it
into the sandbox's working directory; the checker's code below loads it into the
student's *own* ``GPT`` class there and returns the logits for fixed windows of the
validation split, which this process supplies. The loss is computed here, from those
logits and targets that never leave this process.

Scoring: points scale linearly with the validation loss ``L`` (mean next-byte
cross-entropy, nats per byte) between

* the **baseline**: the loss of the best model that ignores context, the byte frequencies
  of the training split (add-one smoothed) evaluated on the same windows: about 3.15
  nats/byte on CPython 3.11 (a uniform guess scores ln 256 = 5.545, an untrained model
  about 5.2-5.3), worth 0 points, and
* ``TARGET_LOSS = 2.5``: full points (a 115k-parameter modern-recipe model trained for
  300 steps gets about 2.2; the notebook's default run, 0.8M parameters and 600 steps,
  about 1.6),

as ten checks, one per 10% step: check ``i`` passes when
``L <= baseline - (i / 10) (baseline - target)``. Every step also requires a sound
model: the checkpoint loads into the student's class with the expected names, has
``vocab_size`` 256, ``max_seq_len >= 128`` and at most ``MAX_PARAMETERS`` parameters, is
causal (logits before position 64 do not change when later bytes change), and its loss
is not below ``IMPLAUSIBLE_LOSS`` (0.7 nats/byte: far below what a model of this size
trained on this corpus reaches without seeing the future or the validation text). A
checkpoint trained without the causal mask fails both of the last two.
"""

from __future__ import annotations

from functools import cache

import pytest
import torch
import torch.nn.functional as F

from autograder.protocol.checklib import CheckFailure
from autograder.protocol.checkpoints import (
    check_loaded_checkpoint,
    checkpoint_loader,
    once_per_submission,
)
from toolkit.data import load_corpus

pytestmark = pytest.mark.grade_cell("test_checkpoint")

TARGET_LOSS = 2.5
IMPLAUSIBLE_LOSS = 0.7
MAX_PARAMETERS = 8_000_000
N_WINDOWS, BLOCK, PROBE_ROWS, PROBE_FROM = 32, 128, 4, 64
STEPS = 10

# Runs in the student's kernel: loads the checkpoint into the student's GPT, then returns
# its logits on the validation windows and on the probe.
RUN = checkpoint_loader("capstone.safetensors", "gpt_config", "toolkit.models.GPTConfig", "GPT",
                        "toolkit.train.save_checkpoint(model, config, path)",
                        missing_ok=("lm_head.weight",)) + """
if _model is not None:
    with _torch.no_grad():
        result["logits"] = _model(inputs["x"])[0].float()
        result["probe"] = _model(inputs["probe"])[0].float()
"""


def validation_windows(n: int = N_WINDOWS, block: int = BLOCK) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` evenly spaced windows of ``block`` bytes of the fixed validation split, and
    their next bytes (the notebook's ``validation_windows`` does the same)."""
    val = load_corpus().val
    starts = torch.linspace(0, len(val) - block - 1, n).round().long()
    offsets = torch.arange(block)
    return val[starts[:, None] + offsets], val[starts[:, None] + offsets + 1]


def context_free_loss(train: torch.Tensor, y: torch.Tensor) -> float:
    """Cross-entropy of ``y`` under the add-one smoothed byte frequencies of ``train``."""
    counts = torch.bincount(train, minlength=256).double() + 1.0
    return float(-(counts / counts.sum()).log()[y.flatten()].mean())


@cache
def baseline_loss() -> float:
    """0 points: the loss of byte frequencies alone on the validation windows (about 3.15)."""
    _, y = validation_windows()
    return context_free_loss(load_corpus().train, y)


def levels() -> list[float]:
    """The ten loss levels, for 10%, 20%, ..., 100% of the points."""
    baseline = baseline_loss()
    return [baseline - (i / STEPS) * (baseline - TARGET_LOSS) for i in range(1, STEPS + 1)]


def _probe(x: torch.Tensor) -> torch.Tensor:
    """The first rows of ``x`` with every byte from ``PROBE_FROM`` on replaced."""
    probe = x[:PROBE_ROWS].clone()
    g = torch.Generator().manual_seed(0)
    probe[:, PROBE_FROM:] = torch.randint(0, 256, (PROBE_ROWS, x.size(1) - PROBE_FROM), generator=g)
    return probe


@once_per_submission
def evaluate(submission) -> float:
    """The checkpoint's validation loss, or CheckFailure saying why it earns nothing."""
    x, y = validation_windows()
    got = submission.run(RUN, x=x, probe=_probe(x), vocab_size=256, min_seq_len=BLOCK,
                         max_parameters=MAX_PARAMETERS, timeout=180)
    check_loaded_checkpoint(
        got, vocab_size=256, min_seq_len=BLOCK, max_parameters=MAX_PARAMETERS,
        model_class="GPT", missing_ok=("lm_head.weight",),
        vocab_note="the byte tokenizer needs 256",
        seq_note=f"the validation windows are {BLOCK} bytes long, so use at least {BLOCK}")
    logits, probe = got.get("logits"), got.get("probe")
    shape = (N_WINDOWS, BLOCK, 256)
    if not (isinstance(logits, torch.Tensor) and tuple(logits.shape) == shape
            and isinstance(probe, torch.Tensor) and tuple(probe.shape) == (PROBE_ROWS, *shape[1:])):
        raise CheckFailure(f"your model's logits should have shape {shape}")
    if not (torch.isfinite(logits).all() and torch.isfinite(probe).all()):
        raise CheckFailure("your model's logits on the validation text contain NaN or inf")
    before = slice(0, PROBE_FROM)
    if not torch.allclose(probe[:, before], logits[:PROBE_ROWS, before], atol=1e-3, rtol=1e-3):
        raise CheckFailure(
            f"your trained model is not causal: changing the bytes from position {PROBE_FROM} on "
            f"changed its logits at earlier positions. It sees the future, so its loss means "
            "nothing (train with the causal mask)")
    loss = F.cross_entropy(logits.double().flatten(0, 1), y.flatten()).item()
    if loss < IMPLAUSIBLE_LOSS:
        raise CheckFailure(
            f"validation loss {loss:.3f} nats/byte is implausibly low for this model and corpus "
            f"(below {IMPLAUSIBLE_LOSS}): a model that sees the future, or was trained on the "
            "validation text, scores like that. Refused")
    return loss


@pytest.mark.pitfall("Checkpoint missing, not causal, or undertrained")
@pytest.mark.parametrize("step", range(1, STEPS + 1),
                         ids=[f"{10 * i}% of the points" for i in range(1, STEPS + 1)])
def test_validation_loss(submission, step, record_property):
    """Your checkpoint's validation loss (nats/byte) reaches the level for this share."""
    loss = evaluate(submission)
    record_property("measured", f"validation loss {loss:.3f} nats/byte")
    all_levels = levels()
    level = all_levels[step - 1]
    if loss > level:
        earned = sum(loss <= lv for lv in all_levels)
        raise CheckFailure(
            f"validation loss {loss:.3f} nats/byte is above {level:.3f}, the level for "
            f"{10 * step}% of the points (0 points at {baseline_loss():.3f}, the loss of byte "
            f"frequencies alone; full points at {TARGET_LOSS}): this checkpoint earns "
            f"{earned * 10}% of part 7's points. Train longer, or check your model and train_step")
