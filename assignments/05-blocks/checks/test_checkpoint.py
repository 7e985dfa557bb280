"""Hidden checks for part 7: the pre-trained encoder handed in next to the notebook.

The student hands in ``mlm.safetensors`` (written by ``toolkit.pretrain.save_bert`` in the
notebook's training section, which grading does not run). The grader copies it into the
sandbox's working directory; the code below loads it into the student's *own*
``TinyBert`` there and returns the MLM logits at the ``[MASK]`` positions of 128
validation pairs masked with a fixed seed (:func:`toolkit.pretrain.evaluation_batch`),
which this process supplies. The original words at those positions never leave this
process; the accuracy is computed here. Selected tokens left unchanged are not scored: a
model could copy them without reading any context.

Scoring: points scale linearly with the masked-word accuracy ``A`` between

* the **unigram baseline**, 0 points: always predicting the most frequent word of the
  training text (``,``), the best a model without context can do: about 4.5%;
* ``TARGET_ACCURACY = 0.09``, twice that, full points (the notebook's default run, two
  blocks and 600 steps, gets about 0.13; the one-block, 250-step run of
  ``prepare_submission.py`` about 0.10),

as ten checks, one per 10% step: check ``i`` passes when
``A >= baseline + (i / 10) (target - baseline)``. Every step also requires a sound
checkpoint: it loads into the student's class with the expected names, has the course
vocabulary, ``max_seq_len`` of at least the 63 positions of a pair and at most
``MAX_PARAMETERS`` parameters, and its accuracy is not above ``IMPLAUSIBLE_ACCURACY``
(0.6: only a model trained on the validation text scores like that).
"""

from __future__ import annotations

from functools import cache

import pytest
import torch

from autograder.protocol.checklib import CheckFailure
from autograder.protocol.checkpoints import (
    check_loaded_checkpoint,
    checkpoint_loader,
    once_per_submission,
)
from toolkit.pretrain import evaluation_batch, load_mlm_corpus, masked_accuracy, unigram_accuracy

pytestmark = pytest.mark.grade_cell("test_checkpoint")

TARGET_ACCURACY = 0.09
IMPLAUSIBLE_ACCURACY = 0.60
MAX_PARAMETERS = 4_000_000
STEPS = 10

# Runs in the student's kernel: loads the checkpoint into the student's TinyBert, then
# returns the MLM logits at the selected positions.
RUN = checkpoint_loader("mlm.safetensors", "bert_config", "toolkit.bert.BertConfig", "TinyBert",
                        "toolkit.pretrain.save_bert(model, path)",
                        missing_ok=("mlm_head.decoder.weight",)) + """
if _model is not None:
    with _torch.no_grad():
        _hidden = _model(inputs["input_ids"], inputs["token_type_ids"], inputs["attention_mask"])
        result["logits"] = _model.mlm_head(_hidden[inputs["selected"]]).float()
"""


@cache
def evaluation() -> tuple[dict, float, int]:
    """The masked validation batch, the unigram baseline and the vocabulary size."""
    corpus = load_mlm_corpus()
    batch = evaluation_batch(corpus)
    return batch, unigram_accuracy(corpus.train_stream, batch["labels"]), corpus.vocab.vocab_size


def levels() -> list[float]:
    """The ten accuracy levels, for 10%, 20%, ..., 100% of the points."""
    _, baseline, _ = evaluation()
    return [baseline + (i / STEPS) * (TARGET_ACCURACY - baseline) for i in range(1, STEPS + 1)]


@once_per_submission
def evaluate(submission) -> float:
    """The checkpoint's masked-word accuracy, or CheckFailure saying why it earns nothing."""
    batch, _, vocab_size = evaluation()
    selected = batch["labels"] != -100
    got = submission.run(RUN, input_ids=batch["input_ids"], token_type_ids=batch["token_type_ids"],
                         attention_mask=batch["attention_mask"], selected=selected,
                         vocab_size=vocab_size, min_seq_len=batch["input_ids"].size(1),
                         max_parameters=MAX_PARAMETERS, timeout=180)
    check_loaded_checkpoint(
        got, vocab_size=vocab_size, min_seq_len=batch["input_ids"].size(1),
        max_parameters=MAX_PARAMETERS, model_class="TinyBert",
        missing_ok=("mlm_head.decoder.weight",),
        vocab_note=f"the course vocabulary (load_mlm_corpus().vocab) has {vocab_size}",
        seq_note=f"the validation pairs have {batch['input_ids'].size(1)} positions")
    logits = got.get("logits")
    shape = (int(selected.sum()), vocab_size)
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != shape:
        raise CheckFailure(f"your model's MLM logits at the selected positions should have shape "
                           f"{shape}")
    if not torch.isfinite(logits).all():
        raise CheckFailure("your model's logits on the validation pairs contain NaN or inf")
    accuracy = masked_accuracy(logits, batch["labels"])
    if accuracy > IMPLAUSIBLE_ACCURACY:
        raise CheckFailure(
            f"masked-word accuracy {accuracy:.3f} is implausibly high for this model and corpus "
            f"(above {IMPLAUSIBLE_ACCURACY}): a model trained on the validation text scores like "
            "that. Refused")
    return accuracy


@pytest.mark.pitfall("Checkpoint missing, unloadable or undertrained")
@pytest.mark.parametrize("step", range(1, STEPS + 1),
                         ids=[f"{10 * i}% of the points" for i in range(1, STEPS + 1)])
def test_masked_word_accuracy(submission, step, record_property):
    """Your checkpoint's masked-word accuracy on validation reaches the level for this share."""
    accuracy = evaluate(submission)
    record_property("measured", f"masked-word accuracy {accuracy:.3f} on validation")
    all_levels = levels()
    level = all_levels[step - 1]
    if accuracy < level:
        earned = sum(accuracy >= lv for lv in all_levels)
        _, baseline, _ = evaluation()
        raise CheckFailure(
            f"masked-word accuracy {accuracy:.3f} is below {level:.3f}, the level for "
            f"{10 * step}% of the points (0 points at {baseline:.3f}, the unigram baseline; full "
            f"points at {TARGET_ACCURACY}): this checkpoint earns {earned * 10}% of part 7's "
            "points. Train longer, or check your model and masking")
