"""Scaled dot-product attention and multi-head attention (arXiv 1706.03762).

Attention lets every query position read a weighted average of value vectors,
with weights given by how well the query matches each key:

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k) + mask) V

* ``Q K^T`` scores every (query, key) pair: ``(..., T_q, T_k)``.
* Dividing by ``sqrt(d_k)`` keeps the scores' variance near 1 when the entries
  of q and k have unit variance; without it, large ``d_k`` pushes the softmax
  into a near one-hot regime with vanishing gradients.
* The mask is applied *before* the softmax: blocked scores become ``-inf`` so
  they receive exactly zero weight and the remaining weights still sum to 1.
  (Zeroing weights *after* the softmax leaves rows that no longer sum to 1.)

Cost: ``O(T^2 d)`` time and ``O(T^2)`` memory for the score matrix per head:
4096^2 scores x 2 bytes (fp16) = 33.5 MB per head, 1.07 GB for 32 heads.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def attention_weights(
    q: Tensor, k: Tensor, mask: Tensor | None = None, scale: float | None = None
) -> Tensor:
    """The attention probabilities ``softmax(q k^T * scale + mask)``.

    Args:
        q: ``(..., T_q, d_k)`` queries.
        k: ``(..., T_k, d_k)`` keys.
        mask: bool (``True`` = may attend) or float (added to the scores),
            broadcastable to ``(..., T_q, T_k)``.
        scale: multiplier for the scores; default ``1 / sqrt(d_k)``.

    Returns:
        ``(..., T_q, T_k)`` weights; each row sums to 1, except a row whose keys
        are all masked (bool ``False`` or ``-inf``), which is all zeros (defined
        behaviour, never NaN, with zero gradient). A float mask is simply added: a row
        masked with the most negative *finite* value ``torch.finfo(dtype).min`` comes out
        uniform where that value swamps every score (float32, bfloat16); in float16,
        ``-65504 + s`` rounds to ``-65504`` for ``s > -16`` but overflows to ``-inf``
        below, so the row is uniform over the keys that scored above -16 only.
    """
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask.is_floating_point():
            scores = scores + mask.to(scores.dtype)
        else:
            raise ValueError(
                f"mask has dtype {mask.dtype}: pass a bool mask (True = may attend) or a float "
                "bias; convert a 0/1 attention_mask with .bool()"
            )
    # A row with no visible key would be softmax(-inf, ..., -inf) = 0/0 = NaN, and so
    # would its gradient. Define it as "attends to nothing": give the row finite
    # scores for the softmax, then zero its weights, so output and gradient are 0.
    has_visible_key = scores.amax(dim=-1, keepdim=True) > float("-inf")
    scores = scores.masked_fill(~has_visible_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~has_visible_key, 0.0)


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """``softmax(q k^T / sqrt(d_k) + mask) v``.

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``.
        mask: see :func:`attention_weights`.
        scale: default ``1 / sqrt(d_k)``.

    Returns:
        ``(..., T_q, d_v)``. Matches ``torch.nn.functional.scaled_dot_product_attention``
        with the same boolean ``attn_mask`` wherever a row has a visible key; rows
        with no visible key are zeros.
    """
    return attention_weights(q, k, mask, scale) @ v


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """``(B, T, d_model)`` -> ``(B, h, T, d_k)`` with ``d_k = d_model / h``.

    Each head owns a contiguous slice of the feature axis, never of the time axis.
    """
    B, T, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.view(B, T, n_heads, d_model // n_heads).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, h, T, d_k)`` -> ``(B, T, h * d_k)``: the inverse of :func:`split_heads`."""
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)


class MultiHeadAttention(nn.Module):
    """Multi-head attention: ``h`` attentions in parallel on ``d_k = d_model / h`` features.

    ``MHA(x_q, x_kv) = concat(head_1, ..., head_h) W_o`` with
    ``head_i = Attention(x_q W_q^i, x_kv W_k^i, x_kv W_v^i)``.

    Self-attention passes one sequence (``x_kv = x_q``). Cross-attention takes the
    queries from the decoder and keys and values from the encoder output.

    Parameter names follow Hugging Face (``q_proj``, ``k_proj``, ``v_proj``,
    ``out_proj``), each an ``nn.Linear(d_model, d_model, bias=bias)``; the weights
    map one-to-one onto ``torch.nn.MultiheadAttention``'s ``in_proj_weight``
    (stacked q, k, v rows) and ``out_proj``.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self, x_q: Tensor, x_kv: Tensor | None = None, mask: Tensor | None = None
    ) -> Tensor:
        """
        Args:
            x_q: ``(B, T_q, d_model)`` the sequence that asks.
            x_kv: ``(B, T_k, d_model)`` the sequence that answers (default ``x_q``).
            mask: bool, broadcastable to ``(B, h, T_q, T_k)``.

        Returns:
            ``(B, T_q, d_model)``.
        """
        x_kv = x_q if x_kv is None else x_kv
        q = split_heads(self.q_proj(x_q), self.n_heads)  # (B, h, T_q, d_k)
        k = split_heads(self.k_proj(x_kv), self.n_heads)  # (B, h, T_k, d_k)
        v = split_heads(self.v_proj(x_kv), self.n_heads)  # (B, h, T_k, d_k)
        out = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_q, d_k)
        return self.out_proj(merge_heads(out))
