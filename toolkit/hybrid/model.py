"""A small language model whose layers are attention or Mamba, in any order (a hybrid).

Jamba (arXiv 2403.19887) interleaves one attention layer with seven Mamba layers, Zamba
(arXiv 2405.16712) shares one attention block between Mamba layers, Samba (arXiv
2406.07522) alternates Mamba with sliding-window attention. :class:`HybridLM` is the
smallest such model that can be trained on a CPU: the layers are named by a *pattern*, a
string with one letter per layer, read from the input upwards::

    "AAAA"   pure attention             "MMMM"   pure Mamba
    "MAMM"   Mamba, attention, Mamba, Mamba

Every layer is a pre-norm residual ``x + mixer(RMSNorm(x))`` of the same width
(:class:`ResidualMixer`). An ``"A"`` mixer is causal multi-head attention
(:class:`CausalAttentionMixer`, the course's :class:`toolkit.attention.MultiHeadAttention`
without biases: ``4 d^2`` parameters); an ``"M"`` mixer is the course's
:class:`toolkit.ssm.MambaMixer` with ``expand=1`` (``3 d^2`` in its three projections plus
``d (dt_rank + 2N)`` in ``x_proj`` and ``d N`` in ``A_log``: ``4 d^2 - 64`` for ``d = 64,
N = 16``), so at equal width and depth every pattern has the same parameter count
within half a percent (:func:`parameter_count`). Neither has an MLP: the layers compare
token mixers only.

Position: a learned table added to the token embeddings (attention alone has no other
sense of order; Mamba's convolution and recurrence do not need it). The output head is a
separate ``nn.Linear``. Shapes: ``ids (B, T)`` int64 -> logits ``(B, T, vocab_size)``,
``T <= max_seq_len``; the output at ``t`` depends on ``ids[:, :t + 1]`` only.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from toolkit.arguments import check_int
from toolkit.attention import MultiHeadAttention
from toolkit.norm import RMSNorm
from toolkit.ssm.mamba import MambaMixer

#: The letters of a layer pattern: attention and Mamba.
LAYER_KINDS = ("A", "M")


class CausalAttentionMixer(MultiHeadAttention):
    """Self-attention under the causal mask, no biases: ``(B, T, d) -> (B, T, d)``."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__(d_model, n_heads, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        T = x.size(1)
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # key j <= query i
        return super().forward(x, mask=causal)


class ResidualMixer(nn.Module):
    """A pre-norm residual layer ``x + mixer(RMSNorm(x))``: ``(B, T, d) -> (B, T, d)``.

    Attributes: ``norm`` (:class:`toolkit.norm.RMSNorm`) and ``mixer``.
    """

    def __init__(self, mixer: nn.Module, d_model: int):
        super().__init__()
        self.norm = RMSNorm(d_model)
        self.mixer = mixer

    def forward(self, x: Tensor) -> Tensor:
        return x + self.mixer(self.norm(x))  # x + F(norm(x))


def check_pattern(pattern: str) -> None:
    """A layer pattern: a non-empty string of the letters of :data:`LAYER_KINDS`."""
    if not isinstance(pattern, str) or not pattern or set(pattern) - set(LAYER_KINDS):
        raise ValueError(f"pattern must be a non-empty string of {'/'.join(LAYER_KINDS)} "
                         f"(attention / Mamba), one letter per layer, got {pattern!r}")


class HybridLM(nn.Module):
    """Token and position embeddings, one :class:`ResidualMixer` per letter of ``pattern``,
    a final RMSNorm and a linear head.

    Args:
        vocab_size: tokens ``0 .. vocab_size - 1``.
        pattern: one letter per layer, first layer first: ``"A"`` a
            :class:`CausalAttentionMixer` of ``n_heads`` heads, ``"M"`` a
            ``MambaMixer(d_model, d_state, expand=1)``.
        d_model: the width of every layer.
        n_heads: heads of each attention layer (divides ``d_model``).
        d_state: the state size ``N`` of each Mamba layer.
        max_seq_len: rows of the position table.
        scan: the selective scan of the Mamba layers (default
            :func:`toolkit.ssm.selective_scan`; a notebook passes its own).

    Parameter names: ``embed``, ``pos_embed``, ``layers.{i}.norm``, ``layers.{i}.mixer``,
    ``norm``, ``lm_head``.
    """

    def __init__(self, vocab_size: int, pattern: str, d_model: int = 64, n_heads: int = 4,
                 d_state: int = 16, max_seq_len: int = 256, scan: Callable | None = None):
        super().__init__()
        check_pattern(pattern)
        check_int("max_seq_len", max_seq_len)
        self.pattern, self.max_seq_len = pattern, max_seq_len
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos_embed = nn.Embedding(max_seq_len, d_model)
        layers = []
        for kind in pattern:  # one layer per letter, in the pattern's order
            if kind == "A":
                mixer = CausalAttentionMixer(d_model, n_heads)
            else:
                mixer = MambaMixer(d_model, d_state, expand=1, scan=scan)
            layers.append(ResidualMixer(mixer, d_model))
        self.layers = nn.ModuleList(layers)
        self.norm = RMSNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, ids: Tensor) -> Tensor:
        """``ids (B, T)`` int64 -> logits ``(B, T, vocab_size)``."""
        T = ids.size(1)
        if T > self.max_seq_len:
            raise ValueError(f"{T} tokens, but max_seq_len={self.max_seq_len}")
        x = self.embed(ids) + self.pos_embed(torch.arange(T, device=ids.device))  # (B, T, d)
        for layer in self.layers:  # first letter of the pattern first
            x = layer(x)
        return self.lm_head(self.norm(x))


def parameter_count(model: nn.Module) -> int:
    """Trainable parameters of ``model``."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def state_numbers(pattern: str, seq_len: int, d_model: int = 64, d_state: int = 16,
                  d_conv: int = 4) -> int:
    """Numbers a :class:`HybridLM` keeps per sequence to generate after ``seq_len`` tokens.

    An attention layer caches a key and a value per token, ``2 d_model seq_len``; a Mamba
    layer (``expand=1``: ``d_inner = d_model``) its SSM state and the convolution's last
    inputs, ``d_model (d_state + d_conv)``, whatever ``seq_len``.
    """
    check_pattern(pattern)
    per_layer = {"A": 2 * d_model * seq_len, "M": d_model * (d_state + d_conv)}
    return sum(per_layer[kind] for kind in pattern)
