"""Small GPTs that differ only in how they encode position, and a switch for RoPE's speeds.

The capstone GPT (:class:`toolkit.models.GPT`) with its attention replaced, layer by
layer, by :class:`PositionedAttention`: the same projections (same parameter names, so a
capstone state dict loads), plus two things the capstone does not do:

* **ALiBi** (arXiv 2108.12409): no embedding, the bias ``-m_h (i - j)`` on every score.
* **RoPE with other speeds**: :func:`rope_speeds` sets ``inv_freq`` and the
  ``attention_scaling`` of every layer (for PI, NTK, dynamic NTK, YaRN, LongRoPE) without
  touching a weight, and puts the originals back afterwards.

Four encodings (:data:`POSITIONS`): ``"rope"``, ``"learned"`` (a table of
``train_len`` rows, so the model cannot run past its training length at all),
``"alibi"`` and ``"none"`` (NoPE: only the causal mask tells the model about order).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.gqa import repeat_kv
from toolkit.models import GPT, GPTConfig
from toolkit.models.attention import CausalSelfAttention
from toolkit.position import alibi_bias, apply_rope

#: The four position encodings :func:`position_model` builds.
POSITIONS = ("rope", "learned", "alibi", "none")


class PositionedAttention(CausalSelfAttention):
    """Causal self-attention with RoPE (at chosen speeds), ALiBi or nothing.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``; ``positions`` ``(T,)``. No KV cache: the
    experiments here score whole windows.

    Attributes:
        position: ``"rope"``, ``"alibi"`` or ``"none"`` (learned positions are added to the
            embeddings before the blocks and look like ``"none"`` here).
        inv_freq: ``(d_head / 2,)`` RoPE speeds replacing ``theta_i = base^(-2i/d)``, or
            ``None`` for the defaults.
        attention_scaling: multiplies RoPE's cos and sin (so q and k).
    """

    def __init__(self, config: GPTConfig, layer_idx: int, position: str):
        super().__init__(config, layer_idx)
        self.position = position
        self.inv_freq: Tensor | None = None
        self.attention_scaling = 1.0

    def forward(self, x: Tensor, positions: Tensor, cache=None, start_pos: int = 0) -> Tensor:
        if cache is not None:
            raise ValueError("PositionedAttention scores whole windows: no KV cache")
        B, T, _ = x.shape
        H, H_kv, D = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_proj(x).view(B, T, H_kv, D).transpose(1, 2)
        if self.position == "rope":
            rope = {"base": self.config.rope_base, "layout": self.config.rope_layout,
                    "attention_scaling": self.attention_scaling}
            inv_freq = None if self.inv_freq is None else self.inv_freq.to(x.device)
            q = apply_rope(q, positions, inv_freq=inv_freq, **rope)
            k = apply_rope(k, positions, inv_freq=inv_freq, **rope)
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, T, D)
        if self.position == "alibi":
            bias = alibi_bias(H, T).to(device=x.device, dtype=q.dtype)  # -m_h (i - j), -inf above
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))


def position_model(
    position: str,
    train_len: int,
    *,
    max_seq_len: int | None = None,
    n_layers: int = 2,
    d_model: int = 64,
    n_heads: int = 4,
    rope_base: float = 10000.0,
    vocab_size: int = 256,
    seed: int = 0,
) -> GPT:
    """A small modern-recipe GPT (RMSNorm, SwiGLU, GQA) with the given position encoding.

    Args:
        position: one of :data:`POSITIONS`.
        train_len: the training length ``L``; a learned table has exactly ``L`` rows.
        max_seq_len: the longest input the model accepts (default ``8 L``; learned: ``L``).

    Returns:
        a :class:`toolkit.models.GPT` whose blocks use :class:`PositionedAttention`.
    """
    if position not in POSITIONS:
        raise ValueError(f"position must be one of {POSITIONS}, got {position!r}")
    longest = train_len if position == "learned" else (max_seq_len or 8 * train_len)
    config = GPTConfig.modern(
        vocab_size=vocab_size, n_layers=n_layers, n_heads=n_heads, d_model=d_model,
        max_seq_len=longest, rope_base=rope_base, attention_backend="reference",
        position={"rope": "rope", "learned": "learned"}.get(position, "none"),
    )
    torch.manual_seed(seed)
    model = GPT(config)
    for i, block in enumerate(model.blocks):
        attention = PositionedAttention(config, i, position)
        attention.load_state_dict(block.attn.state_dict())
        block.attn = attention
    model.position = position
    return model


@contextlib.contextmanager
def rope_speeds(model: GPT, inv_freq: Tensor | None, attention_scaling: float = 1.0
                ) -> Iterator[GPT]:
    """Run a RoPE model with other speeds (and cos/sin scaling) inside the ``with`` block."""
    layers = [b.attn for b in model.blocks if isinstance(b.attn, PositionedAttention)]
    if not layers or layers[0].position != "rope":
        raise ValueError("rope_speeds needs a RoPE model from position_model('rope', ...)")
    saved = [(a.inv_freq, a.attention_scaling) for a in layers]
    try:
        for a in layers:
            a.inv_freq, a.attention_scaling = inv_freq, float(attention_scaling)
        yield model
    finally:
        for a, (f, s) in zip(layers, saved, strict=True):
            a.inv_freq, a.attention_scaling = f, s
