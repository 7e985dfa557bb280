"""Transformer blocks and the three model families (arXiv 1706.03762).

* :mod:`toolkit.transformer.blocks`: the three blocks (encoder, decoder-only,
  encoder-decoder decoder), Post-LN or Pre-LN; their position-wise feed-forward network
  is :class:`toolkit.ffn.FeedForward`;
* :mod:`toolkit.transformer.embedding`: token embedding plus a learned position table;
* :mod:`toolkit.transformer.families`: one tiny model per family (encoder-only,
  decoder-only, encoder-decoder) and :func:`family_attention_patterns`, the masks that
  tell the families apart.

Every public name is importable from this package: ``from toolkit.transformer import
DecoderBlock``.
"""

from toolkit.transformer.blocks import DecoderBlock, DecoderOnlyBlock, EncoderBlock
from toolkit.transformer.embedding import TokenPositionEmbedding, attention_mask_to_bool
from toolkit.transformer.families import (
    DecoderOnlyModel,
    EncoderDecoderModel,
    EncoderOnlyModel,
    EncoderOutput,
    family_attention_patterns,
)

__all__ = [
    "DecoderBlock",
    "DecoderOnlyBlock",
    "DecoderOnlyModel",
    "EncoderBlock",
    "EncoderDecoderModel",
    "EncoderOnlyModel",
    "EncoderOutput",
    "TokenPositionEmbedding",
    "attention_mask_to_bool",
    "family_attention_patterns",
]
