"""Hidden checks for Exercise 8b: ``BertClassifier.forward``, the head on ``[CLS]``.

The student's classifier wraps the student's own ``TinyBert`` (built in their kernel);
the reference head is applied to that encoder's hidden states, so a mistake in the
encoder's exercises does not count here twice.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor

pytestmark = pytest.mark.grade_cell("test_bert_classifier")

LAST = "Classifier on the last token instead of [CLS]"
POOLER = "Pooler tanh left out"

RUN = """
import torch as _torch

_torch.manual_seed(inputs["rng_seed"])
_bert = TinyBert(BertConfig(vocab_size=60, d_model=16, n_layers=2, n_heads=2, max_seq_len=14))
_clf = BertClassifier(_bert, n_labels=inputs["n_labels"]).eval()
with _torch.no_grad():
    for _p in _clf.parameters():
        _p.normal_(0.0, 0.3)  # large enough that tanh is far from linear
    _logits = _clf(inputs["ids"], inputs["types"], inputs["mask"])
    _hidden = _bert(inputs["ids"], inputs["types"], inputs["mask"])
    _moved = _clf(inputs["ids2"], inputs["types"], inputs["mask"])
result = (_logits, _hidden, _clf.dense.weight, _clf.dense.bias, _clf.classifier.weight,
          _clf.classifier.bias, _moved)
"""


def _inputs(seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 60, (3, 14), generator=g)
    ids[:, 0] = 2  # [CLS]
    types = torch.zeros_like(ids)
    types[:, 7:] = 1
    mask = torch.ones_like(ids)
    mask[1, 10:] = 0
    mask[2, 6:] = 0
    ids2 = ids.clone()
    ids2[:, -1] = (ids2[:, -1] + 7) % 55 + 5  # another last token
    return dict(ids=ids, types=types, mask=mask, ids2=ids2)


def _run(submission, n_labels=3, seed=0):
    got = submission.run(RUN, n_labels=n_labels, rng_seed=seed, **_inputs(seed))
    if not isinstance(got, tuple) or len(got) != 7:
        raise CheckFailure("BertClassifier did not run")
    return got


@pytest.mark.weight(3)
@pytest.mark.pitfall(LAST)
def test_logits_from_cls(submission):
    """logits = classifier(dropout(tanh(dense(h_0)))), h_0 the final [CLS] vector (eval mode)."""
    logits, hidden, w_p, b_p, w_c, b_c, _ = _run(submission)
    logits = expect_tensor(logits, shape=(3, 3), name="BertClassifier logits")
    for position, what in ((-1, "the last position"), (1, "position 1")):
        wrong = torch.tanh(hidden[:, position] @ w_p.T + b_p) @ w_c.T + b_c
        if torch.allclose(logits, wrong, atol=1e-5):
            raise CheckFailure(f"your classifier reads {what}; it must read [CLS], position 0 "
                               "(with padding the last position is a [PAD])")
    if torch.allclose(logits, (hidden[:, 0] @ w_p.T + b_p) @ w_c.T + b_c, atol=1e-5):
        raise CheckFailure("the pooler's tanh is missing: pooled = tanh(dense(h_[CLS]))")
    expected = torch.tanh(hidden[:, 0] @ w_p.T + b_p) @ w_c.T + b_c
    assert_close(logits, expected, atol=1e-5, rtol=1e-4, name="BertClassifier logits",
                 hint="classifier(dropout(tanh(dense(hidden[:, 0]))))")


@pytest.mark.pitfall(POOLER)
def test_two_labels(submission):
    """n_labels = 2 (NSP's IsNext / NotNext): shape (B, 2) and the same formula."""
    logits, hidden, w_p, b_p, w_c, b_c, _ = _run(submission, n_labels=2, seed=1)
    expected = torch.tanh(hidden[:, 0] @ w_p.T + b_p) @ w_c.T + b_c
    assert_close(logits, expected, atol=1e-5, rtol=1e-4, name="BertClassifier with 2 labels")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LAST)
@pytest.mark.property
def test_padding_never_changes_the_logits(submission):
    """Changing a token behind the padding mask leaves every logit unchanged."""
    logits, *_, moved = _run(submission, seed=2)
    logits = expect_tensor(logits, shape=(3, 3), name="BertClassifier logits")
    moved = expect_tensor(moved, shape=(3, 3), name="BertClassifier logits")
    # The last token is padding in sequences 1 and 2, a real token in sequence 0.
    if not torch.allclose(logits[1:], moved[1:], atol=1e-6):
        raise CheckFailure("changing a padded token changed the logits: read [CLS] (position "
                           "0) from the encoder called with attention_mask")
