"""A T5-style encoder-decoder (arXiv 1910.10683): the encoder reads, the decoder writes.

    memory = Encoder(E[src])                       (B, S, d)  bidirectional, padding masked
    h      = Decoder(E[shift_right(y)], memory)    (B, T, d)  causal, then cross-attention
    logits = (h * d^-1/2) E^T                      (B, T, V)  the head tied to the embedding

* One embedding ``E`` is shared by the encoder input, the decoder input and the head. T5
  rescales the decoder's output by ``d_model^-1/2`` before the tied head (Hugging Face's
  ``T5ForConditionalGeneration`` with ``tie_word_embeddings``): without it the logits
  are ``sqrt(d_model)`` times too large for embeddings initialised at unit scale.
* Each stack owns one :class:`toolkit.position.T5RelativePositionBias` (bidirectional in
  the encoder, one-sided in the decoder), computed once per forward and added in every
  self-attention layer of that stack.
* **Teacher forcing**: to predict ``y_0 .. y_{T-1}`` the decoder reads
  ``[start, y_0 .. y_{T-2}]`` (:func:`shift_right`); T5's start token is the pad id 0.
  Labels are padded with ``-100``, which the loss ignores (PyTorch's and HF's convention).

Logits and loss equal Hugging Face's ``T5ForConditionalGeneration`` (ReLU feed-forward,
no dropout) on the same weights (tested).
"""

from __future__ import annotations

import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.masks import causal_mask
from toolkit.norm import RMSNorm
from toolkit.position import T5RelativePositionBias
from toolkit.seq2seq.attention import DecoderLayer, EncoderLayer
from toolkit.seq2seq.cache import EncDecCache
from toolkit.seq2seq.config import EncDecConfig

IGNORE_INDEX = -100


def shift_right(labels: Tensor, start_id: int = 0) -> Tensor:
    """The decoder's input under teacher forcing: ``[start, y_0 .. y_{T-2}]``.

    Args:
        labels: ``(B, T)`` target ids, padded with ``-100`` (ignored by the loss).
        start_id: the decoder's start token, also the pad id (T5: 0).

    Returns:
        ``(B, T)``: ``start_id`` then ``labels`` without its last column, ``-100`` replaced
        by ``start_id`` (Hugging Face's ``T5PreTrainedModel._shift_right``).
    """
    shifted = labels.new_full(labels.shape, start_id)
    shifted[:, 1:] = labels[:, :-1]  # position t reads y_{t-1}
    return shifted.masked_fill(shifted == IGNORE_INDEX, start_id)


class EncoderDecoder(nn.Module):
    """T5: shared embedding, encoder stack, decoder stack, tied and rescaled head.

    Attributes: ``embed`` (``nn.Embedding(V, d)``), ``encoder_bias`` and ``decoder_bias``
    (:class:`T5RelativePositionBias`), ``encoder_layers``, ``decoder_layers``
    (``nn.ModuleList``), ``encoder_norm``, ``decoder_norm`` (final RMS norms), ``lm_head``
    (``nn.Linear(d, V, bias=False)`` whose weight *is* ``embed.weight``).
    """

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.encoder_bias = T5RelativePositionBias(c.n_heads, c.num_buckets, c.max_distance,
                                                   bidirectional=True)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.encoder_norm = RMSNorm(c.d_model, c.eps)
        self.decoder_bias = T5RelativePositionBias(c.n_heads, c.num_buckets, c.max_distance,
                                                   bidirectional=False)
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_decoder_layers))
        self.decoder_norm = RMSNorm(c.d_model, c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied: W_U = E^T
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """T5's initialisation (Hugging Face's ``T5PreTrainedModel._init_weights``): unit
        embeddings, every matrix at ``fan_in^-1/2``, except the query projection, which
        also carries the ``d_head^-1/2`` that T5 leaves out of the scores."""
        c = self.config
        nn.init.normal_(self.embed.weight, std=1.0)
        for name, p in self.named_parameters():
            if name.endswith("q_proj.weight"):
                nn.init.normal_(p, std=(c.d_model * c.d_head) ** -0.5)
            elif name.endswith("relative_attention_bias.weight"):
                nn.init.normal_(p, std=c.d_model**-0.5)
            elif p.dim() == 2 and name != "embed.weight":
                nn.init.normal_(p, std=p.size(1) ** -0.5)  # (out, in): fan_in^-1/2

    def new_cache(self) -> EncDecCache:
        return EncDecCache(self.config.n_decoder_layers)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """Read the input.

        Args:
            src: ``(B, S)`` token ids, padded at the end with ``pad_id``.

        Returns:
            ``memory`` ``(B, S, d)``, the final-normed encoder output, and ``src_mask``
            ``(B, S)`` bool, ``True`` at real tokens.
        """
        src_mask = src != self.config.pad_id  # (B, S): True = a real token
        S = src.size(1)
        x = self.embed(src)  # (B, S, d)
        bias = self.encoder_bias(S, S)  # (1, H, S, S), once for every layer
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S): no query attends to padding
        for layer in self.encoder_layers:
            x = layer(x, bias, mask)
        return self.encoder_norm(x), src_mask

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: EncDecCache | None = None,
        start_pos: int = 0,
    ) -> Tensor:
        """Logits for the target positions ``start_pos .. start_pos + T - 1``.

        Args:
            tgt: ``(B, T)`` decoder input ids (the start token first).
            memory, src_mask: from :meth:`encode`.
            cache: an :class:`EncDecCache` holding ``start_pos`` earlier positions.
            start_pos: absolute position of ``tgt[:, 0]``.

        Returns:
            ``(B, T, V)`` logits.
        """
        T = tgt.size(1)
        T_k = start_pos + T  # keys: every target position so far
        x = self.embed(tgt)  # (B, T, d)
        bias = self.decoder_bias(T, T_k, query_offset=start_pos)  # (1, H, T, T_k), once
        self_mask = causal_mask(T, T_k, offset=start_pos, device=tgt.device)  # (T, T_k)
        cross_mask = src_mask[:, None, None, :]  # (B, 1, 1, S): every real source token
        for i, layer in enumerate(self.decoder_layers):
            x = layer(x, memory, bias, self_mask, cross_mask, cache, i)
        if cache is not None:
            cache.length = T_k
        h = self.decoder_norm(x)  # (B, T, d)
        return self.lm_head(h * self.config.d_model**-0.5)  # tied head, rescaled by d^-1/2

    def forward(self, src: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: ``(logits (B, T, V), mean cross-entropy over labels != -100)``."""
        memory, src_mask = self.encode(src)
        decoder_input = shift_right(labels, self.config.pad_id)  # [start, y_0 .. y_{T-2}]
        logits = self.decode(decoder_input, memory, src_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                               ignore_index=IGNORE_INDEX)
        return logits, loss
