"""toolkit.pretrain and toolkit.distill end to end: the tiny encoder learns, so does its student.

A 2-block, 64-wide TinyBert pre-trained for 300 steps (some 15 s of CPU) must beat the
unigram baseline by a wide margin on held-out text, and so must its 1-block student
distilled from the teacher's soft targets only (``alpha_hard=0``, never a label).
Training runs on one thread (restored afterwards): the model is too small to gain from
more, and the test runner shares the cores.
"""

from __future__ import annotations

import pytest
import torch

from toolkit.bert import BertConfig, TinyBert
from toolkit.distill import distill, student_from_teacher
from toolkit.mlm import IGNORE_INDEX, SEP_ID
from toolkit.pretrain import (
    evaluate,
    evaluation_batch,
    load_mlm_corpus,
    masked_accuracy,
    pretrain,
    unigram_accuracy,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def corpus():
    return load_mlm_corpus()


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def teacher(corpus):
    torch.manual_seed(0)
    model = TinyBert(BertConfig(vocab_size=corpus.vocab.vocab_size, max_seq_len=64))
    losses = pretrain(model, corpus, 300)
    assert losses[-1] < losses[0] - 1.0
    return model


def test_corpus_pairs_and_evaluation_batch(corpus):
    assert corpus.train_ids.shape[1] == corpus.val_ids.shape[1] == 63
    assert (corpus.train_ids[:, 31] == SEP_ID).all() and (corpus.train_ids[:, -1] == SEP_ID).all()
    assert (corpus.train_types[:, 32:] == 1).all() and (corpus.train_types[:, :32] == 0).all()
    # Consecutive pairs overlap by one segment: B of pair i is A of pair i + 1.
    assert torch.equal(corpus.train_ids[0, 32:62], corpus.train_ids[1, 1:31])
    batch = evaluation_batch(corpus)
    assert torch.equal(batch["labels"], evaluation_batch(corpus)["labels"])  # fixed seed
    scored = batch["labels"] != IGNORE_INDEX
    assert 0.07 < scored.float().mean() < 0.15  # 80% of the 15% selected
    # Only what [MASK] hides is scored: an unchanged token could be copied from the input.
    assert (batch["input_ids"][scored] == corpus.vocab.mask_id).all()
    assert (batch["input_ids"][~scored] != corpus.vocab.mask_id).all()
    assert torch.equal(batch["labels"][scored], corpus.val_ids[:128][scored])
    baseline = unigram_accuracy(corpus.train_stream, batch["labels"])
    assert 0.02 < baseline < 0.08  # the most frequent word, ',', is about 5% of the text


def test_masked_accuracy_shapes():
    labels = torch.tensor([[-100, 2, 1], [0, -100, -100]])
    logits = torch.zeros(2, 3, 4)
    logits[0, 1, 2] = logits[0, 2, 3] = logits[1, 0, 0] = 1.0
    assert masked_accuracy(logits, labels) == pytest.approx(2 / 3)
    assert masked_accuracy(logits[labels != -100], labels) == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="targets"):
        masked_accuracy(torch.zeros(5, 4), labels)


def test_tiny_encoder_beats_the_unigram_baseline(corpus, teacher):
    batch = evaluation_batch(corpus)
    baseline = unigram_accuracy(corpus.train_stream, batch["labels"])
    accuracy = evaluate(teacher, batch)
    assert accuracy > 1.5 * baseline, (accuracy, baseline)  # 300 steps: about 2.2x


def test_distilled_student_keeps_the_teacher_s_skill(corpus, teacher):
    """DistilBERT's recipe: half the blocks, trained on the teacher's soft targets only."""
    batch = evaluation_batch(corpus)
    baseline = unigram_accuracy(corpus.train_stream, batch["labels"])
    student = student_from_teacher(teacher)
    losses = distill(teacher, student, corpus, 80, alpha_soft=1.0, alpha_hard=0.0)
    assert sum(losses[-10:]) < sum(losses[:10])  # it learns from the soft targets
    assert evaluate(student, batch) > 1.5 * baseline


def test_student_from_teacher_keeps_every_other_block(teacher):
    student = student_from_teacher(teacher)
    assert len(student.encoder.layers) == 1 and student.config.n_layers == 1
    assert len(teacher.encoder.layers) == 2  # the teacher is untouched
    torch.testing.assert_close(student.encoder.layers[0].state_dict()["norm1.weight"],
                               teacher.encoder.layers[0].state_dict()["norm1.weight"])
    assert student.mlm_head.decoder.weight is student.embeddings.word_embeddings.weight
    with pytest.raises(ValueError, match="keep_every"):
        student_from_teacher(teacher, 0)


def test_a_notebook_s_own_masking_is_used(corpus, teacher):
    """evaluation_batch and distill take the notebook's masking: with the student build of
    the toolkit the defaults are stubs until the assignment is over."""
    calls = []

    def mask_everything(ids, special_ids, mask_id, vocab_size, generator=None):
        calls.append(generator.initial_seed())
        return torch.full_like(ids, mask_id), ids.clone()

    batch = evaluation_batch(corpus, n=4, seed=7, mask_fn=mask_everything)
    assert calls == [7] and (batch["input_ids"] == corpus.vocab.mask_id).all()
    assert torch.equal(batch["labels"], corpus.val_ids[:4])

    class CountingMasking:
        def __init__(self, inner):
            self.inner, self.batches = inner, 0

        def __len__(self):
            return len(self.inner)

        def batch(self, indices):
            self.batches += 1
            return self.inner.batch(indices)

    from toolkit.mlm import MaskedLMDataset

    v = corpus.vocab
    masking = CountingMasking(MaskedLMDataset(corpus.train_ids, v.special_ids, v.mask_id,
                                              v.vocab_size))
    distill(teacher, student_from_teacher(teacher), corpus, 3, masking=masking)
    assert masking.batches == 3
