"""Transformer blocks: sub-layers in residual connections (arXiv 1706.03762).

A Transformer is a stack of identical *blocks*. Each block has two or three
sub-layers, and every sub-layer sits inside a residual connection (arXiv 1512.03385)
with a layer normalisation (arXiv 1607.06450):

* **self-attention**: every position reads from the positions its mask allows;
* **cross-attention** (encoder-decoder only): the decoder's positions ask the
  questions (queries), the encoder's output ``memory`` supplies the answers
  (keys and values);
* **position-wise feed-forward**: the same two-layer MLP applied to every position
  on its own, ``FFN(x) = act(x W_1 + b_1) W_2 + b_2`` with ``d_ff`` hidden units
  (usually ``4 * d_model``).

Where the normalisation goes is a choice with two names:

* **Post-LN** (the original paper, BERT, BART): ``x = LN(x + F(x))``. Every
  sub-layer output is renormalised, but the gradient must pass through a LayerNorm
  at each residual step; deep Post-LN stacks need a learning-rate warm-up.
* **Pre-LN** (GPT-2, T5, LLaMA): ``x = x + F(LN(x))``. The residual path is an
  untouched sum from the embedding to the output, which trains stably without
  warm-up (arXiv 2002.04745). The stream is never normalised inside the stack, so
  Pre-LN models add one final LayerNorm before the output head.

``norm_first=False`` is Post-LN and ``norm_first=True`` is Pre-LN, the names used by
``torch.nn.TransformerEncoderLayer``; with dropout 0 and the weights copied, the blocks
here compute exactly what PyTorch's layers compute.

Dropout differs from ``torch.nn.MultiheadAttention`` in one place:
:class:`toolkit.attention.MultiHeadAttention` has no dropout on the attention
weights, only on the sub-layer outputs (as ``dropout1``, ``dropout2``, ...). The
feed-forward sub-layer is :class:`toolkit.ffn.FeedForward` with PyTorch's dropout on
its hidden units (``hidden_dropout``); PyTorch's ``linear1`` / ``linear2`` are its
``fc1`` / ``fc2``.

**Blocks in the toolkit, one module per concept.**

* This module: **the block of each family** (encoder, decoder-only, encoder-decoder
  decoder), PyTorch's ``nn.TransformerEncoderLayer`` / ``nn.TransformerDecoderLayer``
  to the letter (names, the ``norm_first`` switch, ``nn.LayerNorm``, the dropouts).
  :class:`DecoderOnlyBlock` is :class:`EncoderBlock` plus the causal mask. Assignment 01
  builds :class:`DecoderBlock`, before the course has its own norms.
* :mod:`toolkit.residual`: **where the norm goes**, Post-LN against Pre-LN, as two
  classes over one set of sub-layers, with the course's own norms (LayerNorm, RMSNorm)
  and feed-forward variants (GELU or ReLU MLP, SwiGLU) chosen by name; BERT
  (:mod:`toolkit.bert`) and the warm-up experiment (:mod:`toolkit.warmup`) stack them.
  With LayerNorm, a ReLU or GELU MLP and dropout 0 its blocks compute what
  :class:`EncoderBlock` computes (tested). Neither is built on the other:
  :class:`EncoderBlock` runs in Lecture and Assignment 01, where the toolkit students
  install stubs Assignment 05's norms and Pre-LN block (05's exercises), and 05's blocks
  choose the course's norms and SwiGLU by name, which PyTorch's layout has no place for.
* :mod:`toolkit.seq2seq.attention`: **T5's layers**, a different attention (no score
  scale, no biases, a relative position bias handed in by the stack, caches), RMSNorm,
  Pre-LN only; Hugging Face's ``T5Block`` to the letter.
* ``toolkit.models.Block``: **the capstone GPT's block** (GPT-2's names ``ln_1``,
  ``attn``, ``ln_2``, ``mlp``; GQA, RoPE, a KV cache, fused kernels), and
  :class:`toolkit.long_context.PositionBlock`, its small twin for Assignment 02, written
  with PyTorch's layers because it runs before the assignments that build the course's.
"""

from __future__ import annotations

from torch import Tensor, nn

from toolkit.arguments import check_block_args, check_bool_mask, check_sequence
from toolkit.attention import MultiHeadAttention
from toolkit.ffn import FeedForward
from toolkit.masks import causal_mask, combine_masks


class EncoderBlock(nn.Module):
    """One encoder block: self-attention then feed-forward, each with residual + LayerNorm.

    Post-LN (``norm_first=False``)::

        x = norm1(x + SelfAttn(x))
        x = norm2(x + FFN(x))

    Pre-LN (``norm_first=True``)::

        x = x + SelfAttn(norm1(x))
        x = x + FFN(norm2(x))

    No mask is added by the block: attention is bidirectional unless ``mask`` says
    otherwise (e.g. a key-padding mask from :func:`toolkit.masks.padding_mask`).

    Attributes: ``self_attn`` (:class:`~toolkit.attention.MultiHeadAttention`),
    ``ff`` (:class:`~toolkit.ffn.FeedForward` with ``hidden_dropout=dropout``:
    ``fc1``, ``fc2``), ``norm1``, ``norm2``
    (``nn.LayerNorm(d_model, eps=layer_norm_eps)``), ``dropout1``, ``dropout2``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        norm_first: bool = False,
        activation: str = "relu",
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        check_block_args(d_model, n_heads, d_ff, dropout, activation)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, activation, hidden_dropout=dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def _sa(self, x: Tensor, mask: Tensor | None) -> Tensor:
        return self.dropout1(self.self_attn(x, mask=mask))

    def _ff(self, x: Tensor) -> Tensor:
        return self.dropout2(self.ff(x))

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``.
            mask: optional bool mask (``True`` = may attend) broadcastable to
                ``(B, n_heads, T, T)``; ``None`` means full bidirectional attention.

        Returns:
            ``(B, T, d_model)``.
        """
        check_sequence("x", x, self.d_model)
        check_bool_mask("mask", mask)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask)  # x + SelfAttn(LN(x))
            x = x + self._ff(self.norm2(x))  # x + FFN(LN(x))
        else:
            x = self.norm1(x + self._sa(x, mask))  # LN(x + SelfAttn(x))
            x = self.norm2(x + self._ff(x))  # LN(x + FFN(x))
        return x


class DecoderOnlyBlock(EncoderBlock):
    """A GPT-style block: an :class:`EncoderBlock` whose self-attention is causal.

    The only difference from the encoder block is the mask. By default
    (``causal=True``) the block builds ``toolkit.masks.causal_mask(T)`` itself and
    ANDs it with any ``mask`` given (e.g. key padding), so query ``i`` sees key ``j``
    only if ``j <= i`` *and* ``mask`` allows it. There is no cross-attention.

    Same attributes as :class:`EncoderBlock`.
    """

    def forward(self, x: Tensor, mask: Tensor | None = None, causal: bool = True) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``.
            mask: optional bool mask broadcastable to ``(B, n_heads, T, T)``,
                combined (logical AND) with the causal mask.
            causal: build and apply the causal mask (default). ``False`` turns the
                block into a plain :class:`EncoderBlock`.

        Returns:
            ``(B, T, d_model)``.
        """
        check_sequence("x", x, self.d_model)
        check_bool_mask("mask", mask)
        if causal:
            mask = combine_masks(causal_mask(x.size(1), device=x.device), mask)  # j <= i
        return super().forward(x, mask)


class DecoderBlock(nn.Module):
    """One encoder-decoder decoder block: causal self-attention, cross-attention, FFN.

    Post-LN (``norm_first=False``)::

        x = norm1(x + SelfAttn(x, causal & self_mask))
        x = norm2(x + CrossAttn(x, memory, memory_mask))
        x = norm3(x + FFN(x))

    Pre-LN (``norm_first=True``)::

        x = x + SelfAttn(norm1(x), causal & self_mask)
        x = x + CrossAttn(norm2(x), memory, memory_mask)
        x = x + FFN(norm3(x))

    **Causal mask.** With ``causal=True`` (the default) the block builds
    ``toolkit.masks.causal_mask(T_tgt)`` itself and combines it with ``self_mask``
    by logical AND (:func:`toolkit.masks.combine_masks`); pass only *extra*
    restrictions such as target padding in ``self_mask``. ``causal=False`` uses
    ``self_mask`` alone (``None`` = bidirectional).

    **Cross-attention** takes queries from the decoder stream and keys/values from
    ``memory`` (the encoder output, which is *not* normalised again here). It is not
    causal: every target position may read every source position, because the whole
    source is known before decoding starts. Only ``memory_mask`` (typically the
    source padding mask ``(B, 1, 1, T_src)``) restricts it. Note that in Pre-LN only
    the query side ``x`` passes through ``norm2``, as in PyTorch.

    Attributes: ``self_attn``, ``cross_attn``
    (:class:`~toolkit.attention.MultiHeadAttention`), ``ff``
    (:class:`~toolkit.ffn.FeedForward`), ``norm1``, ``norm2``, ``norm3``, ``dropout1``,
    ``dropout2``, ``dropout3``. PyTorch names the cross-attention ``multihead_attn`` and
    the feed-forward matrices ``linear1`` / ``linear2`` (ours: ``ff.fc1`` / ``ff.fc2``).
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        norm_first: bool = False,
        activation: str = "relu",
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        check_block_args(d_model, n_heads, d_ff, dropout, activation)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, activation, hidden_dropout=dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        causal: bool = True,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T_tgt, d_model)`` decoder stream.
            memory: ``(B, T_src, d_model)`` encoder output.
            self_mask: optional bool mask broadcastable to ``(B, n_heads, T_tgt, T_tgt)``,
                ANDed with the causal mask the block builds.
            memory_mask: optional bool mask broadcastable to
                ``(B, n_heads, T_tgt, T_src)``, e.g. a source padding mask.
            causal: apply the block's own causal mask (default ``True``).

        Returns:
            ``(B, T_tgt, d_model)``.
        """
        check_sequence("x", x, self.d_model)
        check_sequence("memory", memory, self.d_model)
        if memory.size(0) != x.size(0):
            raise ValueError(
                f"memory batch size {memory.size(0)} must equal x batch size {x.size(0)}"
            )
        check_bool_mask("self_mask", self_mask)
        check_bool_mask("memory_mask", memory_mask)
        if causal:
            self_mask = combine_masks(causal_mask(x.size(1), device=x.device), self_mask)

        def sa(h: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(h, mask=self_mask))

        def ca(h: Tensor) -> Tensor:
            # Q from the decoder (h), K and V from the encoder (memory).
            return self.dropout2(self.cross_attn(h, memory, mask=memory_mask))

        def ff(h: Tensor) -> Tensor:
            return self.dropout3(self.ff(h))

        if self.norm_first:
            x = x + sa(self.norm1(x))  # x + SelfAttn(LN(x))
            x = x + ca(self.norm2(x))  # x + CrossAttn(LN(x), memory)
            x = x + ff(self.norm3(x))  # x + FFN(LN(x))
        else:
            x = self.norm1(x + sa(x))  # LN(x + SelfAttn(x))
            x = self.norm2(x + ca(x))  # LN(x + CrossAttn(x, memory))
            x = self.norm3(x + ff(x))  # LN(x + FFN(x))
        return x
