"""Hidden checks for exercise 7d: the trained hybrid handed in as ``hybrid.safetensors``.

The notebook's training cell trains the hybrid ``"MA"`` with the student's ``HybridLM``,
``selective_scan`` and ``mqar_batch`` and saves it with ``toolkit.hybrid.save_hybrid``
(weights plus the arguments that rebuild the model). The code below runs in the student's
kernel: it rebuilds that model with the student's *own* ``HybridLM`` and ``selective_scan``,
loads the weights strictly, and returns the arg-max token at every position of fixed MQAR
sequences made here (``toolkit.hybrid.mqar_batch``, 8 pairs, vocabulary 32). The targets
never leave this process; recall is scored at the query positions only.

Scoring: points scale with the recall ``r`` between 0 and ``TARGET_RECALL = 0.6`` (full
points) as five checks, check ``i`` passing when ``r >= (i / 5) * 0.6``. Chance is about
``2 / 32``; the reference's hybrid recalls 97-100%. Every check also needs a sound file:
the task's vocabulary, a hybrid pattern (both ``A`` and ``M`` layers), at most
``MAX_PARAMETERS`` parameters, and weights that fit the student's class exactly.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure
from autograder.protocol.checkpoints import (
    check_loaded_checkpoint,
    checkpoint_loader,
    once_per_submission,
)
from toolkit.hybrid import IGNORE, mqar_batch
from toolkit.hybrid.checkpoint import METADATA_KEY

pytestmark = pytest.mark.grade_cell("test_hybrid_checkpoint")

TARGET_RECALL = 0.6
VOCAB_SIZE, N_PAIRS, N_SEQUENCES, SEED = 32, 8, 256, 2026
MAX_PARAMETERS = 200_000
STEPS = 5

# Runs in the student's kernel: the file loaded into their own HybridLM (with their own
# selective_scan), then its arg-max at every position of the sequences sent.
RUN = checkpoint_loader(
    "hybrid.safetensors", METADATA_KEY, "toolkit.hybrid.checkpoint.HybridArguments", "HybridLM",
    saved_by="toolkit.hybrid.save_hybrid(model, path, **arguments)",
    build="HybridLM(**_config.to_dict(), scan=selective_scan)") + """
if _model is not None:
    with _torch.no_grad():
        result["predictions"] = _model(inputs["ids"]).argmax(-1)
"""


def evaluation_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """``(ids, targets)``, each ``(N_SEQUENCES, 4 N_PAIRS)``: fixed sequences training never saw."""
    return mqar_batch(N_SEQUENCES, N_PAIRS, VOCAB_SIZE,
                      generator=torch.Generator().manual_seed(SEED))


def levels() -> list[float]:
    return [TARGET_RECALL * i / STEPS for i in range(1, STEPS + 1)]


@once_per_submission
def recall(submission) -> float:
    """The handed-in hybrid's recall at the query positions, or CheckFailure saying why it
    earns nothing."""
    ids, targets = evaluation_batch()
    got = submission.run(RUN, ids=ids, vocab_size=VOCAB_SIZE, min_seq_len=ids.size(1),
                         max_parameters=MAX_PARAMETERS, timeout=120)
    arguments = check_loaded_checkpoint(
        got, vocab_size=VOCAB_SIZE, min_seq_len=ids.size(1), max_parameters=MAX_PARAMETERS,
        model_class="HybridLM", vocab_note=f"MQAR in this notebook has {VOCAB_SIZE} tokens",
        seq_note=f"the check's sequences of {N_PAIRS} pairs have {ids.size(1)} tokens")
    if set(str(arguments.get("pattern", ""))) != {"A", "M"}:
        raise CheckFailure(f"hybrid.safetensors holds the pattern {arguments.get('pattern')!r}; "
                           "hand in the hybrid (attention and Mamba layers, \"MA\")")
    predictions = got.get("predictions")
    if not isinstance(predictions, torch.Tensor) or predictions.shape != ids.shape:
        raise CheckFailure("your model's predictions could not be read: expected logits "
                           f"of shape {tuple(ids.shape) + (VOCAB_SIZE,)}")
    scored = targets != IGNORE
    return (predictions.long()[scored] == targets[scored]).float().mean().item()


@pytest.mark.pitfall("Hybrid checkpoint missing or undertrained")
@pytest.mark.parametrize("step", range(1, STEPS + 1),
                         ids=[f"{100 * i // STEPS}% of the points" for i in range(1, STEPS + 1)])
def test_recall_of_the_handed_in_hybrid(submission, step, record_property):
    """Your trained hybrid recalls enough values at 8 pairs for this share of the points."""
    measured = recall(submission)
    record_property("measured", f"recall {measured:.1%} at {N_PAIRS} pairs")
    level = levels()[step - 1]
    if measured < level:
        earned = sum(measured >= lv for lv in levels())
        raise CheckFailure(
            f"your hybrid recalls {measured:.1%} of the values at {N_PAIRS} pairs; this share "
            f"of the points needs {level:.0%} (full points from {TARGET_RECALL:.0%}; you earn "
            f"{earned} of {STEPS} steps). Train longer, or check mqar_batch and HybridLM")

