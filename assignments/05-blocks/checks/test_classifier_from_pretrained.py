"""Hidden checks for Exercise 8d: ``classifier_from_pretrained``, fine-tuning's starting point.

In the student's kernel, a ``TinyBert`` of the student's own class gets random weights
(seeded, far from the initialisation) and is saved with ``toolkit.pretrain.save_bert``
to a temporary file; the student's ``classifier_from_pretrained`` then builds a
classifier from that file. Every encoder weight must be the saved one, and the head
must have ``n_labels`` outputs and the ``dropout`` asked for.
"""

from __future__ import annotations

import pytest

from autograder.protocol.checklib import CheckFailure

pytestmark = pytest.mark.grade_cell("test_classifier_from_pretrained")

NOT_LOADED = "Pre-trained weights not loaded"

RUN = """
import os as _os
import tempfile as _tempfile

import torch as _torch
from toolkit.pretrain import save_bert as _save_bert

_torch.manual_seed(inputs["rng_seed"])
_saved = TinyBert(BertConfig(vocab_size=70, d_model=16, n_layers=inputs["n_layers"], n_heads=2,
                             max_seq_len=20))
with _torch.no_grad():
    for _p in _saved.parameters():
        _p.normal_(0.0, 0.5)
with _tempfile.TemporaryDirectory() as _dir:
    _path = _os.path.join(_dir, "pretrained.safetensors")
    _save_bert(_saved, _path)
    _clf = classifier_from_pretrained(_path, inputs["n_labels"], dropout=inputs["dropout"])
_expected = _saved.state_dict()
_bert = getattr(_clf, "bert", None)
_got = _bert.state_dict() if isinstance(_bert, _torch.nn.Module) else {}
result = {
    "is_classifier": isinstance(_clf, BertClassifier),
    "different": sorted(_n for _n, _v in _expected.items()
                        if _n not in _got or _got[_n].shape != _v.shape
                        or not _torch.equal(_got[_n], _v)),
    "n_labels": int(getattr(getattr(_clf, "classifier", None), "out_features", -1)),
    "dropout": float(getattr(getattr(_clf, "dropout", None), "p", -1.0)),
}
"""


def _build(submission, *, seed, n_layers, n_labels, dropout):
    got = submission.run(RUN, rng_seed=seed, n_layers=n_layers, n_labels=n_labels,
                         dropout=dropout)
    if not isinstance(got, dict) or not got.get("is_classifier"):
        raise CheckFailure("classifier_from_pretrained should return a BertClassifier")
    return got


@pytest.mark.weight(3)
@pytest.mark.pitfall(NOT_LOADED)
def test_encoder_is_the_checkpoint(submission):
    """Every weight of the classifier's encoder equals the saved checkpoint's."""
    got = _build(submission, seed=0, n_layers=2, n_labels=5, dropout=0.1)
    if got["different"]:
        raise CheckFailure(f"{len(got['different'])} encoder weights are not the checkpoint's "
                           f"(e.g. {got['different'][0]}): fine-tuning must start from the "
                           "pre-trained weights; load them with load_bert(path, "
                           "model_class=TinyBert)")


@pytest.mark.pitfall(NOT_LOADED)
def test_head_follows_the_arguments(submission):
    """Another checkpoint, n_labels = 3 and dropout = 0.3: the head has 3 outputs and that
    dropout, and the encoder is again the checkpoint's."""
    got = _build(submission, seed=1, n_layers=1, n_labels=3, dropout=0.3)
    if got["n_labels"] != 3:
        raise CheckFailure(f"with n_labels=3 the classifier has {got['n_labels']} outputs")
    if abs(got["dropout"] - 0.3) > 1e-9:
        raise CheckFailure(f"with dropout=0.3 the classifier's dropout is {got['dropout']}: "
                           "pass it on to BertClassifier")
    if got["different"]:
        raise CheckFailure("the encoder's weights are not the checkpoint's")
