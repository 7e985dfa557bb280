"""The three model families, one tiny model each, and their attention patterns.

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
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor, nn

from toolkit.masks import causal_mask, padding_mask_from_attention_mask
from toolkit.transformer.blocks import DecoderBlock, DecoderOnlyBlock, EncoderBlock
from toolkit.transformer.embedding import TokenPositionEmbedding, attention_mask_to_bool


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
        max_seq_len: int = 128,
        norm_first: bool = False,
        activation: str = "gelu",
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_layers <= 0:
            raise ValueError(f"n_layers must be a positive integer, got {n_layers}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.embedding = TokenPositionEmbedding(vocab_size, d_model, max_seq_len, dropout)
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
            input_ids: ``(B, T)`` token ids, ``T <= max_seq_len``.
            attention_mask: optional ``(B, T)``, 1 (or True) for real tokens and 0 for
                padding (the Hugging Face convention); padded keys are invisible.

        Returns:
            :class:`EncoderOutput` ``(hidden_states (B, T, d_model), logits (B, T, V))``.
        """
        mask = attention_mask_to_bool(attention_mask, input_ids, "attention_mask")
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
        max_seq_len: int = 128,
        norm_first: bool = True,
        activation: str = "gelu",
        dropout: float = 0.0,
    ):
        super().__init__()
        if n_layers <= 0:
            raise ValueError(f"n_layers must be a positive integer, got {n_layers}")
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.embedding = TokenPositionEmbedding(vocab_size, d_model, max_seq_len, dropout)
        self.layers = nn.ModuleList(
            DecoderOnlyBlock(d_model, n_heads, d_ff, norm_first, activation, dropout)
            for _ in range(n_layers)
        )
        self.final_norm = nn.LayerNorm(d_model) if norm_first else nn.Identity()
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, input_ids: Tensor, attention_mask: Tensor | None = None) -> Tensor:
        """
        Args:
            input_ids: ``(B, T)`` token ids, ``T <= max_seq_len``.
            attention_mask: optional ``(B, T)`` 1/0 padding mask, ANDed with the
                causal mask each block builds.

        Returns:
            ``(B, T, vocab_size)`` next-token logits: ``logits[:, t]`` predicts token ``t+1``.
        """
        mask = attention_mask_to_bool(attention_mask, input_ids, "attention_mask")
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
        max_seq_len: int = 128,
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
        self.encoder_embedding = TokenPositionEmbedding(vocab_size, d_model, max_seq_len, dropout)
        self.decoder_embedding = TokenPositionEmbedding(vocab_size, d_model, max_seq_len, dropout)
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
        mask = attention_mask_to_bool(attention_mask, input_ids, "attention_mask")
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
        tgt_mask = attention_mask_to_bool(
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
