"""Causal self-attention of the capstone GPT: RoPE, grouped KV heads, a KV cache.

Grouped-query attention. ``n_heads`` query heads share ``n_kv_heads`` key/value
heads; query head ``h`` reads KV head ``h // (n_heads / n_kv_heads)`` (integer
division: consecutive query heads form a group). ``n_kv_heads = n_heads`` is MHA,
``n_kv_heads = 1`` is multi-query attention (arXiv 1911.02150). The KV cache
shrinks by the factor ``n_heads / n_kv_heads``.

Cached keys keep the rotation they got at their own position; the new token's
q and k are rotated at its absolute position ``start_pos``. Cached decoding equals
the full forward pass up to float rounding (tested).
"""

from __future__ import annotations

from torch import Tensor, nn

from toolkit.attention import scaled_dot_product_attention
from toolkit.gqa import repeat_kv
from toolkit.masks import causal_mask
from toolkit.models.config import GPTConfig
from toolkit.models.kv_cache import StaticKVCache
from toolkit.position import apply_rope


class CausalSelfAttention(nn.Module):
    """Causal self-attention with optional RoPE, grouped KV heads and a KV cache.

    Projections (Hugging Face LLaMA names): ``q_proj: d -> n_heads * D``,
    ``k_proj, v_proj: d -> n_kv_heads * D``, ``o_proj: n_heads * D -> d`` with
    ``D = d_head``.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.n_heads, self.n_kv_heads, self.d_head = config.n_heads, config.kv_heads, config.d_head
        self.n_rep = self.n_heads // self.n_kv_heads  # query heads per KV head
        d, D, bias = config.d_model, self.d_head, config.use_bias
        self.q_proj = nn.Linear(d, self.n_heads * D, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * D, d, bias=bias)

    def forward(
        self, x: Tensor, positions: Tensor, cache: StaticKVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        B, T, _ = x.shape
        H, H_kv, D = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        if self.config.position_type == "rope":
            # Rotate q and k by their *absolute* positions; cached keys keep theirs.
            rope = {"base": self.config.rope_base, "layout": self.config.rope_layout}
            q = apply_rope(q, positions, **rope)
            k = apply_rope(k, positions, **rope)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v, start_pos)  # (B, H_kv, start_pos + T, D)
        # GQA: query head h reads KV head h // n_rep (integer division, not modulo).
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, T_k, D)
        T_k = k.size(2)
        # Query i sits at absolute position (T_k - T) + i and sees keys j <= that position.
        mask = causal_mask(T, T_k, offset=T_k - T, device=x.device)  # (T, T_k)
        out = scaled_dot_product_attention(q, k, v, mask)  # softmax(q k^T / sqrt(D) + mask) v
        out = out.transpose(1, 2).reshape(B, T, H * D)  # concat heads
        return self.o_proj(out)
