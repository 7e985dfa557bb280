"""The KV cache of the capstone GPT: keys and values of every layer, preallocated.

At decoding step ``t`` only the new token's query is needed, but it attends to the keys
and values of *all* earlier tokens, which do not change. :class:`StaticKVCache` keeps
them per layer, so a step costs ``O(t d)`` for attention plus ``O(d^2)`` for the
projections of one token, instead of re-running the whole prefix (``O(t^2 d)`` attention
plus ``O(t d^2)`` projections).

*Static* as Hugging Face's ``StaticCache``: the buffers hold ``max_seq_len`` positions
from the first write on and never change size, so a step writes in place and a caller
can rewind. :class:`toolkit.gqa.DynamicKVCache` grows by concatenation instead.
"""

from __future__ import annotations

import torch
from torch import Tensor


class StaticKVCache:
    """Keys and values of every layer for the positions processed so far.

    Buffers of shape ``(B, n_kv_heads, max_seq_len, d_head)`` per layer are
    allocated on first use (batch size, dtype and device taken from the first
    keys written). ``length`` is the number of positions filled.

    Args:
        n_layers: number of layers.
        max_seq_len: capacity in positions.
    """

    def __init__(self, n_layers: int, max_seq_len: int):
        self.n_layers, self.max_seq_len = n_layers, max_seq_len
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers
        self.length = 0

    @property
    def batch_size(self) -> int | None:
        return None if self.keys[0] is None else self.keys[0].size(0)

    def update(self, layer: int, k: Tensor, v: Tensor, start_pos: int) -> tuple[Tensor, Tensor]:
        """Write ``k, v`` ``(B, H_kv, T, D)`` at positions ``start_pos .. start_pos+T-1``.

        Returns:
            All keys and values of positions ``0 .. start_pos+T-1``:
            two tensors ``(B, H_kv, start_pos + T, D)``.
        """
        B, H, T, D = k.shape
        if self.keys[layer] is None:
            shape = (B, H, self.max_seq_len, D)
            self.keys[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.values[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        elif self.keys[layer].size(0) != B:
            raise ValueError(
                f"cache: holds a batch of {self.keys[layer].size(0)}, got {B}; use a new cache"
            )
        end = start_pos + T
        self.keys[layer][:, :, start_pos:end] = k
        self.values[layer][:, :, start_pos:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search: row ``i`` becomes old row ``index[i]``)."""
        for layer in range(self.n_layers):
            if self.keys[layer] is not None:
                self.keys[layer] = self.keys[layer].index_select(0, index)
                self.values[layer] = self.values[layer].index_select(0, index)

    def reset(self) -> None:
        self.keys = [None] * self.n_layers
        self.values = [None] * self.n_layers
        self.length = 0

    def nbytes(self) -> int:
        """Bytes held: ``2 x layers x B x n_kv_heads x max_seq_len x d_head x bytes``."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)
