"""T5's attention layer and the two layers built from it (arXiv 1910.10683).

T5's attention differs from the course's multi-head attention in three ways, all of
them Hugging Face's ``T5Attention`` too:

* **no** ``1/sqrt(d_head)``: the scores are ``q k^T`` (T5 folds the scale into the
  initialisation of the query projection), and there are no biases on the projections;
* positions enter as a **bias on the scores** (:class:`toolkit.position.T5RelativePositionBias`),
  added before the softmax; the stack computes it once and hands the same tensor to
  every layer; cross-attention gets none (a target position and a source position are
  on two different axes, so their offset means nothing);
* in **cross-attention** the queries come from the decoder and the keys and values from
  the encoder output; with a cache they are projected once per input.

Each layer is pre-norm with T5's RMS norm (no mean, no bias): ``x + F(RMSNorm(x))``.
The feed-forward sub-layer is T5's ``DenseReluDense``, ``wo(relu(wi(x)))`` without
biases: the toolkit's :class:`~toolkit.ffn.FeedForward` with ``activation="relu"``,
``bias=False``, its ``fc1`` / ``fc2`` being T5's ``wi`` / ``wo``.

Why T5's layers are not :mod:`toolkit.transformer.blocks`' ``EncoderBlock`` and
``DecoderBlock``: the wiring (Pre-LN, three sub-layers in the decoder) is the same, but
every part differs. The attention is :class:`T5Attention` (no ``1/sqrt(d_head)``, no
biases, a position bias handed in by the stack, a cache for incremental decoding and for
the cross-attention's projected memory), the norm is RMSNorm, and the layer has no
dropout and no ``norm_first`` switch. The family blocks are PyTorch's
``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer`` to the letter; these are
Hugging Face's ``T5Block`` to the letter (both tested).

Shapes: streams ``(B, T, d_model)``; heads ``(B, H, T, d_head)``; bias ``(1, H, T, T_k)``;
masks bool, broadcastable to ``(B, H, T, T_k)``, ``True`` = may attend.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toolkit.ffn import FeedForward
from toolkit.norm import RMSNorm
from toolkit.seq2seq.cache import EncDecCache
from toolkit.seq2seq.config import EncDecConfig


class T5Attention(nn.Module):
    """Self- or cross-attention as T5 computes it: ``softmax(q k^T + bias) v``.

    Args:
        config: the model's :class:`EncDecConfig`.
        cross: keys and values from ``memory`` (the encoder output), not from ``x``.

    Attributes: ``q_proj``, ``k_proj``, ``v_proj`` (``d_model -> n_heads * d_head``),
    ``o_proj`` (back), all without bias.
    """

    def __init__(self, config: EncDecConfig, cross: bool = False):
        super().__init__()
        self.n_heads, self.d_head, self.cross = config.n_heads, config.d_head, cross
        inner = config.n_heads * config.d_head
        self.q_proj = nn.Linear(config.d_model, inner, bias=False)
        self.k_proj = nn.Linear(config.d_model, inner, bias=False)
        self.v_proj = nn.Linear(config.d_model, inner, bias=False)
        self.o_proj = nn.Linear(inner, config.d_model, bias=False)

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, H * d_head)`` -> ``(B, H, T, d_head)``."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        cache: EncDecCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``, the stream the queries come from.
            memory: ``(B, S, d_model)`` encoder output; the keys and values of
                cross-attention (unused by self-attention).
            bias: ``(1, H, T, T_k)`` position bias added to the scores, or ``None``.
            mask: bool, broadcastable to ``(B, H, T, T_k)``; ``True`` = may attend.
            cache: self-attention appends this call's keys and values and attends over
                all of them; cross-attention projects ``memory`` on the first call and
                reads the cache after that.
            layer: this layer's index in the cache.

        Returns:
            ``(B, T, d_model)``.
        """
        B, T, _ = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, H, T, d_head)
        if self.cross and cache is not None and cache.has_cross(layer):
            k, v = cache.cross_keys[layer], cache.cross_values[layer]  # projected once
        else:
            source = memory if self.cross else x  # cross: keys and values from the encoder
            k = self.split_heads(self.k_proj(source))  # (B, H, T_k, d_head)
            v = self.split_heads(self.v_proj(source))
            if cache is not None:
                k, v = cache.update(layer, k, v, cross=self.cross)
        scores = q @ k.transpose(-2, -1)  # q k^T, no 1/sqrt(d_head) in T5: (B, H, T, T_k)
        if bias is not None:
            scores = scores + bias  # position bias, before the softmax
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, T_k)
        out = (weights @ v).transpose(1, 2).reshape(B, T, self.n_heads * self.d_head)
        return self.o_proj(out)


class EncoderLayer(nn.Module):
    """Bidirectional self-attention then feed-forward, each ``x + F(RMSNorm(x))``."""

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.d_model, config.eps)
        self.self_attn = T5Attention(config)
        self.norm2 = RMSNorm(config.d_model, config.eps)
        self.ff = FeedForward(config.d_model, config.d_ff, "relu", bias=False)

    def forward(self, x: Tensor, bias: Tensor | None, mask: Tensor | None) -> Tensor:
        """``x`` ``(B, S, d)``; ``bias`` ``(1, H, S, S)``; ``mask`` ``(B, 1, 1, S)``."""
        x = x + self.self_attn(self.norm1(x), bias=bias, mask=mask)
        return x + self.ff(self.norm2(x))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.d_model, config.eps)
        self.self_attn = T5Attention(config)
        self.norm2 = RMSNorm(config.d_model, config.eps)
        self.cross_attn = T5Attention(config, cross=True)
        self.norm3 = RMSNorm(config.d_model, config.eps)
        self.ff = FeedForward(config.d_model, config.d_ff, "relu", bias=False)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        bias: Tensor | None,
        self_mask: Tensor | None,
        cross_mask: Tensor | None,
        cache: EncDecCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """``x`` ``(B, T, d)``, ``memory`` ``(B, S, d)``; ``bias`` ``(1, H, T, T_k)``;
        ``self_mask`` ``(T, T_k)``; ``cross_mask`` ``(B, 1, 1, S)``. No bias in
        cross-attention."""
        x = x + self.self_attn(self.norm1(x), bias=bias, mask=self_mask, cache=cache, layer=layer)
        x = x + self.cross_attn(self.norm2(x), memory, mask=cross_mask, cache=cache, layer=layer)
        return x + self.ff(self.norm3(x))
