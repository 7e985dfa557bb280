"""The three masks every Transformer uses: causal, key padding, and their combination.

* **bidirectional** (encoders, BERT): every query sees every key, so no mask.
* **causal** (decoders, GPT): query ``i`` sees keys ``j <= i``; nothing from the
  future leaks into the past.
* **key padding** (batches of different lengths): padded keys are invisible to
  every query. Shape ``(B, 1, 1, T_k)`` so it broadcasts over heads and queries.
"""

from __future__ import annotations

import torch
from torch import Tensor


def causal_mask(
    n_queries: int, n_keys: int | None = None, *, offset: int = 0, device=None
) -> Tensor:
    """Lower-triangular mask: query ``i`` may attend to key ``j`` iff ``j <= i + offset``.

    ``offset`` is the absolute position of the first query. With a KV cache that
    already holds ``P`` tokens, the new queries sit at positions ``P, P+1, ...``,
    so pass ``offset=P`` and ``n_keys=P + n_queries``.

    Returns:
        bool tensor of shape ``(n_queries, n_keys)``.
    """
    n_keys = n_queries + offset if n_keys is None else n_keys
    i = torch.arange(n_queries, device=device).unsqueeze(1)  # (T_q, 1)
    j = torch.arange(n_keys, device=device).unsqueeze(0)  # (1, T_k)
    return j <= i + offset


def padding_mask(lengths: Tensor, max_seq_len: int | None = None) -> Tensor:
    """Key-padding mask from sequence lengths.

    Args:
        lengths: ``(B,)`` integer tensor, the number of real tokens per sequence
            (real tokens first, padding after).
        max_seq_len: padded length ``T_k`` (default: ``lengths.max()``).

    Returns:
        bool tensor ``(B, 1, 1, T_k)``; ``True`` marks a real token.
    """
    max_seq_len = int(lengths.max()) if max_seq_len is None else max_seq_len
    positions = torch.arange(max_seq_len, device=lengths.device)
    keep = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, T_k)
    return keep[:, None, None, :]


def padding_mask_from_attention_mask(attention_mask: Tensor) -> Tensor:
    """Hugging Face style ``attention_mask`` ``(B, T)`` of 1/0 to a ``(B, 1, 1, T)`` bool mask."""
    return attention_mask.bool()[:, None, None, :]


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of any number of broadcastable boolean masks (``None`` is ignored).

    Example: a causal mask ``(T, T)`` combined with a padding mask ``(B, 1, 1, T)``
    gives ``(B, 1, T, T)``: causal *and* not padding.
    """
    result = None
    for m in masks:
        if m is None:
            continue
        result = m if result is None else (result & m)
    return result


def mask_to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Boolean mask to an additive bias: 0 where allowed, ``-inf`` where blocked."""
    bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    return bias.masked_fill(~mask, float("-inf"))
