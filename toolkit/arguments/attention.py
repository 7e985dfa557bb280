"""Argument checks: attention tensors and Transformer blocks (``(B, H, T, d)``,
``(B, T, d_model)``)."""

from __future__ import annotations

import torch
from torch import Tensor

from .numbers import check_dropout, check_int

#: Activations of the blocks of :mod:`toolkit.transformer.blocks` (their feed-forward network,
#: :class:`toolkit.ffn.FeedForward`, accepts more).
BLOCK_ACTIVATIONS = ("gelu", "relu")


# --------------------------------------------------------------------------------------
# Attention tensors
# --------------------------------------------------------------------------------------


def check_kv_heads(n_heads: int, n_kv_heads: int) -> None:
    """Grouped-query heads: both counts >= 1 and ``n_heads`` a multiple of ``n_kv_heads``."""
    if n_kv_heads < 1 or n_heads < 1:
        raise ValueError(f"n_heads and n_kv_heads must be >= 1, got {n_heads}, {n_kv_heads}")
    if n_heads % n_kv_heads != 0:
        raise ValueError(
            f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads} "
            "(each KV head serves a whole group of query heads)"
        )


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """``q (B, H, T_q, d)``, ``k (B, H, T_k, d)``, ``v (B, H, T_k, d_v)``: same heads and batch."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, T, d), got shape {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same feature size, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"k and v need the same (B, H, T), got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q and k need the same (B, H), got {tuple(q.shape)} and {tuple(k.shape)}")


def check_flash_inputs(q: Tensor, k: Tensor, v: Tensor, block_q: int, block_k: int) -> int:
    """Tiled attention's inputs; returns the GQA group size ``g = H / H_kv``.

    ``q (B, H, N_q, d)``, ``k (B, H_kv, N_k, d)``, ``v (B, H_kv, N_k, d_v)`` with ``H`` a
    multiple of ``H_kv``, and tile sizes ``block_q, block_k >= 1``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, heads, N, d), got shape {tuple(t.shape)}")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"k and v must be (B, H_kv, N_k, .) with q's batch; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same d, got {q.shape[-1]} and {k.shape[-1]}")
    H, H_kv = q.shape[1], k.shape[1]
    if H % H_kv != 0:
        raise ValueError(f"q heads ({H}) must be a multiple of k/v heads ({H_kv}) for GQA")
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block_q and block_k must be >= 1, got {block_q}, {block_k}")
    return H // H_kv


def check_flash_backward_inputs(q: Tensor, out: Tensor, lse: Tensor, dout: Tensor) -> None:
    """The FlashAttention backward's extra inputs fit the forward's ``q (B, H, N_q, d)``.

    ``out`` and ``dout`` ``(B, H, N_q, d)`` in ``q``'s dtype and on its device (the
    forward's output and the loss's gradient with respect to it); ``lse`` ``(B, H, N_q)``
    float32 (or float64 for float64 gradient checks) on ``q``'s device (the forward's
    natural-log log-sum-exp).
    """
    for name, t in (("out", out), ("dout", dout)):
        if not isinstance(t, Tensor) or t.shape != q.shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {got}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(
                f"{name} must have q's dtype and device ({q.dtype}, {q.device}), "
                f"got {t.dtype}, {t.device}"
            )
    lse_dtypes = (torch.float32, torch.float64) if q.dtype == torch.float64 else (torch.float32,)
    if not isinstance(lse, Tensor) or lse.shape != q.shape[:3] or lse.dtype not in lse_dtypes:
        got = f"{tuple(lse.shape)} {lse.dtype}" if isinstance(lse, Tensor) else type(lse).__name__
        raise ValueError(
            f"lse must be the forward's float32 log-sum-exp, shape {tuple(q.shape[:3])}; got {got}"
        )
    if lse.device != q.device:
        raise ValueError(f"lse must be on q's device {q.device}, got {lse.device}")


def check_bool_mask(name: str, mask: Tensor | None) -> None:
    """``None`` or a ``bool`` mask (``True`` = may attend), never 1/0 numbers."""
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "convert 1/0 attention masks with toolkit.masks.padding_mask_from_attention_mask"
        )


# --------------------------------------------------------------------------------------
# Transformer blocks
# --------------------------------------------------------------------------------------


def check_block_args(d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str):
    """A block's sizes (positive integers), dropout and activation (:data:`BLOCK_ACTIVATIONS`)."""
    check_int("d_model", d_model)
    check_int("n_heads", n_heads)
    check_int("d_ff", d_ff)
    check_dropout(dropout)
    if activation not in BLOCK_ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {sorted(BLOCK_ACTIVATIONS)}, got {activation!r}"
        )


def check_sequence(name: str, x: Tensor, d_model: int) -> None:
    """A batch of sequences ``(batch, seq, d_model)``."""
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(
            f"{name} must have shape (batch, seq, d_model={d_model}), got {tuple(x.shape)}"
        )


