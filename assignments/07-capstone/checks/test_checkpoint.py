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

import json
from functools import cache

import pytest
import torch
import torch.nn.functional as F

from autograder.protocol.checklib import CheckFailure
from autograder.protocol.trusted import SubmissionError
from toolkit.data import load_corpus

pytestmark = pytest.mark.grade_cell("test_checkpoint")

TARGET_LOSS = 2.5
IMPLAUSIBLE_LOSS = 0.7
MAX_PARAMETERS = 8_000_000
N_WINDOWS, BLOCK, PROBE_ROWS, PROBE_FROM = 32, 128, 4, 64
STEPS = 10

# Runs in the student's kernel, in their working directory (where the grader copied the
# files they handed in). Returns the file's config, then, if it is acceptable, logits.
RUN = """
import json as _json
import os as _os

import torch as _torch
from safetensors import safe_open as _safe_open
from toolkit.models import GPTConfig as _GPTConfig

_path = _os.path.join(_os.getcwd(), "capstone.safetensors")
if not _os.path.isfile(_path):
    raise FileNotFoundError("capstone.safetensors was not handed in next to the notebook: run "
                            "the training section, which saves it, and submit the file too")
with _safe_open(_path, framework="pt", device="cpu") as _f:
    _meta = _f.metadata() or {}
    if "gpt_config" not in _meta:
        raise ValueError("capstone.safetensors has no gpt_config metadata: save it with "
                         "toolkit.train.save_checkpoint(model, config, path)")
    _config = _GPTConfig.from_dict(_json.loads(_meta["gpt_config"]))
    _names = list(_f.keys())
    _n_stored = sum(int(_torch.Size(_f.get_slice(_n).get_shape()).numel()) for _n in _names)
    _ok = (_config.vocab_size == 256 and _config.max_seq_len >= inputs["block"]
           and _n_stored <= inputs["max_parameters"])
    _state = {_n: _f.get_tensor(_n) for _n in _names} if _ok else None
result = {"config": _json.dumps(_config.to_dict()), "stored": _n_stored}
if _ok:
    _model = GPT(_config).float()
    _missing, _unexpected = _model.load_state_dict(_state, strict=False)
    result["missing"], result["unexpected"] = list(_missing), list(_unexpected)
    if not _unexpected and not set(_missing) - {"lm_head.weight"}:
        _model.eval()
        with _torch.no_grad():
            result["logits"] = _model(inputs["x"])[0].float()
            result["probe"] = _model(inputs["probe"])[0].float()
"""

_CACHE: dict = {}


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


def evaluate(submission) -> float:
    """The checkpoint's validation loss, or CheckFailure saying why it earns nothing.

    Computed once per submission and shared by the ten scoring checks."""
    if _CACHE.get("submission") is not submission:
        try:
            outcome = _evaluate(submission)
        except (CheckFailure, SubmissionError) as exc:
            outcome = exc
        _CACHE.clear()
        _CACHE.update(submission=submission, outcome=outcome)
    outcome = _CACHE["outcome"]
    if isinstance(outcome, Exception):
        raise CheckFailure(str(outcome))
    return outcome


def _evaluate(submission) -> float:
    x, y = validation_windows()
    got = submission.run(RUN, x=x, probe=_probe(x), block=BLOCK, max_parameters=MAX_PARAMETERS,
                         timeout=180)
    if not isinstance(got, dict) or "config" not in got:
        raise CheckFailure("could not load your checkpoint")
    config = json.loads(got["config"])
    if config.get("vocab_size") != 256:
        raise CheckFailure(f"the checkpoint has vocab_size {config.get('vocab_size')}; the byte "
                           "tokenizer needs 256")
    if config.get("max_seq_len", 0) < BLOCK:
        raise CheckFailure(f"the checkpoint has max_seq_len {config.get('max_seq_len')}; the "
                           f"validation windows are {BLOCK} bytes long, so use at least {BLOCK}")
    if got.get("stored", 0) > MAX_PARAMETERS:
        raise CheckFailure(f"the checkpoint holds {got['stored']:,} parameters; the limit is "
                           f"{MAX_PARAMETERS:,} (the grader evaluates it on a CPU)")
    missing, unexpected = got.get("missing", ()), got.get("unexpected", ())
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise CheckFailure(f"the checkpoint does not fit your GPT: missing {sorted(missing)[:5]}, "
                           f"unexpected {sorted(unexpected)[:5]}")
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
def test_validation_loss(submission, step):
    """Your checkpoint's validation loss (nats/byte) reaches the level for this share."""
    loss = evaluate(submission)
    all_levels = levels()
    level = all_levels[step - 1]
    if loss > level:
        earned = sum(loss <= lv for lv in all_levels)
        raise CheckFailure(
            f"validation loss {loss:.3f} nats/byte is above {level:.3f}, the level for "
            f"{10 * step}% of the points (0 points at {baseline_loss():.3f}, the loss of byte "
            f"frequencies alone; full points at {TARGET_LOSS}): this checkpoint earns "
            f"{earned * 10}% of part 7's points. Train longer, or check your model and train_step")
