"""Transformer blocks and the three model families (arXiv 1706.03762).

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

Which mask a block uses decides the *family* (see :func:`family_attention_patterns`):

* **encoder-only** (bidirectional self-attention): every token sees the whole input.
  Fits understanding tasks where the input is given in full: classification,
  tagging, extractive question answering, sentence embeddings.
  BERT (arXiv 1810.04805), RoBERTa (1907.11692), DeBERTa (2006.03654),
  ELECTRA (2003.10555).
* **decoder-only** (causal self-attention): token ``i`` sees tokens ``j <= i``, so
  the model can be trained to predict token ``i + 1`` at every position at once and
  then generate left to right. Fits open-ended generation, chat, code completion and
  anything phrased as "continue this text". GPT-3 (arXiv 2005.14165),
  LLaMA (2302.13971), Mistral (2310.06825).
* **encoder-decoder** (bidirectional encoder, causal decoder, cross-attention):
  the input is read in full once, then the output is generated token by token while
  looking back at it. Fits input-to-output transformations where the two sides differ:
  translation, summarisation, speech recognition. T5 (arXiv 1910.10683),
  BART (1910.13461), Whisper (2212.04356).

Positions: the tiny models below use a learned absolute position table (BERT,
GPT-2). Without *any* position information, self-attention cannot tell token order
apart (it is permutation-equivariant); section 2 of the course covers the
alternatives (sinusoidal, RoPE, ALiBi, T5 bias).

Dropout differs from ``torch.nn.MultiheadAttention`` in one place:
:class:`toolkit.attention.MultiHeadAttention` has no dropout on the attention
weights, only on the sub-layer outputs (as ``dropout1``, ``dropout2``, ...).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.attention import MultiHeadAttention
from toolkit.masks import causal_mask, combine_masks, padding_mask_from_attention_mask

_ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


def _check_block_args(d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str):
    if d_model <= 0:
        raise ValueError(f"d_model must be a positive integer, got {d_model}")
    if n_heads <= 0:
        raise ValueError(f"n_heads must be a positive integer, got {n_heads}")
    if d_ff <= 0:
        raise ValueError(f"d_ff must be a positive integer, got {d_ff}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")
    if activation not in _ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}"
        )


def _check_sequence(name: str, x: Tensor, d_model: int) -> None:
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(
            f"{name} must have shape (batch, seq, d_model={d_model}), got {tuple(x.shape)}"
        )


def _check_mask(name: str, mask: Tensor | None) -> None:
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "convert 1/0 attention masks with toolkit.masks.padding_mask_from_attention_mask"
        )


class PositionwiseFeedForward(nn.Module):
    """``FFN(x) = linear2(dropout(act(linear1(x))))``, applied to each position alone.

    Names ``linear1`` / ``linear2`` match ``torch.nn.TransformerEncoderLayer``.
    ``activation="gelu"`` is the exact (erf) GELU of arXiv 1606.08415, as in BERT and
    PyTorch; ``"relu"`` is the original paper's choice.

    Shapes: ``(B, T, d_model)`` -> ``(B, T, d_model)``, through ``(B, T, d_ff)``.
    """

    def __init__(self, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0):
        super().__init__()
        _check_block_args(d_model, 1, d_ff, dropout, activation)
        self.activation_name = activation
        self.activation = _ACTIVATIONS[activation]
        self.linear1 = nn.Linear(d_model, d_ff)
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.linear1(x))  # act(x W_1 + b_1): (B, T, d_ff)
        return self.linear2(self.dropout(h))  # h W_2 + b_2: (B, T, d_model)


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
    ``ff`` (:class:`PositionwiseFeedForward`), ``norm1``, ``norm2``
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
        _check_block_args(d_model, n_heads, d_ff, dropout, activation)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = PositionwiseFeedForward(d_model, d_ff, activation, dropout)
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
        _check_sequence("x", x, self.d_model)
        _check_mask("mask", mask)
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
        _check_sequence("x", x, self.d_model)
        _check_mask("mask", mask)
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
    (:class:`~toolkit.attention.MultiHeadAttention`), ``ff``, ``norm1``, ``norm2``,
    ``norm3``, ``dropout1``, ``dropout2``, ``dropout3``. PyTorch names the
    cross-attention ``multihead_attn``.
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
        _check_block_args(d_model, n_heads, d_ff, dropout, activation)
        self.d_model = d_model
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = PositionwiseFeedForward(d_model, d_ff, activation, dropout)
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
        _check_sequence("x", x, self.d_model)
        _check_sequence("memory", memory, self.d_model)
        if memory.size(0) != x.size(0):
            raise ValueError(
                f"memory batch size {memory.size(0)} must equal x batch size {x.size(0)}"
            )
        _check_mask("self_mask", self_mask)
        _check_mask("memory_mask", memory_mask)
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


# ---------------------------------------------------------------------------
# Tiny models: one per family
# ---------------------------------------------------------------------------


class _Embedding(nn.Module):
    """Token embedding plus a learned absolute position table (BERT, GPT-2).

    ``h_t = E_tok[id_t] + E_pos[t]``: ``(B, T)`` ids -> ``(B, T, d_model)``.
    A sequence longer than ``max_len`` has no position row and raises ``ValueError``.
    """

    def __init__(self, vocab_size: int, d_model: int, max_len: int, dropout: float):
        super().__init__()
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be a positive integer, got {vocab_size}")
        if max_len <= 0:
            raise ValueError(f"max_len must be a positive integer, got {max_len}")
        self.max_len = max_len
        self.token = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(max_len, d_model)
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, name: str = "input_ids") -> Tensor:
        if ids.dim() != 2 or ids.dtype not in (torch.long, torch.int, torch.int16, torch.uint8):
            raise ValueError(
                f"{name} must be an integer tensor of shape (batch, seq), "
                f"got dtype {ids.dtype} and shape {tuple(ids.shape)}"
            )
        T = ids.size(1)
        if T > self.max_len:
            raise ValueError(
                f"{name} has length {T} but max_len={self.max_len}: the learned position "
                "table has no row for the extra positions; truncate the input or build the "
                "model with a larger max_len"
            )
        pos = torch.arange(T, device=ids.device)
        return self.dropout(self.token(ids) + self.position(pos))  # E_tok[id] + E_pos[t]


def _attention_mask_to_bool(attention_mask: Tensor | None, ids: Tensor, name: str):
    """HF-style ``(B, T)`` 1/0 (or bool) mask -> ``(B, 1, 1, T)`` bool key mask."""
    if attention_mask is None:
        return None
    if attention_mask.shape != ids.shape:
        raise ValueError(
            f"{name} must have the same shape as the ids {tuple(ids.shape)} "
            f"(1 = real token, 0 = padding), got {tuple(attention_mask.shape)}"
        )
    return padding_mask_from_attention_mask(attention_mask)


class EncoderOutput(NamedTuple):
    """``hidden_states`` ``(B, T, d_model)`` and MLM ``logits`` ``(B, T, vocab_size)``."""

    hidden_states: Tensor
    logits: Tensor


class EncoderOnlyModel(nn.Module):
    """A tiny BERT-like encoder-only model: bidirectional attention plus an MLM head.

    Every token attends to every (non-padding) token, left *and* right, so each
    hidden state describes its token in the context of the whole input. That suits
    tasks where the input is complete before the model runs: sentence classification
    (sentiment, entailment), token tagging (NER), extractive QA, retrieval embeddings.
    It does not generate text: position ``t`` has already seen token ``t + 1``.

    Pre-training is *masked language modelling* (BERT, arXiv 1810.04805): some input
    tokens are replaced by ``[MASK]`` and the model predicts the originals from both
    sides; ``logits`` are those predictions. Family members: BERT, RoBERTa
    (1907.11692), DeBERTa (2006.03654), ELECTRA (2003.10555; a discriminator trained
    to spot replaced tokens instead of MLM).

    Layout: ``embedding`` (token + learned position), ``layers`` (``n_layers``
    :class:`EncoderBlock`), ``final_norm`` (Pre-LN only; identity for Post-LN),
    ``mlm_head`` (dense -> GELU -> LayerNorm -> vocabulary projection, as BERT).
    Default Post-LN, as BERT.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        max_len: int = 128,
        norm_first: bool = False,
        activation: str = "gelu",
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_layers <= 0:
            raise ValueError(f"n_layers must be a positive integer, got {n_layers}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.embedding = _Embedding(vocab_size, d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, norm_first, activation, dropout)
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.mlm_head = nn.Sequential(
            nn.Linear(d_model, d_model), nn.GELU(), nn.LayerNorm(d_model),
            nn.Linear(d_model, vocab_size),
        )

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> EncoderOutput:
        """
        Args:
            input_ids: ``(B, T)`` token ids, ``T <= max_len``.
            attention_mask: optional ``(B, T)``, 1 (or True) for real tokens and 0 for
                padding (the Hugging Face convention); padded keys are invisible.

        Returns:
            :class:`EncoderOutput` ``(hidden_states (B, T, d_model), logits (B, T, V))``.
        """
        mask = _attention_mask_to_bool(attention_mask, input_ids, "attention_mask")
        h = self.embedding(input_ids, "input_ids")
        for layer in self.layers:
            h = layer(h, mask)  # bidirectional: no causal mask
        h = self.final_norm(h)
        return EncoderOutput(h, self.mlm_head(h))


class DecoderOnlyModel(nn.Module):
    """A tiny GPT-like decoder-only model: causal attention plus a next-token head.

    Position ``t`` sees tokens ``0..t`` only, so ``logits[:, t]`` is a prediction of
    token ``t + 1`` made without looking at it. One forward pass therefore trains on
    every position of a sequence at once, and the same model generates text by
    appending its own predictions. That makes the family fit open-ended generation:
    chat, story and code completion, and any task phrased as a prompt to continue
    (few-shot, in-context learning). Family members: GPT (GPT-3 is arXiv 2005.14165),
    LLaMA (2302.13971), Mistral (2310.06825).

    Layout: ``embedding`` (token + learned position), ``layers`` (``n_layers``
    :class:`DecoderOnlyBlock`), ``final_norm`` (Pre-LN only, GPT-2's ``ln_f``),
    ``lm_head`` (``Linear(d_model, vocab_size, bias=False)``). Default Pre-LN, as GPT-2.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_layers: int = 2,
        d_ff: int | None = None,
        max_len: int = 128,
        norm_first: bool = True,
        activation: str = "gelu",
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_layers <= 0:
            raise ValueError(f"n_layers must be a positive integer, got {n_layers}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.embedding = _Embedding(vocab_size, d_model, max_len, dropout)
        self.layers = nn.ModuleList(
            DecoderOnlyBlock(d_model, n_heads, d_ff, norm_first, activation, dropout)
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """
        Args:
            input_ids: ``(B, T)`` token ids, ``T <= max_len``.
            attention_mask: optional ``(B, T)`` 1/0 padding mask, ANDed with the
                causal mask each block builds.

        Returns:
            ``(B, T, vocab_size)`` next-token logits: ``logits[:, t]`` predicts token ``t+1``.
        """
        mask = _attention_mask_to_bool(attention_mask, input_ids, "attention_mask")
        h = self.embedding(input_ids, "input_ids")
        for layer in self.layers:
            h = layer(h, mask)  # causal & padding
        return self.lm_head(self.final_norm(h))


class EncoderDecoderModel(nn.Module):
    """A tiny T5/BART-like encoder-decoder: bidirectional encoder, causal decoder.

    The encoder reads the whole source once with bidirectional attention and returns
    ``memory`` ``(B, T_src, d_model)``. The decoder generates the target left to
    right: its self-attention is causal, and each decoder block's cross-attention lets
    every target position read *all* of ``memory``. This fits tasks that map one
    complete input to a different output sequence: translation, summarisation,
    speech recognition (audio in, text out), structured rewriting.
    Family members: T5 (arXiv 1910.10683), BART (1910.13461), Whisper (2212.04356).

    Training uses *teacher forcing*: ``decoder_input_ids`` is the target shifted
    right (it starts with a start token), so ``logits[:, t]`` predicts target token
    ``t`` having seen targets ``< t`` and the whole source.

    Layout: ``encoder_embedding`` and ``decoder_embedding`` (each token + learned
    position) share one token table (as T5 and BART) but keep separate position
    tables, ``encoder_layers`` (:class:`EncoderBlock`), ``decoder_layers``
    (:class:`DecoderBlock`), ``encoder_norm`` / ``decoder_norm`` (Pre-LN only),
    ``lm_head``. Default Post-LN, as the original Transformer and BART.
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int = 64,
        n_heads: int = 4,
        n_encoder_layers: int = 2,
        n_decoder_layers: int = 2,
        d_ff: int | None = None,
        max_len: int = 128,
        norm_first: bool = False,
        activation: str = "relu",
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_encoder_layers <= 0:
            raise ValueError(f"n_encoder_layers must be positive, got {n_encoder_layers}")
        if n_decoder_layers <= 0:
            raise ValueError(f"n_decoder_layers must be positive, got {n_decoder_layers}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.encoder_embedding = _Embedding(vocab_size, d_model, max_len, dropout)
        self.decoder_embedding = _Embedding(vocab_size, d_model, max_len, dropout)
        # One token table for both sides; each side keeps its own position table.
        self.decoder_embedding.token = self.encoder_embedding.token
        self.encoder_layers = nn.ModuleList(
            EncoderBlock(d_model, n_heads, d_ff, norm_first, activation, dropout)
            for _ in range(n_encoder_layers)
        )
        self.decoder_layers = nn.ModuleList(
            DecoderBlock(d_model, n_heads, d_ff, norm_first, activation, dropout)
            for _ in range(n_decoder_layers)
        )
        self.encoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def encode(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """``(B, T_src)`` source ids -> ``memory`` ``(B, T_src, d_model)``, bidirectional."""
        mask = _attention_mask_to_bool(attention_mask, input_ids, "attention_mask")
        h = self.encoder_embedding(input_ids, "input_ids")
        for layer in self.encoder_layers:
            h = layer(h, mask)
        return self.encoder_norm(h)

    def decode(
        self,
        decoder_input_ids: Tensor,
        memory: Tensor,
        attention_mask: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
    ) -> Tensor:
        """``(B, T_tgt)`` target ids and ``memory`` -> logits ``(B, T_tgt, vocab_size)``.

        ``attention_mask`` ``(B, T_src)`` hides padded source tokens from
        cross-attention; ``decoder_attention_mask`` ``(B, T_tgt)`` hides padded target
        tokens and is ANDed with the causal mask each block builds.
        """
        if memory.dim() != 3 or memory.size(0) != decoder_input_ids.size(0):
            raise ValueError(
                f"memory must have shape (batch={decoder_input_ids.size(0)}, T_src, d_model), "
                f"got {tuple(memory.shape)}"
            )
        src_mask = None
        if attention_mask is not None:
            if attention_mask.shape != memory.shape[:2]:
                raise ValueError(
                    f"attention_mask must have shape (batch, T_src) = {tuple(memory.shape[:2])}, "
                    f"got {tuple(attention_mask.shape)}"
                )
            src_mask = padding_mask_from_attention_mask(attention_mask)  # (B, 1, 1, T_src)
        tgt_mask = _attention_mask_to_bool(
            decoder_attention_mask, decoder_input_ids, "decoder_attention_mask"
        )
        h = self.decoder_embedding(decoder_input_ids, "decoder_input_ids")
        for layer in self.decoder_layers:
            h = layer(h, memory, self_mask=tgt_mask, memory_mask=src_mask)
        return self.lm_head(self.decoder_norm(h))

    def forward(
        self,
        input_ids: Tensor,
        decoder_input_ids: Tensor,
        attention_mask: Tensor | None = None,
        decoder_attention_mask: Tensor | None = None,
    ) -> Tensor:
        """
        Args:
            input_ids: ``(B, T_src)`` source ids.
            decoder_input_ids: ``(B, T_tgt)`` target ids shifted right.
            attention_mask: optional ``(B, T_src)`` 1/0 source padding mask.
            decoder_attention_mask: optional ``(B, T_tgt)`` 1/0 target padding mask.

        Returns:
            ``(B, T_tgt, vocab_size)`` logits.
        """
        if input_ids.dim() != 2 or decoder_input_ids.dim() != 2:
            raise ValueError(
                "input_ids and decoder_input_ids must both have shape (batch, seq), got "
                f"{tuple(input_ids.shape)} and {tuple(decoder_input_ids.shape)}"
            )
        memory = self.encode(input_ids, attention_mask)
        return self.decode(decoder_input_ids, memory, attention_mask, decoder_attention_mask)


def family_attention_patterns(
    T_src: int, T_tgt: int, src_length: int | None = None
) -> dict[str, Tensor]:
    """The boolean attention patterns of the three families (``True`` = may attend).

    Args:
        T_src: source (encoder) length.
        T_tgt: target (decoder) length.
        src_length: number of real source tokens; keys at positions ``>= src_length``
            are padding and hidden from both the encoder and the cross-attention.
            Default ``T_src`` (no padding).

    Returns:
        ordered dict with

        * ``"encoder_self"`` ``(T_src, T_src)``: bidirectional (encoder-only models and
          the encoder of an encoder-decoder);
        * ``"decoder_self"`` ``(T_tgt, T_tgt)``: causal, ``j <= i`` (decoder-only models
          and the decoder of an encoder-decoder);
        * ``"cross"`` ``(T_tgt, T_src)``: every target query sees every real source key.
    """
    for name, value in (("T_src", T_src), ("T_tgt", T_tgt)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    src_length = T_src if src_length is None else src_length
    if not 0 <= src_length <= T_src:
        raise ValueError(f"src_length must be in [0, T_src={T_src}], got {src_length}")
    src_keys = torch.arange(T_src) < src_length  # (T_src,) True = real token
    return {
        "encoder_self": src_keys.expand(T_src, T_src).clone(),  # all real keys
        "decoder_self": causal_mask(T_tgt),  # j <= i
        "cross": src_keys.expand(T_tgt, T_src).clone(),  # all real source keys
    }


__all__ = [
    "DecoderBlock",
    "DecoderOnlyBlock",
    "DecoderOnlyModel",
    "EncoderBlock",
    "EncoderDecoderModel",
    "EncoderOnlyModel",
    "EncoderOutput",
    "PositionwiseFeedForward",
    "family_attention_patterns",
]
