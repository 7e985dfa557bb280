"""toolkit.mlm against Hugging Face: the BERT tokenizer's pair layout and the MLM collator.

Statistical checks draw many masks and allow 5 binomial standard deviations, so they
fail only when the rates are wrong, not on an unlucky seed.
"""

from __future__ import annotations

import math

import pytest
import torch

from toolkit.mlm import (
    CLS_ID,
    IGNORE_INDEX,
    MASK_ID,
    PAD_ID,
    SEP_ID,
    SPECIAL_TOKENS,
    MaskedLMDataset,
    WordVocab,
    mask_tokens,
    pair_inputs,
    sample_nsp_pairs,
    truncate_pair,
)

transformers = pytest.importorskip("transformers")

WORDS = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta", "theta", "iota", "kappa"]
V = len(SPECIAL_TOKENS) + len(WORDS)
SPECIALS = tuple(range(len(SPECIAL_TOKENS)))


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    """A BERT vocabulary file that lists our ids in our order."""
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    path.write_text("\n".join([*SPECIAL_TOKENS, *WORDS]) + "\n")
    return str(path)


@pytest.fixture(scope="module")
def hf_tokenizer(vocab_file):
    tok = transformers.BertTokenizer(vocab_file, do_lower_case=False)
    assert len(tok) == V and sorted(tok.all_special_ids) == list(SPECIALS)
    return tok


@pytest.fixture(scope="module")
def hf_python_tokenizer(vocab_file):
    """The pure-Python BERT tokenizer: its pair truncation is the original BERT's."""
    from transformers.models.bert.tokenization_bert_legacy import BertTokenizerLegacy

    return BertTokenizerLegacy(vocab_file, do_lower_case=False)


def _within(count: int, n: int, p: float, name: str, sigmas: float = 5.0) -> None:
    sd = math.sqrt(n * p * (1 - p))
    assert abs(count - n * p) <= sigmas * sd, f"{name}: {count} of {n}, expected {n * p:.0f}"


# ---------------------------------------------------------------- vocabulary and pairs


def test_word_vocab():
    vocab = WordVocab.from_text("b a a c b a d d d d", min_count=2)
    assert vocab.itos[:5] == list(SPECIAL_TOKENS)
    assert vocab.itos[5:] == ["d", "a", "b"]  # by count, ties alphabetical; "c" too rare
    assert (vocab.pad_id, vocab.unk_id, vocab.cls_id, vocab.sep_id, vocab.mask_id) == SPECIALS
    assert vocab.encode("a, zz") == [6, vocab.unk_id, vocab.unk_id]  # ',' and 'zz' unknown
    assert vocab.tokenize("f(x_1)+2") == ["f", "(", "x_1", ")", "+", "2"]
    assert vocab.decode([2, 5, 3]) == "[CLS] d [SEP]"
    with pytest.raises(ValueError, match="ids"):
        vocab.decode([99])
    with pytest.raises(ValueError, match="min_count"):
        WordVocab.from_text("a", 0)
    with pytest.raises(ValueError, match="distinct"):
        WordVocab(["a", "a"])


@pytest.mark.parametrize("len_a, len_b, seq_len", [(7, 2, 8), (2, 7, 8), (5, 5, 10), (4, 4, 16),
                                                   (9, 6, 12), (3, 0, 6)])
def test_pair_inputs_match_bert_tokenizer(hf_python_tokenizer, len_a, len_b, seq_len):
    a = [5 + i % len(WORDS) for i in range(len_a)]
    b = [5 + (3 * i + 1) % len(WORDS) for i in range(len_b)]
    text = lambda ids: " ".join(WORDS[i - 5] for i in ids)  # noqa: E731
    expected = hf_python_tokenizer(text(a), text(b) if b else None, truncation="longest_first",
                                   max_length=seq_len, padding="max_length",
                                   return_token_type_ids=True)
    got = pair_inputs(a, b if b else None, seq_len)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        assert got[key].tolist() == expected[key], key


def test_pair_layout_and_truncation():
    got = pair_inputs([7, 8], [9], 8)
    assert got["input_ids"].tolist() == [CLS_ID, 7, 8, SEP_ID, 9, SEP_ID, PAD_ID, PAD_ID]
    assert got["token_type_ids"].tolist() == [0, 0, 0, 0, 1, 1, 0, 0]
    assert got["attention_mask"].tolist() == [1, 1, 1, 1, 1, 1, 0, 0]
    assert truncate_pair([1] * 10, [2] * 4, 6) == ([1] * 3, [2] * 3)
    with pytest.raises(ValueError, match="seq_len"):
        pair_inputs([1], [2], 2)


def test_nsp_pairs_are_half_true_successors():
    segments = [[10 + i] for i in range(401)]
    pairs, labels = sample_nsp_pairs(segments, torch.Generator().manual_seed(0))
    assert len(pairs) == 400 and labels.shape == (400,)
    for i, ((a, b), label) in enumerate(zip(pairs, labels.tolist())):
        assert a == segments[i]
        if label == 0:
            assert b == segments[i + 1]
        else:
            assert b not in (segments[i], segments[i + 1])
    _within(int((labels == 0).sum()), 400, 0.5, "IsNext pairs")
    with pytest.raises(ValueError, match="segments"):
        sample_nsp_pairs([[1], [2], [3]], torch.Generator())


# ---------------------------------------------------------------- masking


def _batch(n=64, t=12, seed=0):
    """[CLS] words ... [SEP] [PAD] [PAD] rows with some [UNK]."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, V, (n, t), generator=g)
    ids[:, 0], ids[:, -3], ids[:, -2:] = CLS_ID, SEP_ID, PAD_ID
    ids[:, 4] = 1  # [UNK]
    return ids


@pytest.mark.parametrize("mlm, replace, rand",
                         [(0.15, 0.8, 0.1), (0.3, 0.5, 0.4), (0.15, 1.0, 0.0)])
def test_mask_tokens_equals_the_hugging_face_collator(hf_tokenizer, mlm, replace, rand):
    ids = _batch()
    collator = transformers.DataCollatorForLanguageModeling(
        hf_tokenizer, mlm_probability=mlm, mask_replace_prob=replace, random_replace_prob=rand,
        seed=11, return_tensors="pt")
    expected = collator([{"input_ids": row} for row in ids.tolist()])
    inputs, labels = mask_tokens(ids, SPECIALS, MASK_ID, V, mlm, replace, rand,
                                 generator=torch.Generator().manual_seed(11))
    assert torch.equal(inputs, expected["input_ids"])
    assert torch.equal(labels, expected["labels"])
    assert torch.equal(ids, _batch())  # the input is not modified


def test_mask_tokens_statistics():
    ids = _batch(4000, 16, seed=1)
    inputs, labels = mask_tokens(ids, SPECIALS, MASK_ID, V,
                                 generator=torch.Generator().manual_seed(2))
    special = torch.isin(ids, torch.tensor(SPECIALS))
    selected = labels != IGNORE_INDEX
    assert not (selected & special).any(), "special tokens must never be selected"
    assert torch.equal(labels[selected], ids[selected])
    assert torch.equal(inputs[~selected], ids[~selected]), "unselected tokens stay"
    n_sel = int(selected.sum())
    _within(n_sel, int((~special).sum()), 0.15, "selected")
    became_mask = int((inputs[selected] == MASK_ID).sum())
    unchanged = int((inputs[selected] == ids[selected]).sum())
    _within(became_mask, n_sel, 0.8 + 0.1 / V, "[MASK]")  # a random id can be [MASK] too
    _within(unchanged, n_sel, 0.1 + 0.1 / V, "unchanged")
    _within(n_sel - became_mask - unchanged, n_sel, 0.1 * (1 - 2 / V), "random")


def test_mask_tokens_is_seeded_and_checks_its_arguments():
    ids = _batch()

    def run(seed):
        return mask_tokens(ids, SPECIALS, MASK_ID, V, generator=torch.Generator().manual_seed(seed))
    assert all(torch.equal(a, b) for a, b in zip(run(3), run(3)))
    assert not torch.equal(run(3)[1], run(4)[1])
    with pytest.raises(ValueError, match="probabilities"):
        mask_tokens(ids, SPECIALS, MASK_ID, V, 0.15, 0.8, 0.3)
    with pytest.raises(ValueError, match="input_ids"):
        mask_tokens(ids.float(), SPECIALS, MASK_ID, V)


def test_static_masking_repeats_dynamic_masking_does_not():
    ids = _batch(200)
    static = MaskedLMDataset(ids, SPECIALS, MASK_ID, V, dynamic=False, seed=0)
    dynamic = MaskedLMDataset(ids, SPECIALS, MASK_ID, V, dynamic=True, seed=0)
    idx = torch.arange(200)
    first, again = static.batch(idx), static.batch(idx)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert torch.equal(static.batch(idx[:5])[1], first[1][:5])  # per sequence, not per batch
    draws = [dynamic.batch(idx)[1] != IGNORE_INDEX for _ in range(20)]
    assert not torch.equal(draws[0], draws[1])
    # Over 20 epochs each ordinary token is selected about 15% of the time.
    special = torch.isin(ids, torch.tensor(SPECIALS))
    _within(int(torch.stack(draws)[:, ~special].sum()), 20 * int((~special).sum()), 0.15,
            "selected over epochs")
    assert len(dynamic) == 200
    with pytest.raises(ValueError, match="input_ids"):
        MaskedLMDataset(ids[0], SPECIALS, MASK_ID, V)
