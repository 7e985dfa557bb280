"""Decoding: turning next-token logits into text.

A language model gives, at each step, logits ``z`` over the vocabulary for the
next token. A *decoding strategy* picks a token, appends it and repeats.

* :mod:`toolkit.generate.sampling`: temperature, top-k and top-p filters, and drawing
  one token;
* :mod:`toolkit.generate.decoding`: the loops: :func:`generate` (sampling, greedy at
  ``temperature=0``, with or without a KV cache), :func:`greedy`, :func:`beam_search`.

Every public name is importable from this package: ``from toolkit.generate import
generate``.
"""

from toolkit.generate.decoding import beam_search, generate, greedy
from toolkit.generate.sampling import (
    apply_temperature,
    filter_logits,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)

__all__ = [
    "apply_temperature",
    "beam_search",
    "filter_logits",
    "generate",
    "greedy",
    "sample_next_token",
    "top_k_filter",
    "top_p_filter",
]
