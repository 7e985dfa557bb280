"""The capstone's attention layer on the fast backends: same weights, fewer kernels.

:class:`FastCausalSelfAttention` has the parameters of
:class:`toolkit.models.CausalSelfAttention` (``q_proj``, ``k_proj``, ``v_proj``,
``o_proj``; a state dict moves between them unchanged) and computes the same function.
Three things change, none of them the mathematics:

1. **One projection.** ``[q, k, v] = x [W_q; W_k; W_v]^T``: one matrix product reads
   ``x`` once instead of three times (the weights are joined on the fly; the gradient
   of the join splits it back).
2. **RoPE as a complex product, from a table.** A feature pair ``(a, b)`` turned by the
   angle ``phi`` is ``(a + ib) e^(i phi)``: one complex multiplication per pair, where
   the real formula ``(a cos - b sin, b cos + a sin)`` takes a copy of the rotated
   vector and four passes. The pairs must sit side by side for that; the half layout
   pairs feature ``i`` with ``i + D/2``, so the rows of ``W_q`` and ``W_k`` are reordered
   inside each head (``[0, D/2, 1, D/2 + 1, ...]``). The same order on q and k leaves
   every score ``q . k`` unchanged, and v is not reordered, so the layer's output is
   too. The factors ``e^(i p theta_j)`` depend only on the position: they are computed
   once per model shape, device and dtype for every position up to ``max_seq_len``
   (:func:`toolkit.position.apply_rope` recomputes them in every call of every layer).
   q and k sit next to each other in the joint projection, so one multiplication turns
   both.
   16-bit dtypes have no complex type: they get the real formula on the same pairs.
3. **The attention itself** runs on the configured backend
   (:func:`toolkit.models.backends.causal_attention`): PyTorch's fused kernel with
   native grouped-query attention, or the course's Triton kernels; no K/V copies, no
   explicit mask unless a chunk follows a cached prefix.
"""

from __future__ import annotations

from functools import lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.models.attention import CausalSelfAttention
from toolkit.models.backends import causal_attention
from toolkit.models.kv_cache import StaticKVCache
from toolkit.position import (
    interleaved_to_half_permutation,
    rope_cos_sin,
    rope_inv_freq,
    rotate_interleaved,
)


@lru_cache(maxsize=32)
def rope_table(
    max_seq_len: int, d_head: int, base: float, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """``(cos, sin)``, each ``(max_seq_len, d_head)``: RoPE's rotation for every position,
    the pairs side by side (features ``2j, 2j + 1`` turn by ``p theta_j``).

    Computed as :func:`toolkit.position.apply_rope` computes them (angles in float32,
    float64 for float64 models, then cast to ``dtype``), so a row equals what it would
    compute for that position. Ordinary tensors even under ``torch.inference_mode``,
    so that a table made while generating can serve a later training step.
    """
    with torch.inference_mode(False), torch.no_grad():
        angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        inv_freq = rope_inv_freq(d_head, base, dtype=angle_dtype).to(device)
        positions = torch.arange(max_seq_len, device=device)
        cos, sin = rope_cos_sin(positions, inv_freq, "interleaved")  # (max_seq_len, d_head)
        return cos.to(dtype), sin.to(dtype)


@lru_cache(maxsize=32)
def rope_phasors(
    max_seq_len: int, d_head: int, base: float, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """``e^(i p theta_j)``, ``(max_seq_len, d_head / 2)`` complex, from :func:`rope_table`."""
    cos, sin = rope_table(max_seq_len, d_head, base, device, dtype)
    with torch.inference_mode(False), torch.no_grad():
        return torch.complex(cos[:, 0::2], sin[:, 0::2])  # cos + i sin


@lru_cache(maxsize=8)
def pairs_side_by_side(d_head: int, device: torch.device) -> Tensor:
    """``[0, D/2, 1, D/2 + 1, ...]``: the half layout's pairs ``(i, i + D/2)`` made adjacent."""
    with torch.inference_mode(False):
        return interleaved_to_half_permutation(d_head).argsort().to(device)


def rotate_pairs(x: Tensor, start_pos: int, max_seq_len: int, base: float) -> Tensor:
    """RoPE on ``x`` ``(B, T, heads, D)`` at positions ``start_pos .. start_pos + T - 1``,
    its pairs being features ``(2j, 2j + 1)``. The positions are consecutive, so the
    rotations are a slice of the table, not a gather."""
    T, D = x.shape[1], x.shape[-1]
    rows = slice(start_pos, start_pos + T)
    if x.dtype in (torch.float32, torch.float64):
        phasors = rope_phasors(max_seq_len, D, base, x.device, x.dtype)[rows, None]  # (T, 1, D/2)
        pairs = torch.view_as_complex(x.unflatten(-1, (D // 2, 2)))  # a + ib: (B, T, heads, D/2)
        return torch.view_as_real(pairs * phasors).flatten(-2)  # (a + ib) e^(i p theta)
    cos, sin = rope_table(max_seq_len, D, base, x.device, x.dtype)
    cos, sin = cos[rows, None], sin[rows, None]  # (T, 1, D), the same for every head
    return x * cos + rotate_interleaved(x) * sin  # (a cos - b sin, b cos + a sin)


class FastCausalSelfAttention(CausalSelfAttention):
    """:class:`toolkit.models.CausalSelfAttention` with one QKV product, a RoPE table and
    the attention backend of ``config.attention_backend``.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def _project_qkv(self, x: Tensor) -> Tensor:
        """``(B, T, d)`` -> ``(B, T, H + 2 H_kv, D)``: the heads of q, then k, then v.

        With half-layout RoPE the features of q and k come out pairs side by side.
        """
        H, H_kv, D = self.n_heads, self.n_kv_heads, self.d_head
        projections = (self.q_proj, self.k_proj, self.v_proj)
        weights = [p.weight for p in projections]
        biases = [p.bias for p in projections] if self.q_proj.bias is not None else None
        if self.config.position_type == "rope" and self.config.rope_layout == "half":
            order = pairs_side_by_side(D, x.device)
            for i, heads in ((0, H), (1, H_kv)):  # reorder the rows of W_q, W_k in each head
                weights[i] = weights[i].view(heads, D, -1)[:, order].flatten(0, 1)
                if biases is not None:
                    biases[i] = biases[i].view(heads, D)[:, order].flatten()
        bias = None if biases is None else torch.cat(biases)
        qkv = F.linear(x, torch.cat(weights), bias)  # one product: x [W_q; W_k; W_v]^T
        return qkv.unflatten(-1, (H + 2 * H_kv, D))

    def forward(
        self, x: Tensor, positions: Tensor, cache: StaticKVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        B, T, _ = x.shape
        H, H_kv, D = self.n_heads, self.n_kv_heads, self.d_head
        # split, not slicing: its gradient is one concatenation, where each slice's is a
        # zero tensor of the whole size with the slice copied in
        qkv = self._project_qkv(x)  # (B, T, H + 2 H_kv, D)
        if self.config.position_type == "rope":  # absolute positions; cached keys keep theirs
            # q and k side by side: one rotation for both. `positions` is always
            # start_pos + arange(T) (GPT.forward), so the table is sliced, not gathered.
            qk, v = qkv.split((H + H_kv, H_kv), dim=2)
            qk = rotate_pairs(qk, start_pos, self.config.max_seq_len, self.config.rope_base)
            q, k = qk.split((H, H_kv), dim=2)
        else:
            q, k, v = qkv.split((H, H_kv, H_kv), dim=2)  # (B, T, heads, D)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v, start_pos)  # (B, H_kv, start_pos + T, D)
        out = causal_attention(q, k, v, self.config.attention_backend)  # (B, H, T, D)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))  # concat heads, project
