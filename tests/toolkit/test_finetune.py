"""Sentence pairs, NSP between documents and fine-tuning: document_nsp_pairs follows BERT's
rules (IsNext the next segment, NotNext from another document, half and half),
BertClassifier's head equals Hugging Face's pooler + classifier, the held-out documents
are disjoint from the training ones, and a few fine-tuning steps lower the loss."""

from __future__ import annotations

import pytest
import torch

from toolkit.bert import BertClassifier, BertConfig, TinyBert
from toolkit.finetune import (
    classification_accuracy,
    finetune,
    majority_accuracy,
    nsp_documents,
    pair_tensors,
)
from toolkit.mlm import CLS_ID, SEP_ID, WordVocab, document_nsp_pairs


def _docs(*sizes):
    return [[[1000 * d + s] for s in range(n)] for d, n in enumerate(sizes)]


def test_pairs_follow_berts_rules():
    sizes = (400, 1, 300, 700)
    pairs, labels = document_nsp_pairs(_docs(*sizes), torch.Generator().manual_seed(0))
    assert labels.dtype == torch.int64 and len(pairs) == len(labels) == 399 + 299 + 699
    assert [a[0] for a, _ in pairs] == [1000 * d + s for d, n in enumerate(sizes)
                                        for s in range(n - 1)]
    for (a, b), label in zip(pairs, labels.tolist()):
        if label == 0:
            assert b[0] == a[0] + 1
        else:
            assert b[0] // 1000 != a[0] // 1000
    assert abs(labels.float().mean().item() - 0.5) < 0.06
    # NotNext from document 3 lands in document 1 (1 segment of 701 others) rarely, in
    # document 0 with probability 400 / 701.
    from_3 = [b[0] // 1000 for (a, b), lab in zip(pairs, labels.tolist())
              if lab == 1 and a[0] // 1000 == 3]
    assert abs(sum(d == 0 for d in from_3) / len(from_3) - 400 / 701) < 0.08


def test_pairs_are_seeded_and_need_two_documents():
    first = document_nsp_pairs(_docs(20, 20), torch.Generator().manual_seed(3))
    again = document_nsp_pairs(_docs(20, 20), torch.Generator().manual_seed(3))
    assert first[0] == again[0] and torch.equal(first[1], again[1])
    with pytest.raises(ValueError, match="two documents"):
        document_nsp_pairs(_docs(5), torch.Generator())


def test_classifier_head_equals_hugging_face():
    from transformers import BertConfig as HFConfig
    from transformers.models.bert.modeling_bert import BertPooler

    torch.manual_seed(0)
    bert = TinyBert(BertConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, max_seq_len=10))
    clf = BertClassifier(bert, n_labels=3).eval()
    pooler = BertPooler(HFConfig(hidden_size=16)).eval()
    pooler.dense.load_state_dict(clf.dense.state_dict())
    ids = torch.randint(5, 40, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        hidden = bert(ids, None, mask)
        expected = clf.classifier(pooler(hidden))  # HF: classifier(dropout(pooler(h)))
        torch.testing.assert_close(clf(ids, None, mask), expected)
        moved = ids.clone()
        moved[1, 8] = 7  # behind the padding mask
        torch.testing.assert_close(clf(moved, None, mask)[1], clf(ids, None, mask)[1])


def test_held_out_documents_and_pair_tensors():
    vocab = WordVocab(["def", "return", "(", ")", ":"])
    train, val = nsp_documents(vocab, segment_len=20, n_val_documents=3)
    assert len(val) == 3 and len(train) >= 2
    assert all(len(seg) == 20 for doc in train + val for seg in doc)
    pairs, labels = document_nsp_pairs(val, torch.Generator().manual_seed(0))
    data = pair_tensors(pairs[:4], labels[:4], seq_len=43)
    assert data["input_ids"].shape == (4, 43)
    assert (data["input_ids"][:, 0] == CLS_ID).all() and (data["input_ids"][:, 21] == SEP_ID).all()
    assert data["token_type_ids"][0, :22].eq(0).all() and data["token_type_ids"][0, 22:].eq(1).all()


def test_a_few_steps_of_fine_tuning_learn_an_easy_task():
    torch.manual_seed(0)
    bert = TinyBert(BertConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, max_seq_len=8))
    ids = torch.randint(5, 30, (64, 8))
    ids[:, 0] = CLS_ID
    labels = (ids[:, 1] > 17).long()  # the class is written in the first word
    data = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
            "attention_mask": torch.ones_like(ids), "labels": labels}
    clf = BertClassifier(bert, n_labels=2)
    losses = finetune(clf, data, 100, batch_size=16, lr=3e-3)
    assert sum(losses[-10:]) / 10 < sum(losses[:10]) / 10
    assert classification_accuracy(clf, data) > majority_accuracy(data)
