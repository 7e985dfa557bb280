"""The input layer of the tiny models: token embedding plus learned positions.

Without *any* position information, self-attention cannot tell token order apart
(it is permutation-equivariant). The tiny models of :mod:`toolkit.transformer.families`
use a learned absolute position table, as BERT and GPT-2 do; :mod:`toolkit.position`
covers the alternatives (sinusoidal, RoPE, ALiBi, T5 bias).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toolkit.masks import padding_mask_from_attention_mask


class TokenPositionEmbedding(nn.Module):
    """Token embedding plus a learned absolute position table (BERT, GPT-2).

    ``h_t = E_tok[id_t] + E_pos[t]``: ``(B, T)`` ids -> ``(B, T, d_model)``.
    A sequence longer than ``max_seq_len`` has no position row and raises ``ValueError``.
    """

    def __init__(self, vocab_size: int, d_model: int, max_seq_len: int, dropout: float):
        super().__init__()
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
        if max_seq_len <= 0:
            raise ValueError(f"max_seq_len must be a positive integer, got {max_seq_len}")
        self.max_seq_len = max_seq_len
        self.token = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_seq_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, name: str = "input_ids") -> Tensor:
        if ids.dim() != 2 or ids.dtype not in (torch.long, torch.int, torch.int16, torch.uint8):
            raise ValueError(
                f"{name} must be an integer tensor of shape (batch, seq), "
                f"got dtype {ids.dtype} and shape {tuple(ids.shape)}"
            )
        T = ids.size(1)
        if T > self.max_seq_len:
            raise ValueError(
                f"{name} has length {T} but max_seq_len={self.max_seq_len}: the learned position "
                "table has no row for the extra positions; truncate the input or build the "
                "model with a larger max_seq_len"
            )
        pos = torch.arange(T, device=ids.device)
        return self.dropout(self.token(ids) + self.position(pos))  # E_tok[id] + E_pos[t]


def attention_mask_to_bool(attention_mask: Tensor | None, ids: Tensor, name: str):
    """HF-style ``(B, T)`` 1/0 (or bool) mask -> ``(B, 1, 1, T)`` bool key mask."""
    if attention_mask is None:
        return None
    if attention_mask.shape != ids.shape:
        raise ValueError(
            f"{name} must have the same shape as the ids {tuple(ids.shape)} "
            f"(1 = real token, 0 = padding), got {tuple(attention_mask.shape)}"
        )
    return padding_mask_from_attention_mask(attention_mask)
