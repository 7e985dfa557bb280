"""Small GPTs that differ only in how they encode position, and a switch for RoPE's speeds.

The capstone's modern recipe at a small size (pre-norm RMSNorm blocks, SwiGLU, grouped KV
heads, tied embeddings; the same parameter names as :class:`toolkit.models.GPT`, so its
state dicts load) with four position encodings (:data:`POSITIONS`): ``"rope"``,
``"learned"`` (a table of ``train_len`` rows, so the model cannot run past its training
length at all), ``"alibi"`` (arXiv 2108.12409: no embedding, the bias ``-m_h (i - j)`` on
every score) and ``"none"`` (NoPE: only the causal mask tells the model about order).

It is written with PyTorch's own layers (``F.rms_norm``, ``F.silu``,
``F.scaled_dot_product_attention``), not the course's, because it runs in Lecture and
Assignment 02, before the assignments that build those layers. Only the position code
is the course's: RoPE and ALiBi come from :mod:`toolkit.position`, or from the student's
own ``apply_rope`` and ``alibi_bias`` (:func:`use_position_functions`), and
:func:`rope_speeds` runs a RoPE model at other speeds (PI, NTK, dynamic NTK, YaRN,
LongRoPE) without touching a weight.

So its layers are small copies of concepts that have their home elsewhere, kept apart on
purpose: the toolkit that students install replaces every exercise of a locked
assignment by a stub, and 05's :class:`toolkit.ffn.SwiGLU` and
:class:`toolkit.norm.RMSNorm`, 03's grouped-query attention and 05's blocks would
raise ``NotImplementedError`` here, in 02. The copies and their homes:

* :class:`RMSNormGain`: :class:`toolkit.norm.RMSNorm` (tested equal: same ``weight``,
  same output);
* :class:`SwiGLUFeedForward`: :class:`toolkit.ffn.SwiGLU` without biases (tested equal:
  same parameter names, same output);
* :class:`PositionedAttention`: causal grouped-query attention (:mod:`toolkit.gqa`) with
  RoPE or ALiBi and no KV cache (tested against its formula);
* :class:`PositionBlock`: the Pre-LN wiring of :class:`toolkit.residual.PreLNBlock` with
  GPT-2's names, those of ``toolkit.models.Block``.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit import position as P

#: The four position encodings :func:`position_model` builds.
POSITIONS = ("rope", "learned", "alibi", "none")


@dataclass(frozen=True)
class PositionModelConfig:
    """Sizes of a :class:`PositionGPT` (``d_ff`` is SwiGLU's hidden size)."""

    position: str
    max_seq_len: int
    vocab_size: int = 256
    n_layers: int = 2
    n_heads: int = 4
    n_kv_heads: int = 2
    d_model: int = 64
    d_ff: int = 192
    rope_base: float = 10000.0
    norm_eps: float = 1e-5

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads


class RMSNormGain(nn.Module):
    """``x / sqrt(mean(x^2) + eps) * weight`` (PyTorch's ``F.rms_norm``).

    :class:`toolkit.norm.RMSNorm` for 02 (see the module's docstring), same ``weight``.
    """

    def __init__(self, d_model: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class SwiGLUFeedForward(nn.Module):
    """``down_proj(silu(gate_proj(x)) * up_proj(x))`` (arXiv 2002.05202), no biases.

    :class:`toolkit.ffn.SwiGLU` ``(d_model, d_ff)`` for 02 (see the module's docstring):
    the same parameters, the same output. ``(..., d_model)`` -> ``(..., d_model)``.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.gate_proj = nn.Linear(d_model, d_ff, bias=False)
        self.up_proj = nn.Linear(d_model, d_ff, bias=False)
        self.down_proj = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class PositionedAttention(nn.Module):
    """Causal self-attention with RoPE (at chosen speeds), ALiBi or nothing.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``; ``positions`` ``(T,)``. No KV cache: the
    experiments here score whole windows.

    Attributes:
        inv_freq: ``(d_head / 2,)`` RoPE speeds replacing ``theta_i = base^(-2i/d)``, or
            ``None`` for the defaults.
        attention_scaling: multiplies RoPE's cos and sin (so q and k).
        functions: ``apply_rope`` and ``alibi_bias`` (the toolkit's, or a student's).
    """

    def __init__(self, config: PositionModelConfig):
        super().__init__()
        self.config, self.position = config, config.position
        H, H_kv, D, d = config.n_heads, config.n_kv_heads, config.d_head, config.d_model
        self.q_proj = nn.Linear(d, H * D, bias=False)
        self.k_proj = nn.Linear(d, H_kv * D, bias=False)
        self.v_proj = nn.Linear(d, H_kv * D, bias=False)
        self.o_proj = nn.Linear(H * D, d, bias=False)
        self.inv_freq: Tensor | None = None
        self.attention_scaling = 1.0
        self.functions = {"apply_rope": P.apply_rope, "alibi_bias": P.alibi_bias}

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        B, T, _ = x.shape
        c = self.config
        H, H_kv, D = c.n_heads, c.n_kv_heads, c.d_head
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_proj(x).view(B, T, H_kv, D).transpose(1, 2)
        if self.position == "rope":
            rope = self.functions["apply_rope"]
            inv_freq = None if self.inv_freq is None else self.inv_freq.to(x.device)
            q = rope(q, positions, base=c.rope_base, inv_freq=inv_freq,
                     attention_scaling=self.attention_scaling)
            k = rope(k, positions, base=c.rope_base, inv_freq=inv_freq,
                     attention_scaling=self.attention_scaling)
        # GQA: query head h reads KV head h // (H / H_kv)
        k = k.repeat_interleave(H // H_kv, dim=1)
        v = v.repeat_interleave(H // H_kv, dim=1)
        if self.position == "alibi":
            bias = self.functions["alibi_bias"](H, T).to(device=x.device, dtype=q.dtype)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # -m_h (i - j)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))


class PositionBlock(nn.Module):
    """Pre-norm block: ``x + Attn(RMSNorm(x))``, then ``x + SwiGLU(RMSNorm(x))``.

    The wiring of :class:`toolkit.residual.PreLNBlock`, with this module's layers and
    GPT-2's names (``ln_1``, ``attn``, ``ln_2``, ``mlp``) so that a
    :class:`toolkit.models.GPT` state dict loads. ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def __init__(self, config: PositionModelConfig):
        super().__init__()
        self.ln_1 = RMSNormGain(config.d_model, config.norm_eps)
        self.attn = PositionedAttention(config)
        self.ln_2 = RMSNormGain(config.d_model, config.norm_eps)
        self.mlp = SwiGLUFeedForward(config.d_model, config.d_ff)

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        x = x + self.attn(self.ln_1(x), positions)
        return x + self.mlp(self.ln_2(x))


class PositionGPT(nn.Module):
    """Decoder-only LM: ``model(idx, targets=None) -> (logits (B, T, V), loss or None)``."""

    def __init__(self, config: PositionModelConfig):
        super().__init__()
        self.config, self.position = config, config.position
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe = (nn.Embedding(config.max_seq_len, config.d_model)
                    if config.position == "learned" else None)
        self.blocks = nn.ModuleList(PositionBlock(config) for _ in range(config.n_layers))
        self.ln_f = RMSNormGain(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied: logits = h @ E^T
        std = 0.02  # GPT-2's initialisation; writes into the stream get 0.02 / sqrt(2 n_layers)
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight")):
                nn.init.normal_(p, mean=0.0, std=std / math.sqrt(2 * config.n_layers))

    def forward(self, idx: Tensor, targets: Tensor | None = None):
        B, T = idx.shape
        if T > self.config.max_seq_len:
            raise ValueError(f"idx has {T} tokens but max_seq_len={self.config.max_seq_len}"
                             + (": a learned table has no row beyond it" if self.wpe else ""))
        positions = torch.arange(T, device=idx.device)
        x = self.wte(idx)
        if self.wpe is not None:
            x = x + self.wpe(positions)
        for block in self.blocks:
            x = block(x, positions)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss


def position_model(
    position: str,
    train_len: int,
    *,
    max_seq_len: int | None = None,
    n_layers: int = 2,
    d_model: int = 64,
    n_heads: int = 4,
    rope_base: float = 10000.0,
    seed: int = 0,
) -> PositionGPT:
    """A small :class:`PositionGPT` with the given position encoding.

    Args:
        position: one of :data:`POSITIONS`.
        train_len: the training length ``L``; a learned table has exactly ``L`` rows.
        max_seq_len: the longest input the model accepts (default ``8 L``; learned: ``L``).
        n_layers, d_model, n_heads: sizes; ``n_kv_heads = n_heads // 2`` (or ``n_heads``
            when odd) and SwiGLU's hidden size is ``8 d / 3`` rounded up to 32.
    """
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
    longest = train_len if position == "learned" else (max_seq_len or 8 * train_len)
    config = PositionModelConfig(
        position=position, max_seq_len=longest, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=n_heads // 2 if n_heads % 2 == 0 else n_heads, d_model=d_model,
        d_ff=32 * math.ceil(8 * d_model / 3 / 32), rope_base=rope_base)
    torch.manual_seed(seed)
    return PositionGPT(config)


def _layers(model: PositionGPT) -> list[PositionedAttention]:
    return [block.attn for block in model.blocks]


def use_position_functions(model: PositionGPT, fns) -> PositionGPT:
    """Run ``model`` with a student's ``apply_rope`` / ``alibi_bias`` (by name) from now on."""
    unknown = sorted(set(fns or {}) - {"apply_rope", "alibi_bias"})
    if unknown:
        raise ValueError(f"fns names {unknown}; a position model uses apply_rope, alibi_bias")
    for layer in _layers(model):
        layer.functions.update(fns or {})
    return model


@contextlib.contextmanager
def rope_speeds(model: PositionGPT, inv_freq: Tensor | None, attention_scaling: float = 1.0
                ) -> Iterator[PositionGPT]:
    """Run a RoPE model with other speeds (and cos/sin scaling) inside the ``with`` block."""
    if getattr(model, "position", None) != "rope":
        raise ValueError("rope_speeds needs a RoPE model from position_model('rope', ...)")
    layers = _layers(model)
    saved = [(a.inv_freq, a.attention_scaling) for a in layers]
    try:
        for a in layers:
            a.inv_freq, a.attention_scaling = inv_freq, float(attention_scaling)
        yield model
    finally:
        for a, (f, s) in zip(layers, saved, strict=True):
            a.inv_freq, a.attention_scaling = f, s
