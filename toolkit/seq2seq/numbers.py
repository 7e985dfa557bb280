"""A text-to-text task made here: numbers as words and as digits, both ways.

One model serves two tasks the T5 way (arXiv 1910.10683), told apart by a prefix:

    "words: 4213"                            ->  "four thousand two hundred thirteen"
    "digits: four thousand two hundred thirteen"  ->  "4213"

Numbers run from 0 to 9,999 by default (up to 999,999 on request), written without
"and" or hyphens. The number of digits is drawn uniformly, then the number, so short
numbers are as common as long ones. About one number in ten is **held out**
(:func:`is_held_out`, a fixed hash of the number): training never sees it, in either
direction, so exact-match accuracy on held-out numbers measures whether the model learned
the rules rather than the examples.

:class:`NumberTokenizer` has one token per word and per digit (a digit string is split
into its digits), plus ``<pad>`` (0, also the decoder's start), ``</s>`` (1) and ``<unk>``
(2), as T5's vocabulary starts.
"""

from __future__ import annotations

import random

import torch
from torch import Tensor

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
        "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen",
        "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
PREFIXES = ("words:", "digits:")
LARGEST = 999_999


def number_to_words(n: int) -> str:
    """English words for ``0 <= n <= 999,999``: ``4213`` -> ``"four thousand two hundred
    thirteen"``."""
    if not isinstance(n, int) or not 0 <= n <= LARGEST:
        raise ValueError(f"n must be an int in 0 .. {LARGEST}, got {n!r}")
    if n == 0:
        return "zero"

    def below_thousand(m: int) -> list[str]:
        words = [ONES[m // 100], "hundred"] if m >= 100 else []
        m %= 100
        if m >= 20:
            words += [TENS[m // 10]] + ([ONES[m % 10]] if m % 10 else [])
        elif m:
            words.append(ONES[m])
        return words

    words = below_thousand(n // 1000) + ["thousand"] if n >= 1000 else []
    return " ".join(words + below_thousand(n % 1000))


def is_held_out(n: int) -> bool:
    """Whether ``n`` belongs to the held-out numbers (about 10%, a fixed hash)."""
    return (n * 2654435761) % 2**32 % 10 == 0  # Knuth's multiplicative hash


def number_examples(
    n_examples: int, held_out: bool = False, seed: int = 0, max_digits: int = 4
) -> list[tuple[str, str]]:
    """``(source, target)`` pairs, half of each task, on training or held-out numbers.

    Draws the number of digits uniformly from 1 to ``max_digits`` (at most 6), then a
    number with that many digits (from the split asked for), then the task.
    """
    if not 1 <= max_digits <= 6:
        raise ValueError(f"max_digits must be 1 .. 6, got {max_digits}")
    rng = random.Random(seed)
    pairs = []
    while len(pairs) < n_examples:
        digits = rng.randint(1, max_digits)
        n = rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)
        if is_held_out(n) != held_out:
            continue
        words = number_to_words(n)
        if rng.random() < 0.5:
            pairs.append((f"words: {n}", words))
        else:
            pairs.append((f"digits: {words}", str(n)))
    return pairs


class NumberTokenizer:
    """Word-level tokens for the number task; digit strings are split into digits.

    ``encode("words: 4213")`` -> ids of ``words: 4 2 1 3 </s>``; ``decode`` joins words
    with spaces and consecutive digits without, and stops at ``</s>``.
    """

    pad_id, eos_id, unk_id = 0, 1, 2

    def __init__(self):
        words = sorted(set(ONES + TENS[2:] + ["hundred", "thousand"]))
        self.vocab = ["<pad>", "</s>", "<unk>", *PREFIXES, *"0123456789", *words]
        self.ids = {w: i for i, w in enumerate(self.vocab)}

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def encode(self, text: str, eos: bool = True) -> list[int]:
        """Ids of ``text``, ending with ``</s>`` when ``eos``."""
        ids = []
        for word in text.split():
            pieces = list(word) if word.isdigit() else [word]
            ids += [self.ids.get(p, self.unk_id) for p in pieces]
        return ids + [self.eos_id] if eos else ids

    def decode(self, ids) -> str:
        """Text of ``ids`` up to the first ``</s>``, pads left out."""
        out: list[str] = []
        for i in (int(t) for t in ids):
            if i == self.eos_id:
                break
            if i == self.pad_id:
                continue
            piece = self.vocab[i] if 0 <= i < len(self.vocab) else "<unk>"
            if piece.isdigit() and out and out[-1].isdigit():
                out[-1] += piece
            else:
                out.append(piece)
        return " ".join(out)

    def token_str(self, i: int) -> str:
        return self.vocab[i]


def encode_batch(
    pairs: list[tuple[str, str]], tokenizer: NumberTokenizer
) -> tuple[Tensor, Tensor]:
    """``src`` ``(B, S)`` padded with ``pad_id`` and ``labels`` ``(B, T)`` (``</s>``
    included) padded with ``-100``, the loss's ignore index."""
    sources = [tokenizer.encode(s) for s, _ in pairs]
    targets = [tokenizer.encode(t) for _, t in pairs]
    src = torch.full((len(pairs), max(map(len, sources))), tokenizer.pad_id)
    labels = torch.full((len(pairs), max(map(len, targets))), -100)
    for row, (s, t) in enumerate(zip(sources, targets)):
        src[row, : len(s)] = torch.tensor(s)
        labels[row, : len(t)] = torch.tensor(t)
    return src, labels
