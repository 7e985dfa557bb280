"""What an encoder-decoder keeps between decoding steps.

Two caches per decoder layer (arXiv 1910.10683; Hugging Face's
``EncoderDecoderCache`` holds the same pair):

* **self-attention**: the keys and values of every target token decoded so far. They
  never change (the decoder is causal), so a step projects only the new token's and
  appends them: ``(B, H, t, d_head)`` grows by one position per step.
* **cross-attention**: the keys and values of the *encoder output*. They depend on the
  input alone, not on the step, so they are projected once per input, on the first
  step, and read back on every later one: ``(B, H, S, d_head)``, fixed.

Beam search reorders the batch rows after each step (row ``i`` continues the beam
``index[i]`` came from): :meth:`EncDecCache.reorder` moves both caches along, or each
beam would go on attending to another beam's history.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_int


class EncDecCache:
    """Per decoder layer: the growing self-attention keys/values and the fixed
    cross-attention keys/values.

    Args:
        n_layers: decoder layers.

    Attributes:
        self_keys, self_values: per layer ``(B, H, t, d_head)`` or ``None``.
        cross_keys, cross_values: per layer ``(B, H, S, d_head)`` or ``None``.
        length: target positions held (``t``), set by the decoder.
    """

    def __init__(self, n_layers: int):
        check_int("n_layers", n_layers)
        self.n_layers = n_layers
        self.self_keys: list[Tensor | None] = [None] * n_layers
        self.self_values: list[Tensor | None] = [None] * n_layers
        self.cross_keys: list[Tensor | None] = [None] * n_layers
        self.cross_values: list[Tensor | None] = [None] * n_layers
        self.length = 0

    def has_cross(self, layer: int) -> bool:
        """Whether ``layer``'s cross-attention keys and values are already projected."""
        return self.cross_keys[layer] is not None

    def update(
        self, layer: int, k: Tensor, v: Tensor, cross: bool = False
    ) -> tuple[Tensor, Tensor]:
        """Store ``k, v`` ``(B, H, T, d_head)``; return the keys and values to attend to.

        ``cross=False``: append the new positions to ``layer``'s self-attention cache and
        return all of them ``(B, H, t + T, d_head)``. ``cross=True``: keep the encoder's
        projected keys and values ``(B, H, S, d_head)`` for the later steps; return them.
        """
        if cross:
            self.cross_keys[layer], self.cross_values[layer] = k, v
            return k, v
        if self.self_keys[layer] is not None:
            k = torch.cat([self.self_keys[layer], k], dim=2)  # (B, H, t + T, d_head)
            v = torch.cat([self.self_values[layer], v], dim=2)
        self.self_keys[layer], self.self_values[layer] = k, v
        return k, v

    def reorder(self, index: Tensor) -> None:
        """Select batch rows: row ``i`` becomes old row ``index[i]`` (beam search's parents)."""
        for store in (self.self_keys, self.self_values, self.cross_keys, self.cross_values):
            for layer, t in enumerate(store):
                if t is not None:
                    store[layer] = t.index_select(0, index)
