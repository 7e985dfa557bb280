"""Hidden checks for part 9: the fine-tuned classifier handed in next to the notebook.

The student hands in ``classifier.safetensors`` (``toolkit.finetune.save_classifier``,
in the notebook's fine-tuning cell, which grading does not run) next to
``mlm.safetensors``. In the sandbox the code below loads it into the student's own
``BertClassifier`` around the student's ``TinyBert`` (5 labels) and returns

* its logits on the 160 held-out examples of :func:`toolkit.finetune.module_task`,
  built here with the course's :func:`toolkit.finetune.encode_pairs` (their labels never
  leave this process);
* for every weight matrix (2-D tensor) of ``mlm.safetensors``, the cosine similarity
  between it and the same matrix of the classifier's encoder, flattened.

Fine-tuning for the notebook's 120 steps moves a pre-trained matrix only part of the way,
so its cosine with the pre-trained one stays high (the smallest of a run: 0.85 to 0.88 over
two pre-trainings and four fine-tuning seeds); a classifier fine-tuned from a fresh
encoder has cosines near 0, the largest smallest one 0.26 in the same eight runs (the
matrices are independent draws), so ``MIN_COSINE = 0.5`` tells the two apart with a
margin either way.

The accuracy levels are no test of pre-training: at this size a fresh encoder fine-tunes
*better* on this task (held-out 0.76 to 0.81 against 0.44 to 0.69 for the pre-trained one
in those runs; masked-LM never trains ``[CLS]``). They check that the fine-tuning worked:
0.30 and 0.40, below the lowest pre-trained run with a margin, against 0.20 for one class.

Scoring: three checks of one point each: the encoder descends from ``mlm.safetensors``
(every cosine at least ``MIN_COSINE``), and held-out accuracy at least
``ACCURACY_FLOOR`` and ``ACCURACY_TARGET`` (each with the descent check passed: the
points are for fine-tuning *the pre-trained* encoder). One class alone scores 0.20.
"""

from __future__ import annotations

import json
from functools import cache

import pytest
import torch

from autograder.protocol.checklib import CheckFailure
from autograder.protocol.checkpoints import (
    check_loaded_checkpoint,
    checkpoint_loader,
    once_per_submission,
)
from toolkit.finetune import TASK_MODULES, TASK_SEQ_LEN, module_task
from toolkit.pretrain import load_mlm_corpus

pytestmark = pytest.mark.grade_cell("test_finetuned_checkpoint")

MIN_COSINE = 0.5
ACCURACY_FLOOR = 0.30
ACCURACY_TARGET = 0.40
MAX_PARAMETERS = 4_000_000
TIED = "bert.mlm_head.decoder.weight"

NOT_LOADED = "Pre-trained weights not loaded"
UNDERTRAINED = "Checkpoint missing, unloadable or undertrained"

# The student's classifier class around the student's encoder, built from the file's config.
RUN = ("def _Classifier(_c):\n    return BertClassifier(TinyBert(_c), inputs['n_labels'])\n"
       + checkpoint_loader("classifier.safetensors", "bert_config", "toolkit.bert.BertConfig",
                           "_Classifier", "toolkit.finetune.save_classifier(classifier, path)",
                           missing_ok=(TIED,)) + """
if _model is not None:
    with _torch.no_grad():
        result["logits"] = _model(inputs["input_ids"], inputs["token_type_ids"],
                                  inputs["attention_mask"]).float()
    _pre_path = _os.path.join(_os.getcwd(), "mlm.safetensors")
    if _os.path.isfile(_pre_path):
        _encoder = _model.bert.state_dict()
        _cosines = {}
        with _safe_open(_pre_path, framework="pt", device="cpu") as _g:
            for _n in _g.keys():
                _p = _g.get_tensor(_n).float()
                if _p.dim() != 2:
                    continue
                _w = _encoder.get(_n)
                _cosines[_n] = (-2.0 if _w is None or _w.shape != _p.shape else float(
                    _torch.nn.functional.cosine_similarity(_w.flatten().float(), _p.flatten(),
                                                           dim=0)))
        result["cosines"] = _json.dumps(_cosines)
""")


@cache
def held_out() -> tuple[dict, int]:
    """The held-out examples and the vocabulary size."""
    vocab = load_mlm_corpus().vocab
    return module_task(vocab)[1], vocab.vocab_size


@once_per_submission
def evaluate(submission) -> tuple[float, dict]:
    """The held-out accuracy and the cosines with ``mlm.safetensors`` (None: no such file)."""
    data, vocab_size = held_out()
    got = submission.run(RUN, input_ids=data["input_ids"], token_type_ids=data["token_type_ids"],
                         attention_mask=data["attention_mask"], n_labels=len(TASK_MODULES),
                         vocab_size=vocab_size, min_seq_len=TASK_SEQ_LEN,
                         max_parameters=MAX_PARAMETERS, timeout=180)
    check_loaded_checkpoint(
        got, vocab_size=vocab_size, min_seq_len=TASK_SEQ_LEN, max_parameters=MAX_PARAMETERS,
        model_class="BertClassifier (5 labels) around your TinyBert", missing_ok=(TIED,),
        vocab_note=f"the course vocabulary (load_mlm_corpus().vocab) has {vocab_size}",
        seq_note=f"the task's pairs have {TASK_SEQ_LEN} positions")
    logits = got.get("logits")
    shape = (len(data["labels"]), len(TASK_MODULES))
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != shape:
        raise CheckFailure(f"your classifier's logits on the held-out examples should have "
                           f"shape {shape}")
    if not torch.isfinite(logits).all():
        raise CheckFailure("your classifier's logits on the held-out examples contain NaN or inf")
    accuracy = (logits.argmax(-1) == data["labels"]).double().mean().item()
    cosines = json.loads(got["cosines"]) if got.get("cosines") else None
    return accuracy, cosines


def _descent(cosines) -> None:
    """CheckFailure unless the encoder descends from mlm.safetensors."""
    if cosines is None:
        raise CheckFailure("mlm.safetensors was not handed in: the fine-tuned classifier must "
                           "start from it (hand in both files)")
    if not cosines:
        raise CheckFailure("mlm.safetensors holds no weight matrix")
    name, lowest = min(cosines.items(), key=lambda item: item[1])
    if lowest < MIN_COSINE:
        raise CheckFailure(
            f"your fine-tuned encoder does not descend from your mlm.safetensors: its {name} "
            + ("is missing or has another shape" if lowest < -1 else
               f"has a cosine similarity of {lowest:.2f} with the pre-trained one (at least "
               f"{MIN_COSINE}; fine-tuning keeps it near 1)")
            + ". Start fine-tuning from the pre-trained weights (classifier_from_pretrained)")


@pytest.mark.pitfall(NOT_LOADED)
def test_encoder_descends_from_the_pretrained_checkpoint(submission, record_property):
    """Every weight matrix of the fine-tuned encoder has a cosine of at least 0.5 with the
    same matrix of mlm.safetensors."""
    accuracy, cosines = evaluate(submission)
    if cosines:
        record_property("measured", f"smallest cosine with mlm.safetensors "
                                    f"{min(cosines.values()):.3f}")
    _descent(cosines)


@pytest.mark.pitfall(UNDERTRAINED)
@pytest.mark.parametrize("level", [ACCURACY_FLOOR, ACCURACY_TARGET],
                         ids=["floor 0.30", "target 0.40"])
def test_held_out_accuracy(submission, level, record_property):
    """The fine-tuned classifier's accuracy on the 160 held-out examples reaches the level."""
    accuracy, cosines = evaluate(submission)
    record_property("measured", f"held-out accuracy {accuracy:.3f}")
    _descent(cosines)
    if accuracy < level:
        raise CheckFailure(
            f"held-out accuracy {accuracy:.3f} is below {level} (one class alone scores 0.20): "
            "fine-tune longer, or check your classifier and your encode_pairs")
