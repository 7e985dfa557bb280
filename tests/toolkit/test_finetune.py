"""Sentence pairs, NSP between documents and fine-tuning: document_nsp_pairs follows BERT's
rules (IsNext the next segment, NotNext from another document, half and half),
BertClassifier's head equals Hugging Face's pooler + classifier, the held-out documents
are disjoint from the training ones, and a few fine-tuning steps lower the loss.
encode_pairs builds Hugging Face's rows, the module task holds out unseen text,
classifier_from_pretrained starts from the checkpoint's weights, and cls_attention is the
attention [CLS] reads."""

from __future__ import annotations

import pytest
import torch

from toolkit.bert import BertClassifier, BertConfig, TinyBert
from toolkit.finetune import (
    TASK_MODULES,
    TASK_SEQ_LEN,
    classification_accuracy,
    classifier_from_pretrained,
    cls_attention,
    encode_pairs,
    finetune,
    finetuning_curve,
    load_classifier,
    majority_accuracy,
    module_task,
    module_words,
    nsp_documents,
    pair_tensors,
    save_classifier,
)
from toolkit.mlm import CLS_ID, SEP_ID, WordVocab, document_nsp_pairs, pair_inputs
from toolkit.pretrain import save_bert


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


# ---------------------------------------------------------------- the module task


def test_encode_pairs_is_pair_inputs_without_truncation():
    g = torch.Generator().manual_seed(0)
    pairs = [(torch.randint(5, 50, (int(torch.randint(1, 8, (), generator=g)),),
                            generator=g).tolist(),
              torch.randint(5, 50, (int(torch.randint(1, 8, (), generator=g)),),
                            generator=g).tolist()) for _ in range(20)]
    got = encode_pairs(pairs, 17)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        expected = torch.stack([pair_inputs(a, b, 17)[key] for a, b in pairs])
        assert got[key].dtype == torch.int64 and torch.equal(got[key], expected), key
    assert encode_pairs([], 5)["input_ids"].shape == (0, 5)
    with pytest.raises(ValueError, match="seq_len"):
        encode_pairs([([5] * 4, [6] * 4)], 10)


def test_module_task_is_balanced_and_holds_out_unseen_text():
    from toolkit.pretrain import load_mlm_corpus

    vocab = load_mlm_corpus().vocab
    train, val = module_task(vocab)
    assert train["input_ids"].shape == (5 * 128, TASK_SEQ_LEN)
    assert val["input_ids"].shape == (5 * 32, TASK_SEQ_LEN)
    assert torch.equal(torch.bincount(val["labels"]), torch.full((5,), 32))
    assert train["attention_mask"].all() and (train["token_type_ids"].sum(1) == 16).all()
    # Pieces 2j and 2j + 1 of a module: the first held-out example of calendar.py (pieces 256
    # and 257) continues the text of its last training example (pieces 254 and 255).
    words = module_words(vocab, TASK_MODULES[0])
    assert val["input_ids"][0, 1:16].tolist() == words[256 * 15:257 * 15]
    assert train["input_ids"][127, 1:16].tolist() == words[254 * 15:255 * 15]


def test_classifier_from_pretrained_and_saved_classifier(tmp_path):
    torch.manual_seed(0)
    bert = TinyBert(BertConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, max_seq_len=10))
    save_bert(bert, tmp_path / "mlm.safetensors")
    clf = classifier_from_pretrained(tmp_path / "mlm.safetensors", 3, dropout=0.2)
    assert clf.dropout.p == 0.2 and clf.classifier.out_features == 3
    for name, value in bert.state_dict().items():
        assert torch.equal(clf.bert.state_dict()[name], value), name
    save_classifier(clf, tmp_path / "clf.safetensors")
    again = load_classifier(tmp_path / "clf.safetensors")
    ids = torch.randint(5, 40, (2, 10))
    clf.eval()
    with torch.no_grad():
        torch.testing.assert_close(again(ids), clf(ids))
    with pytest.raises(ValueError, match="classifier"):
        load_classifier(tmp_path / "mlm.safetensors")


def test_cls_attention_is_the_attention_that_cls_reads():
    from toolkit.attention import merge_heads, split_heads

    torch.manual_seed(0)
    bert = TinyBert(BertConfig(vocab_size=40, d_model=16, n_layers=2, n_heads=4, max_seq_len=10))
    clf = BertClassifier(bert, 2)
    ids = torch.randint(5, 40, (1, 10))
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    weights = cls_attention(clf, ids, None, mask)
    assert weights.shape == (2, 4, 10)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4))
    assert weights[..., 7:].abs().max() == 0, "padding gets no attention"
    # Layer 0's attention output at [CLS] is out_proj(sum_t w_t v_t), recomputed.
    attn = bert.encoder.layers[0].self_attn
    seen = {}
    handle = attn.register_forward_hook(lambda m, args, out: seen.update(x=args[0], out=out))
    with torch.no_grad():
        bert(ids, None, mask)
        handle.remove()
        v = split_heads(attn.v_proj(seen["x"]), attn.n_heads)  # (1, h, T, d_k)
        cls_out = attn.out_proj(merge_heads(weights[0][None, :, None, :] @ v))
    torch.testing.assert_close(cls_out[0, 0], seen["out"][0, 0])


def test_finetuning_curve_measures_every_few_steps():
    torch.manual_seed(0)
    bert = TinyBert(BertConfig(vocab_size=30, d_model=16, n_layers=1, n_heads=2, max_seq_len=8))
    ids = torch.randint(5, 30, (32, 8))
    ids[:, 0] = CLS_ID
    data = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids),
            "attention_mask": torch.ones_like(ids), "labels": (ids[:, 1] > 17).long()}
    curve = finetuning_curve(BertClassifier(bert, 2), data, data, 25, every=10, batch_size=8)
    assert curve["step"] == [0, 10, 20, 25] and len(curve["train"]) == len(curve["val"]) == 4
    assert len(curve["loss"]) == 25 and all(0 <= a <= 1 for a in curve["val"])
