"""Hidden checks for part 7: the trained checkpoint handed in next to the notebook.

The student hands in ``encdec.safetensors`` (written by ``toolkit.seq2seq.save_encdec`` in
the notebook's training section, which grading does not run). The checker's code below
loads it into the student's *own* ``EncoderDecoder`` in the sandbox and decodes 400 fixed
held-out inputs greedily with a loop of its own (the student's ``encode`` and ``decode``,
no cache, so part 5 and 6 cost nothing here); the outputs come back and are compared with
the targets, which never leave this process.

Scoring: points scale with the exact-match accuracy ``a`` (an output counts when it equals
the target word for word) between 0 (0 points) and ``TARGET_ACCURACY = 0.5`` (full
points), as ten checks, one per 10% step: check ``i`` passes when ``a >= (i / 10) * 0.5``.
The reference notebook's model (600 steps of 64 examples) reaches about 0.7. Every step
also requires a sound checkpoint: it loads into the student's class with the expected
names, has the task's 45-token vocabulary and at most ``MAX_PARAMETERS`` parameters.
"""

from __future__ import annotations

import json

import pytest
import torch

from autograder.protocol.checklib import CheckFailure
from autograder.protocol import SubmissionError
from toolkit.seq2seq import NumberTokenizer, encode_batch, number_examples

pytestmark = pytest.mark.grade_cell("test_checkpoint")

TARGET_ACCURACY = 0.5
MAX_PARAMETERS = 2_000_000
N_EXAMPLES, SEED, MAX_NEW_TOKENS = 400, 2024, 12
STEPS = 10

RUN = """
import json as _json
import os as _os

import torch as _torch
from safetensors import safe_open as _safe_open
from toolkit.seq2seq import EncDecConfig as _Config

_path = _os.path.join(_os.getcwd(), "encdec.safetensors")
if not _os.path.isfile(_path):
    raise FileNotFoundError("encdec.safetensors was not handed in next to the notebook: run the "
                            "training section, which saves it, and submit the file too")
with _safe_open(_path, framework="pt", device="cpu") as _f:
    _meta = _f.metadata() or {}
    if "encdec_config" not in _meta:
        raise ValueError("encdec.safetensors has no encdec_config metadata: save it with "
                         "toolkit.seq2seq.save_encdec(model, path)")
    _config = _Config.from_dict(_json.loads(_meta["encdec_config"]))
    _names = list(_f.keys())
    _n_stored = sum(int(_torch.Size(_f.get_slice(_n).get_shape()).numel()) for _n in _names)
    _ok = _config.vocab_size == inputs["vocab_size"] and _n_stored <= inputs["max_parameters"]
    _state = {_n: _f.get_tensor(_n) for _n in _names} if _ok else None
result = {"config": _json.dumps(_config.to_dict()), "stored": _n_stored}
if _ok:
    _model = EncoderDecoder(_config).float()
    _missing, _unexpected = _model.load_state_dict(_state, strict=False)
    result["missing"], result["unexpected"] = list(_missing), list(_unexpected)
    if not _unexpected and not set(_missing) - {"lm_head.weight"}:
        _model.eval()
        with _torch.no_grad():
            _src = inputs["src"]
            _memory, _mask = _model.encode(_src)
            _tgt = _src.new_zeros((_src.size(0), 1))  # the start token
            for _ in range(inputs["max_new_tokens"]):
                _next = _model.decode(_tgt, _memory, _mask)[:, -1].argmax(-1)
                _tgt = _torch.cat([_tgt, _next[:, None]], dim=1)
        result["output"] = _tgt[:, 1:]
"""

_CACHE: dict = {}


def held_out_pairs() -> list[tuple[str, str]]:
    """The notebook's ``held_out_pairs()``: numbers that training never sees."""
    return number_examples(N_EXAMPLES, held_out=True, seed=SEED)


def levels() -> list[float]:
    return [TARGET_ACCURACY * i / STEPS for i in range(1, STEPS + 1)]


def evaluate(submission) -> float:
    """The checkpoint's exact-match accuracy, or CheckFailure saying why it earns nothing.
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
    tokenizer = NumberTokenizer()
    pairs = held_out_pairs()
    src, _ = encode_batch(pairs, tokenizer)
    got = submission.run(RUN, src=src, vocab_size=tokenizer.vocab_size,
                         max_parameters=MAX_PARAMETERS, max_new_tokens=MAX_NEW_TOKENS,
                         timeout=120)
    if not isinstance(got, dict) or "config" not in got:
        raise CheckFailure("could not load your checkpoint")
    config = json.loads(got["config"])
    if config.get("vocab_size") != tokenizer.vocab_size:
        raise CheckFailure(f"the checkpoint has vocab_size {config.get('vocab_size')}; the "
                           f"number task's tokenizer has {tokenizer.vocab_size} tokens")
    if got.get("stored", 0) > MAX_PARAMETERS:
        raise CheckFailure(f"the checkpoint holds {got['stored']:,} parameters; the limit is "
                           f"{MAX_PARAMETERS:,}")
    missing, unexpected = got.get("missing", ()), got.get("unexpected", ())
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise CheckFailure(f"the checkpoint does not fit your EncoderDecoder: missing "
                           f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    output = got.get("output")
    if not isinstance(output, torch.Tensor) or output.dim() != 2 or output.size(0) != len(pairs):
        raise CheckFailure("your model's greedy outputs could not be read")
    hits = sum(tokenizer.decode(row) == target for row, (_, target) in zip(output, pairs))
    return hits / len(pairs)


@pytest.mark.pitfall("Checkpoint missing or undertrained")
@pytest.mark.parametrize("step", range(1, STEPS + 1),
                         ids=[f"{10 * i}% of the points" for i in range(1, STEPS + 1)])
def test_exact_match(submission, step, record_property):
    """Your checkpoint converts enough held-out numbers exactly for this share of the points."""
    accuracy = evaluate(submission)
    record_property("measured", f"exact match {accuracy:.1%} on held-out numbers")
    level = levels()[step - 1]
    if accuracy < level:
        earned = sum(accuracy >= lv for lv in levels())
        raise CheckFailure(
            f"exact match {accuracy:.1%} on held-out numbers is below {level:.0%}, the level "
            f"for {10 * step}% of the points (full points at {TARGET_ACCURACY:.0%}): this "
            f"checkpoint earns {earned * 10}% of part 7's points. Train longer, or check "
            "your model")
