"""BERT's inputs and its masked-language-model objective (arXiv 1810.04805).

Vocabulary
----------
:class:`WordVocab` splits text into words and punctuation (``\\w+|[^\\w\\s]``) and keeps
the words seen at least ``min_count`` times. Five special tokens come first, with
BERT's names: ``[PAD]`` (0, fills short sequences), ``[UNK]`` (1, any word not in the
vocabulary), ``[CLS]`` (2, first token; its final vector summarises the input),
``[SEP]`` (3, ends each segment) and ``[MASK]`` (4, hides a token from the model).
BERT itself uses WordPiece sub-words (30,522 of them); whole words keep this course's
vocabulary small and its examples readable.

A pair of segments
------------------
BERT reads one or two segments::

    [CLS] a_1 ... a_n [SEP] b_1 ... b_m [SEP] [PAD] ...
    token_type_ids:  0 for [CLS], A and the first [SEP]; 1 for B and the second [SEP]
    attention_mask:  1 for every real token, 0 for padding

:func:`pair_inputs` builds it as Hugging Face's BERT tokenizer does, truncating the
longer segment first ("longest_first"). **Next-sentence prediction** (NSP) trains the
``[CLS]`` vector to tell whether B really followed A: :func:`sample_nsp_pairs` keeps the
true next segment half of the time (label 0, "IsNext") and draws a random one
otherwise (label 1, "NotNext"), Hugging Face's label convention, from the segments of
one stream; :func:`document_nsp_pairs` draws NotNext from another *document*, as BERT's
pre-training data does. RoBERTa (arXiv 1907.11692) found NSP unhelpful and dropped it.

Masked language modelling
-------------------------
:func:`mask_tokens` follows ``transformers.DataCollatorForLanguageModeling``:

1. every token that is not special (``[CLS]``, ``[SEP]``, ``[PAD]``, ``[UNK]``,
   ``[MASK]``) is **selected** independently with probability 15%;
2. a selected token becomes ``[MASK]`` with probability 80%, a uniformly random
   vocabulary id with probability 10%, and stays unchanged otherwise (10%);
3. ``labels`` holds the original id at selected positions and ``-100`` everywhere
   else, the value ``torch.nn.functional.cross_entropy`` ignores: the loss is computed
   on the selected 15% only.

Why not always ``[MASK]``? ``[MASK]`` never occurs when the model is fine-tuned, so a
model that only ever predicts behind ``[MASK]`` would learn nothing useful about the
representations of real tokens. Random and unchanged tokens force it to keep a good
representation of every input token. (Original BERT selects exactly ``round(0.15 n)``
tokens per sequence; the Hugging Face collator, like this module, draws each token
independently, so the count varies around 15%.)

**Static versus dynamic masking.** BERT masked its training data once, offline (ten
copies with different masks), so a sequence met the same mask epoch after epoch.
RoBERTa draws a new mask every time a sequence is fed to the model.
:class:`MaskedLMDataset` does either.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor

from toolkit.arguments import check_int, check_mlm_probabilities, check_token_ids

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(5)
#: Words and punctuation marks, one token each; whitespace is dropped.
TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
#: The label that ``torch.nn.functional.cross_entropy`` ignores.
IGNORE_INDEX = -100


class WordVocab:
    """Word-level vocabulary with BERT's five special tokens at ids 0..4.

    Args:
        words: the ordinary words, ids ``5, 6, ...`` in this order (no duplicates,
            none of them a special token).
    """

    name = "word"

    def __init__(self, words: Sequence[str]):
        words = list(words)
        if len(set(words)) != len(words) or set(words) & set(SPECIAL_TOKENS):
            raise ValueError("words must be distinct and must not contain special tokens")
        self.itos = list(SPECIAL_TOKENS) + words
        self.stoi = {w: i for i, w in enumerate(self.itos)}
        self.special_ids = tuple(range(len(SPECIAL_TOKENS)))
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = self.special_ids

    @classmethod
    def from_text(cls, text: str, min_count: int = 3) -> WordVocab:
        """The words of ``text`` seen at least ``min_count`` times, most frequent first."""
        check_int("min_count", min_count)
        counts = Counter(TOKEN_PATTERN.findall(text))
        for special in SPECIAL_TOKENS:
            counts.pop(special, None)
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))  # ties: alphabetical
        return cls([w for w, n in ranked if n >= min_count])

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def tokenize(self, text: str) -> list[str]:
        return TOKEN_PATTERN.findall(text)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``; unknown words become ``[UNK]``."""
        return [self.stoi.get(w, self.unk_id) for w in self.tokenize(text)]

    def decode(self, ids) -> str:
        """The tokens of ``ids`` joined by spaces."""
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        if any(not 0 <= i < self.vocab_size for i in ids):
            raise ValueError(f"ids: every id must be in [0, {self.vocab_size})")
        return " ".join(self.itos[i] for i in ids)

    def token_str(self, i: int) -> str:
        return self.itos[i]


def truncate_pair(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
    """Drop tokens from the end of the longer segment (ties: from ``b``) until
    ``len(a) + len(b) <= budget``.

    This is original BERT's ``truncate_seq_pair`` and the pure-Python Hugging Face
    tokenizer's ``truncation="longest_first"``. (The Rust "fast" tokenizers differ by one
    token when both segments must be cut and have the same length: they keep the extra
    token in ``b``.)
    """
    a, b = list(a), list(b)
    while len(a) + len(b) > budget:
        if len(a) > len(b):
            a.pop()
        else:
            b.pop()
    return a, b


def pair_inputs(a: Sequence[int], b: Sequence[int] | None, seq_len: int) -> dict[str, Tensor]:
    """``[CLS] A [SEP] (B [SEP])`` padded to ``seq_len``, with segment ids and padding mask.

    Args:
        a, b: token ids of the two segments (``b=None``: a single segment).
        seq_len: the output length; the segments are truncated to fit.

    Returns:
        ``{"input_ids", "token_type_ids", "attention_mask"}``, each ``(seq_len,)`` long.
    """
    n_special = 3 if b is not None else 2
    check_int("seq_len", seq_len, minimum=n_special)
    if b is None:
        a, b_ids = list(a)[: seq_len - 2], []
    else:
        a, b_ids = truncate_pair(list(a), list(b), seq_len - 3)
    ids = [CLS_ID, *a, SEP_ID]  # [CLS] A [SEP]
    types = [0] * len(ids)  # segment A
    if b is not None:
        ids += [*b_ids, SEP_ID]  # B [SEP]
        types += [1] * (len(b_ids) + 1)  # segment B
    n_pad = seq_len - len(ids)
    return {
        "input_ids": torch.tensor(ids + [PAD_ID] * n_pad),
        "token_type_ids": torch.tensor(types + [0] * n_pad),  # padding gets segment 0 (HF)
        "attention_mask": torch.tensor([1] * len(ids) + [0] * n_pad),
    }


def sample_nsp_pairs(
    segments: Sequence[Sequence[int]], generator: torch.Generator
) -> tuple[list[tuple[list[int], list[int]]], Tensor]:
    """Next-sentence-prediction pairs: ``(segments[i], B)`` for every ``i`` but the last.

    ``B`` is ``segments[i + 1]`` with probability 1/2 (label 0, IsNext), else a
    segment drawn uniformly from all but ``i`` and ``i + 1`` (label 1, NotNext).

    Returns:
        the ``len(segments) - 1`` pairs and their labels ``(len(segments) - 1,)``.
    """
    n = len(segments)
    if n < 4:
        raise ValueError(f"segments: need at least 4 segments to draw random ones, got {n}")
    coin = torch.rand(n - 1, generator=generator) < 0.5  # True: keep the true next segment
    draws = torch.randint(0, n - 2, (n - 1,), generator=generator)
    pairs, labels = [], []
    for i in range(n - 1):
        if coin[i]:
            pairs.append((list(segments[i]), list(segments[i + 1])))
            labels.append(0)  # IsNext
        else:
            j = int(draws[i])
            j = j if j < i else j + 2  # skip i and i + 1
            pairs.append((list(segments[i]), list(segments[j])))
            labels.append(1)  # NotNext
    return pairs, torch.tensor(labels)


def document_nsp_pairs(
    documents: Sequence[Sequence[Sequence[int]]], generator: torch.Generator
) -> tuple[list[tuple[list[int], list[int]]], Tensor]:
    """Next-sentence-prediction pairs as BERT builds them: ``NotNext`` from another document.

    For every document ``d`` and every segment ``s`` but its last, in order, ``A`` is
    ``documents[d][s]``. With probability 1/2, ``B`` is ``documents[d][s + 1]`` (label 0,
    IsNext); otherwise ``B`` is drawn uniformly from the segments of all the *other*
    documents (label 1, NotNext), so a NotNext pair never pairs two pieces of one text.

    Args:
        documents: at least two documents, each a list of segments (lists of token ids).
        generator: every random draw uses it.

    Returns:
        ``(pairs, labels)``: the ``(A, B)`` pairs and their labels ``(n_pairs,)`` int64.
    """
    if len(documents) < 2:
        raise ValueError(f"documents: NotNext needs at least two documents, got {len(documents)}")
    flat = [segment for document in documents for segment in document]  # every segment
    pairs, labels = [], []
    start = 0  # where document d begins in `flat`
    for document in documents:
        n_others = len(flat) - len(document)  # the segments of the other documents
        for s in range(len(document) - 1):
            if torch.rand((), generator=generator) < 0.5:
                pairs.append((list(document[s]), list(document[s + 1])))
                labels.append(0)  # IsNext: the segment that really follows
            else:
                k = int(torch.randint(n_others, (), generator=generator))  # k-th other segment
                k = k if k < start else k + len(document)  # skip this document's own segments
                pairs.append((list(document[s]), list(flat[k])))
                labels.append(1)  # NotNext: from another document
        start += len(document)
    return pairs, torch.tensor(labels, dtype=torch.long)


def mask_tokens(
    input_ids: Tensor,
    special_ids: Sequence[int],
    mask_token_id: int,
    vocab_size: int,
    mlm_probability: float = 0.15,
    mask_replace_prob: float = 0.8,
    random_replace_prob: float = 0.1,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Masked-LM inputs and labels, with ``DataCollatorForLanguageModeling``'s semantics.

    Args:
        input_ids: ``(B, T)`` token ids (not modified).
        special_ids: ids that are never selected (``[CLS]``, ``[SEP]``, ``[PAD]``, ...).
        mask_token_id: the ``[MASK]`` id.
        vocab_size: random replacements are drawn uniformly from ``[0, vocab_size)``.
        mlm_probability: chance that a non-special token is selected.
        mask_replace_prob: chance that a selected token becomes ``[MASK]``.
        random_replace_prob: chance that a selected token becomes a random id (the rest
            stay unchanged).
        generator: the random stream; with a seeded generator the result is reproducible
            and equal to the Hugging Face collator's with the same ``seed``.

    Returns:
        ``(inputs, labels)``, both ``(B, T)``: ``labels`` is the original id where a
        token was selected and ``-100`` elsewhere.
    """
    check_token_ids("input_ids", input_ids)
    check_mlm_probabilities(mlm_probability, mask_replace_prob, random_replace_prob)
    inputs, labels = input_ids.clone(), input_ids.clone()
    special = torch.isin(input_ids, torch.as_tensor(list(special_ids), dtype=input_ids.dtype))
    probability = torch.full(input_ids.shape, mlm_probability)
    probability.masked_fill_(special, 0.0)  # special tokens are never selected
    selected = torch.bernoulli(probability, generator=generator).bool()  # ~15% of the rest
    labels[~selected] = IGNORE_INDEX  # the loss sees the selected positions only
    # Of the selected tokens: 80% -> [MASK] ...
    replaced = torch.bernoulli(torch.full(input_ids.shape, mask_replace_prob),
                               generator=generator).bool() & selected
    inputs[replaced] = mask_token_id
    if mask_replace_prob == 1 or random_replace_prob == 0:
        return inputs, labels
    # ... 10% -> a random id: 10% of all selected is 10/20 = 1/2 of those not masked ...
    scaled = random_replace_prob / (1 - mask_replace_prob)
    randomised = torch.bernoulli(torch.full(input_ids.shape, scaled),
                                 generator=generator).bool() & selected & ~replaced
    random_ids = torch.randint(vocab_size, input_ids.shape, generator=generator,
                               dtype=input_ids.dtype)
    inputs[randomised] = random_ids[randomised]
    return inputs, labels  # ... and the remaining 10% keep their original id


class MaskedLMDataset:
    """Fixed token sequences served as masked-LM batches, masked statically or dynamically.

    Args:
        input_ids: ``(N, T)`` sequences (already ``[CLS] ... [SEP]``).
        special_ids, mask_token_id, vocab_size, mlm_probability: as :func:`mask_tokens`.
        dynamic: ``True`` (RoBERTa): a new mask every time a sequence is served.
            ``False`` (BERT): every sequence is masked once, here, and keeps that mask.
        seed: seeds the generator all masks are drawn from.

    ``batch(indices)`` returns ``(inputs, labels)``, each ``(len(indices), T)``.
    """

    def __init__(
        self,
        input_ids: Tensor,
        special_ids: Sequence[int],
        mask_token_id: int,
        vocab_size: int,
        mlm_probability: float = 0.15,
        dynamic: bool = True,
        seed: int = 0,
    ):
        check_token_ids("input_ids", input_ids, dims=2)
        self.input_ids = input_ids
        self.special_ids, self.mask_token_id = list(special_ids), mask_token_id
        self.vocab_size, self.mlm_probability = vocab_size, mlm_probability
        self.dynamic, self.seed = dynamic, seed
        self.generator = torch.Generator().manual_seed(seed)  # one stream for every mask
        self.static = None if dynamic else self._mask(input_ids)  # BERT: masked once, offline

    def _mask(self, input_ids: Tensor) -> tuple[Tensor, Tensor]:
        return mask_tokens(input_ids, self.special_ids, self.mask_token_id, self.vocab_size,
                           self.mlm_probability, generator=self.generator)

    def __len__(self) -> int:
        return self.input_ids.size(0)

    def batch(self, indices: Tensor) -> tuple[Tensor, Tensor]:
        """``(inputs, labels)`` for the sequences ``indices`` ``(n,)``: each ``(n, T)``."""
        if self.dynamic:
            return self._mask(self.input_ids[indices])  # RoBERTa: a fresh draw each time
        inputs, labels = self.static
        return inputs[indices], labels[indices]  # BERT: the same mask every epoch
