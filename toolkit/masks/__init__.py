"""Attention masks: which keys each query is allowed to see.

A mask is a boolean tensor broadcastable to the score matrix ``(..., T_q, T_k)``
with ``True`` meaning *may attend*, the convention of
``torch.nn.functional.scaled_dot_product_attention``. Masks combine with logical
AND: a key is visible only if every mask allows it.

* :mod:`toolkit.masks.basic`: causal and key-padding masks, combining them, and
  turning a boolean mask into an additive bias;
* :mod:`toolkit.masks.sparse`: sparse patterns (sliding window, band, dilated, global
  tokens, random blocks, BigBird), counting their cells, and the receptive field of a
  stack of window layers.

Every public name is importable from this package: ``from toolkit.masks import
causal_mask``.
"""

from toolkit.masks.basic import (
    causal_mask,
    combine_masks,
    mask_to_additive,
    padding_mask,
    padding_mask_from_attention_mask,
)
from toolkit.masks.sparse import (
    band_mask,
    bigbird_mask,
    dilated_mask,
    global_token_mask,
    mask_cell_count,
    query_key_offsets,
    random_block_mask,
    receptive_field,
    sliding_window_mask,
)

__all__ = [
    "band_mask",
    "bigbird_mask",
    "causal_mask",
    "combine_masks",
    "dilated_mask",
    "global_token_mask",
    "mask_cell_count",
    "mask_to_additive",
    "padding_mask",
    "padding_mask_from_attention_mask",
    "query_key_offsets",
    "random_block_mask",
    "receptive_field",
    "sliding_window_mask",
]
