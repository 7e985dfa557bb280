"""The third family: a T5-style encoder-decoder, trained and decoded (arXiv 1910.10683).

BERT reads, GPT writes, T5 reads then writes: an encoder turns the input into a memory
``(B, S, d)`` with bidirectional attention, and a decoder writes the output one token at a
time with causal self-attention plus *cross-attention* over that memory.

Read in this order:

* :mod:`toolkit.seq2seq.config`: :class:`EncDecConfig`, the hyper-parameters;
* :mod:`toolkit.seq2seq.cache`: :class:`EncDecCache`, the self- and cross-attention caches;
* :mod:`toolkit.seq2seq.attention`: :class:`T5Attention` (relative bias, no score scaling,
  cross-attention) and the encoder and decoder layers (their feed-forward network is
  :class:`toolkit.ffn.FeedForward`, ReLU without biases);
* :mod:`toolkit.seq2seq.model`: :class:`EncoderDecoder` (shared embedding, the two stacks,
  the tied head with T5's rescaling) and :func:`shift_right` (teacher forcing);
* :mod:`toolkit.seq2seq.decoding`: :func:`greedy_decode` and :func:`beam_decode`;
* :mod:`toolkit.seq2seq.numbers`: a text-to-text task made here, number words and digits
  both ways behind T5-style task prefixes, and its word tokenizer;
* :mod:`toolkit.seq2seq.training`: training on it, exact-match accuracy, checkpoints.

The position bias itself lives with the other position schemes:
:func:`toolkit.position.t5_relative_position_bucket` and
:class:`toolkit.position.T5RelativePositionBias`.

Every public name is importable from this package: ``from toolkit.seq2seq import
EncoderDecoder``.
"""

from toolkit.seq2seq.attention import DecoderLayer, EncoderLayer, T5Attention
from toolkit.seq2seq.cache import EncDecCache
from toolkit.seq2seq.config import EncDecConfig
from toolkit.seq2seq.decoding import beam_decode, beam_search_one, greedy_decode
from toolkit.seq2seq.model import IGNORE_INDEX, EncoderDecoder, shift_right
from toolkit.seq2seq.numbers import (
    NumberTokenizer,
    encode_batch,
    is_held_out,
    number_examples,
    number_to_words,
)
from toolkit.seq2seq.training import exact_match, load_encdec, save_encdec, train_numbers

__all__ = [
    "IGNORE_INDEX",
    "DecoderLayer",
    "EncDecCache",
    "EncDecConfig",
    "EncoderDecoder",
    "EncoderLayer",
    "NumberTokenizer",
    "T5Attention",
    "beam_decode",
    "beam_search_one",
    "encode_batch",
    "exact_match",
    "greedy_decode",
    "is_held_out",
    "load_encdec",
    "number_examples",
    "number_to_words",
    "save_encdec",
    "shift_right",
    "train_numbers",
]
