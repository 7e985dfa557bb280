"""The residual stream, and where the normalisation goes: Post-LN and Pre-LN blocks.

A Transformer block never *replaces* its input. Each sub-layer ``F`` (attention, then
the feed-forward network) reads the current vector of every position and *adds* its
result back (arXiv 1512.03385):

    x <- x + F(x)

So the vector that travels from the embedding to the output head, the **residual
stream**, is a running sum: the embedding plus everything every sub-layer has written.
It behaves like a shared workspace of width ``d_model``: a layer reads what earlier
layers wrote, and writes what later layers (and the head) will read. Where the
normalisation sits decides what that sum looks like:

* **Post-LN** (the original Transformer, arXiv 1706.03762; BERT, 1810.04805)::

      x = LN(x + F(x))

  The stream is renormalised after every addition: its scale stays fixed, but the
  gradient of the loss with respect to an early layer must pass through every later
  LayerNorm. At initialisation the gradients of the parameters near the *output* are
  large, so a large learning rate in the first steps blows them up: Post-LN needs a
  learning-rate **warm-up** (arXiv 2002.04745, Xiong et al., "On Layer Normalization
  in the Transformer Architecture").

* **Pre-LN** (GPT-2, T5, LLaMA and nearly every recent model)::

      x = x + F(LN(x))

  Each sub-layer reads a normalised *copy*; the stream itself is an untouched sum, so
  the identity path from input to output carries the gradient straight through.
  Xiong et al. show the gradients are then well behaved at initialisation and the
  model trains without warm-up. The stream is never normalised inside the stack and
  grows with depth, so a Pre-LN model adds one **final norm** before the output head.

:class:`PostLNBlock` and :class:`PreLNBlock` have the same sub-layers
(:class:`ResidualBlock`); only ``forward`` differs. :class:`EncoderStack` stacks either
kind, with the final norm for Pre-LN. ``norm`` picks LayerNorm (BERT, GPT-2) or RMSNorm
(LLaMA); ``ffn`` the classic GELU MLP or SwiGLU. With LayerNorm, a GELU or ReLU
feed-forward and dropout 0, the blocks compute what ``torch.nn.TransformerEncoderLayer``
computes with ``norm_first=False`` / ``True`` and the same weights (tested).

Attention is bidirectional (encoder blocks); pass a key-padding ``mask`` (bool,
``True`` = may attend, broadcastable to ``(B, n_heads, T, T)``) to hide padding.

This module is the toolkit's home of the residual wiring (where the norm goes). The
blocks of the three families, with PyTorch's ``norm_first`` switch and names, are in
:mod:`toolkit.transformer.blocks`, whose docstring maps every block of the toolkit to
its concept; with LayerNorm and dropout 0, :class:`PostLNBlock` and :class:`PreLNBlock`
compute what its ``EncoderBlock`` computes with ``norm_first=False`` / ``True``
(tested). The feed-forward networks come from :mod:`toolkit.ffn`.

Shapes: ``(B, T, d_model)`` -> ``(B, T, d_model)``.
"""

from __future__ import annotations

from torch import Tensor, nn

from toolkit.arguments import check_dropout, check_int
from toolkit.attention import MultiHeadAttention
from toolkit.ffn import FeedForward, SwiGLU
from toolkit.norm import LayerNorm, RMSNorm

#: Normalisation layers by name.
NORMS = ("layernorm", "rmsnorm")
#: Feed-forward networks by name: the classic MLP with one activation, or SwiGLU.
FFNS = ("gelu", "gelu_tanh", "relu", "swiglu")


def make_norm(kind: str, d_model: int, eps: float) -> nn.Module:
    """``LayerNorm`` for ``"layernorm"``, ``RMSNorm`` for ``"rmsnorm"``, of width ``d_model``."""
    if kind == "layernorm":
        return LayerNorm(d_model, eps=eps)
    if kind == "rmsnorm":
        return RMSNorm(d_model, eps=eps)
    raise ValueError(f"norm must be one of {NORMS}, got {kind!r}")


def make_ffn(kind: str, d_model: int, d_ff: int | None) -> nn.Module:
    """The feed-forward sub-layer: ``SwiGLU`` for ``"swiglu"``, else a classic MLP.

    ``d_ff=None`` takes each one's default hidden size: ``4 d`` for the MLP, ``8d/3``
    rounded up to a multiple of 256 for SwiGLU.
    """
    if kind == "swiglu":
        return SwiGLU(d_model, d_ff)
    if kind in FFNS:
        return FeedForward(d_model, d_ff, activation=kind)
    raise ValueError(f"ffn must be one of {FFNS}, got {kind!r}")


class ResidualBlock(nn.Module):
    """The sub-layers every encoder block holds; subclasses say where the norms go.

    Args:
        d_model: width of the residual stream.
        n_heads: attention heads (``d_model`` divisible by it).
        d_ff: feed-forward hidden size (default: see :func:`make_ffn`).
        norm: ``"layernorm"`` or ``"rmsnorm"``.
        ffn: ``"gelu"``, ``"gelu_tanh"``, ``"relu"`` or ``"swiglu"``.
        dropout: on each sub-layer's output, before the residual addition.
        eps: the norms' epsilon.

    Attributes: ``self_attn`` (:class:`~toolkit.attention.MultiHeadAttention`),
    ``ffn``, ``norm1`` (paired with attention), ``norm2`` (paired with the
    feed-forward network), ``dropout1``, ``dropout2``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        norm: str = "layernorm",
        ffn: str = "gelu",
        dropout: float = 0.0,
        eps: float = 1e-5,
    ):
        super().__init__()
        check_dropout(dropout)
        self.d_model = d_model
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ffn = make_ffn(ffn, d_model, d_ff)
        self.norm1 = make_norm(norm, d_model, eps)
        self.norm2 = make_norm(norm, d_model, eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        raise NotImplementedError("use PostLNBlock or PreLNBlock")


class PostLNBlock(ResidualBlock):
    """``x = LN(x + Attn(x)); x = LN(x + FFN(x))``: the original layout (BERT)."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x`` ``(B, T, d_model)``, optional bool ``mask`` -> ``(B, T, d_model)``."""
        x = self.norm1(x + self.dropout1(self.self_attn(x, mask=mask)))  # LN(x + Attn(x))
        x = self.norm2(x + self.dropout2(self.ffn(x)))  # LN(x + FFN(x))
        return x


class PreLNBlock(ResidualBlock):
    """``x = x + Attn(LN(x)); x = x + FFN(LN(x))``: GPT-2, T5, LLaMA."""

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x`` ``(B, T, d_model)``, optional bool ``mask`` -> ``(B, T, d_model)``."""
        x = x + self.dropout1(self.self_attn(self.norm1(x), mask=mask))  # x + Attn(LN(x))
        x = x + self.dropout2(self.ffn(self.norm2(x)))  # x + FFN(LN(x))
        return x


class EncoderStack(nn.Module):
    """``n_layers`` blocks of one layout, and a final norm when they are Pre-LN.

    Args:
        n_layers: number of blocks.
        norm_first: ``True`` for Pre-LN blocks plus ``final_norm``; ``False`` for
            Post-LN blocks (their output is already normalised: ``final_norm`` is
            the identity).
        d_model, n_heads, d_ff, norm, ffn, dropout, eps: as :class:`ResidualBlock`.

    Attributes: ``layers`` (``nn.ModuleList``), ``final_norm``.

    Shapes: ``(B, T, d_model)`` -> ``(B, T, d_model)``.
    """

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        norm_first: bool = True,
        norm: str = "layernorm",
        ffn: str = "gelu",
        dropout: float = 0.0,
        eps: float = 1e-5,
    ):
        super().__init__()
        check_int("n_layers", n_layers)
        block = PreLNBlock if norm_first else PostLNBlock
        self.norm_first = norm_first
        self.layers = nn.ModuleList(
            block(d_model, n_heads, d_ff, norm, ffn, dropout, eps) for _ in range(n_layers)
        )
        self.final_norm = make_norm(norm, d_model, eps) if norm_first else nn.Identity()

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """``x`` ``(B, T, d_model)``, optional bool ``mask`` -> ``(B, T, d_model)``."""
        for layer in self.layers:
            x = layer(x, mask)
        return self.final_norm(x)  # Pre-LN: normalise the stream once, at the end
