"""Differential attention, from the Differential Transformer (arXiv 2410.05258).

Softmax attention never gives a key exactly zero weight, so a long context spreads
a little weight over many irrelevant tokens ("attention noise"). Differential
attention computes **two** attention maps from two halves of the query/key
projections and subtracts one from the other, like a differential amplifier
cancelling common-mode noise:

    DiffAttn(X) = (softmax(Q1 K1^T / sqrt(d)) - lambda softmax(Q2 K2^T / sqrt(d))) V

Weight that both maps put on a key cancels; what only the first map sees survives.
The weights of a row now sum to ``1 - lambda`` and may be negative.

``lambda`` is a learned scalar, re-parameterised so that it moves smoothly:

    lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init
    lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1))     (l = 1, 2, ... the layer number)

so ``lambda_init`` is 0.2 in the first layer and approaches 0.8 in deep layers.

Each head's output (width ``2 d``, since ``V`` is not split) goes through its own
RMSNorm ("GroupNorm" per head in the paper), then is scaled by ``(1 - lambda_init)``
so that the output's scale matches ordinary attention at initialisation. Heads are
concatenated and projected by ``out_proj``.

Layout (same as the paper's reference code, so weights transfer): with ``n_heads``
differential heads, ``d = d_model / (2 n_heads)``; ``q_proj`` and ``k_proj`` output
``2 n_heads`` sub-heads of width ``d``, and head ``h`` uses sub-heads ``2h`` (Q1, K1)
and ``2h + 1`` (Q2, K2); ``v_proj`` outputs ``n_heads`` heads of width ``2 d``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from toolkit.attention import attention_weights
from toolkit.masks import causal_mask, combine_masks


def lambda_init_fn(layer: int) -> float:
    """``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))`` for the 1-based layer number ``l``."""
    if layer < 1:
        raise ValueError(f"layer is the 1-based layer number l >= 1, got {layer}")
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))


def differential_attention(
    q1: Tensor,
    k1: Tensor,
    q2: Tensor,
    k2: Tensor,
    v: Tensor,
    lam: Tensor | float,
    mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """``(softmax(q1 k1^T * scale) - lam * softmax(q2 k2^T * scale)) v``.

    Args:
        q1, q2: ``(B, H, T_q, d)``; k1, k2: ``(B, H, T_k, d)``; v: ``(B, H, T_k, d_v)``.
        lam: scalar (or broadcastable to ``(B, H, 1, 1)``).
        mask: bool, ``True`` = may attend, broadcastable to ``(B, H, T_q, T_k)``;
            applied to *both* maps before their softmaxes.
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``(B, H, T_q, d_v)``.
    """
    a1 = attention_weights(q1, k1, mask, scale)  # softmax(Q1 K1^T / sqrt d)
    a2 = attention_weights(q2, k2, mask, scale)  # softmax(Q2 K2^T / sqrt d)
    return (a1 - lam * a2) @ v  # (A1 - lambda A2) V


class DifferentialAttention(nn.Module):
    """Multi-head differential attention (arXiv 2410.05258).

    Args:
        d_model: model width, divisible by ``2 * n_heads``.
        n_heads: number of differential heads (each uses two query/key sub-heads).
        layer: 1-based layer number ``l``, sets ``lambda_init``.
        bias: bias in the projections.

    ``forward(x (B, T, d_model)) -> (B, T, d_model)``.
    """

    def __init__(self, d_model: int, n_heads: int, layer: int = 1, bias: bool = False):
        super().__init__()
        if n_heads < 1 or d_model % (2 * n_heads) != 0:
            raise ValueError(
                f"d_model={d_model} must be divisible by 2 * n_heads={2 * n_heads} "
                "(each head splits its query/key into two halves)"
            )
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads // 2  # d: width of Q1, Q2, K1, K2
        self.lambda_init = lambda_init_fn(layer)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.lambda_q1 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.lambda_k1 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.lambda_q2 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.lambda_k2 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.subln = nn.RMSNorm(2 * self.d_head, eps=1e-5)  # per-head norm, width 2d

    def lambda_full(self) -> Tensor:
        """``lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init`` (a 0-d tensor)."""
        lam1 = torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))  # exp(lq1 . lk1)
        lam2 = torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))  # exp(lq2 . lk2)
        return lam1 - lam2 + self.lambda_init

    def forward(self, x: Tensor, mask: Tensor | None = None, causal: bool = True) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``.
            mask: extra bool mask broadcastable to ``(B, n_heads, T, T)``.
            causal: AND a causal mask in.

        Returns:
            ``(B, T, d_model)``.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        H, d = self.n_heads, self.d_head
        q = self.q_proj(x).view(B, T, H, 2, d).permute(3, 0, 2, 1, 4)  # (2, B, H, T, d)
        k = self.k_proj(x).view(B, T, H, 2, d).permute(3, 0, 2, 1, 4)  # sub-head 2h+i -> [i, h]
        v = self.v_proj(x).view(B, T, H, 2 * d).transpose(1, 2)  # (B, H, T, 2d)
        attn_mask = combine_masks(causal_mask(T, device=x.device) if causal else None, mask)
        out = differential_attention(q[0], k[0], q[1], k[1], v, self.lambda_full(), attn_mask)
        out = self.subln(out) * (1.0 - self.lambda_init)  # per-head RMSNorm, x (1 - lambda_init)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.d_model))
