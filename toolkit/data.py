"""A training corpus that needs no download, tokenizers, and random batches.

The capstone model learns to continue text. Its default corpus is text every
Python installation already has on disk: the source code of a fixed list of
pure-Python standard-library modules (:data:`STDLIB_CORPUS_FILES`, about 330 kB
on CPython 3.11). Source code is a good small corpus: it is highly structured
(indentation, keywords, docstrings in English), so a model of a few hundred
thousand parameters visibly learns something in a few hundred steps.

The exact bytes depend on the Python version (the modules change between
releases), so record the version with any result. Any other text file can be
used instead: ``load_corpus("my_text.txt")`` or ``python -m toolkit.train
--corpus FILE``.

Tokenization
------------
* :class:`ByteTokenizer`: the UTF-8 bytes of the text, vocabulary 256. Works on
  any file and never meets an unknown symbol; a multi-byte character becomes
  several tokens. Byte-level BPE (GPT-2; BPE itself is arXiv 1508.07909) starts
  from exactly this alphabet and then merges frequent pairs; ByT5 (arXiv
  2105.13626) keeps the raw bytes.
* :class:`CharTokenizer`: one token per distinct character of a given text
  (vocabulary = the sorted set of characters), as in char-level language models.

Language-model batches
----------------------
A language model is trained to predict token ``t+1`` from tokens ``<= t`` at every
position at once. :func:`get_batch` cuts ``batch_size`` random windows of
``block_size + 1`` tokens from the stream; the input is the first ``block_size``
tokens and the target the same window shifted left by one.

The split is fixed: the *last* ``val_fraction`` (10%) of the token stream is the
held-out validation set, the rest is training data. A contiguous tail (rather
than random windows) keeps validation text from overlapping training text.
"""

from __future__ import annotations

import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

#: Standard-library modules concatenated (in this sorted order) into the default
#: corpus. All are pure Python and present in CPython 3.10 and later.
STDLIB_CORPUS_FILES: tuple[str, ...] = (
    "bisect.py",
    "calendar.py",
    "colorsys.py",
    "difflib.py",
    "fractions.py",
    "functools.py",
    "graphlib.py",
    "heapq.py",
    "pprint.py",
    "shlex.py",
    "statistics.py",
    "string.py",
    "textwrap.py",
)

#: Fraction of the token stream (at the end) held out for validation.
DEFAULT_VAL_FRACTION = 0.1


def stdlib_dir() -> Path:
    """The directory holding the standard library's ``.py`` files."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_corpus_text(files: tuple[str, ...] = STDLIB_CORPUS_FILES) -> str:
    """Concatenate standard-library sources into one string.

    Each file is preceded by a header line ``# ==== <name> ====`` and followed by a
    blank line, in the order given (sorted by default), so the result is
    deterministic for a given Python version.
    """
    root = stdlib_dir()
    parts = []
    for name in files:
        path = root / name
        if not path.is_file():
            raise ValueError(
                f"files: standard-library source {path} not found; this Python may ship "
                "without .py sources. Pass a text file to load_corpus(path=...) instead."
            )
        parts.append(f"# ==== {name} ====\n")
        parts.append(path.read_text(encoding="utf-8"))
        parts.append("\n")
    return "".join(parts)


class ByteTokenizer:
    """UTF-8 bytes as tokens: ``vocab_size = 256``, token id = byte value.

    ``decode`` replaces invalid byte sequences (e.g. a sampled byte in the middle
    of a multi-byte character) with U+FFFD instead of raising.
    """

    vocab_size = 256
    name = "byte"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        if any(not 0 <= i < 256 for i in ids):
            raise ValueError("ids: every id must be in [0, 256) for the byte tokenizer")
        return bytes(ids).decode("utf-8", errors="replace")

    def token_str(self, i: int) -> str:
        """A printable label for token ``i`` (for plots): the character or ``\\xNN``."""
        return chr(i) if 32 <= i < 127 else repr(bytes([i]))[2:-1]


class CharTokenizer:
    """One token per distinct character of ``text``, ids in sorted character order.

    Args:
        text: the text that defines the vocabulary (usually the whole corpus).

    Encoding a character not in the vocabulary raises ``ValueError``.
    """

    name = "char"

    def __init__(self, text: str):
        if not text:
            raise ValueError("text must be non-empty to build a character vocabulary")
        self.chars = sorted(set(text))
        self.vocab_size = len(self.chars)
        self._id = {c: i for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> list[int]:
        try:
            return [self._id[c] for c in text]
        except KeyError as err:
            raise ValueError(f"text contains {err.args[0]!r}, not in the vocabulary") from None

    def decode(self, ids) -> str:
        ids = ids.tolist() if isinstance(ids, Tensor) else list(ids)
        return "".join(self.chars[i] for i in ids)

    def token_str(self, i: int) -> str:
        c = self.chars[i]
        return c if c.isprintable() else repr(c)[1:-1]


def load_text(path: str | Path | None = None) -> str:
    """The text of ``path`` (UTF-8), or the standard-library corpus when ``None``."""
    if path is None:
        return stdlib_corpus_text()
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: {path} is not a file; pass a text file or None for the default")
    return path.read_text(encoding="utf-8", errors="replace")


def split_train_val(
    data: Tensor, val_fraction: float = DEFAULT_VAL_FRACTION
) -> tuple[Tensor, Tensor]:
    """Split a 1-D token stream: the last ``val_fraction`` is validation, the rest training."""
    if not 0.0 < val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
    n_train = int(len(data) * (1.0 - val_fraction))
    return data[:n_train], data[n_train:]


@dataclass
class Corpus:
    """A tokenized corpus: ``train`` and ``val`` are 1-D ``torch.long`` token streams."""

    text: str
    tokenizer: ByteTokenizer | CharTokenizer
    train: Tensor
    val: Tensor
    source: str

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size


def load_corpus(
    path: str | Path | None = None,
    *,
    tokenizer: str = "byte",
    val_fraction: float = DEFAULT_VAL_FRACTION,
) -> Corpus:
    """Load, tokenize and split a corpus.

    Args:
        path: any UTF-8 text file; ``None`` uses the standard-library corpus.
        tokenizer: ``"byte"`` (:class:`ByteTokenizer`) or ``"char"``
            (:class:`CharTokenizer` built from this text).
        val_fraction: the tail fraction held out for validation.

    Returns:
        A :class:`Corpus` with 1-D ``long`` tensors ``train`` and ``val``.
    """
    text = load_text(path)
    if tokenizer == "byte":
        tok: ByteTokenizer | CharTokenizer = ByteTokenizer()
    elif tokenizer == "char":
        tok = CharTokenizer(text)
    else:
        raise ValueError(f"tokenizer must be 'byte' or 'char', got {tokenizer!r}")
    data = torch.tensor(tok.encode(text), dtype=torch.long)
    train, val = split_train_val(data, val_fraction)
    source = "stdlib:" + ",".join(STDLIB_CORPUS_FILES) if path is None else str(path)
    return Corpus(text=text, tokenizer=tok, train=train, val=val, source=source)


def get_batch(
    data: Tensor,
    batch_size: int,
    block_size: int,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """Random next-token-prediction windows from a 1-D token stream.

    Args:
        data: ``(N,)`` token ids.
        batch_size: ``B`` windows.
        block_size: ``T`` tokens of context per window; needs ``N > T``.
        generator: makes the window starts reproducible.

    Returns:
        ``x, y`` of shape ``(B, T)``: ``y[b, t] = x[b, t + 1]``, i.e.
        ``y`` is the window shifted left by one.
    """
    if data.dim() != 1:
        raise ValueError(f"data must be a 1-D token stream, got shape {tuple(data.shape)}")
    if batch_size <= 0:
        raise ValueError(f"batch_size must be positive, got {batch_size}")
    if block_size <= 0 or len(data) <= block_size:
        raise ValueError(
            f"block_size must be in [1, len(data)); got block_size={block_size} "
            f"for {len(data)} tokens"
        )
    starts = torch.randint(len(data) - block_size, (batch_size,), generator=generator)
    offsets = torch.arange(block_size)
    x = data[starts[:, None] + offsets]  # (B, T): tokens s .. s+T-1
    y = data[starts[:, None] + offsets + 1]  # (B, T): tokens s+1 .. s+T
    return x, y
