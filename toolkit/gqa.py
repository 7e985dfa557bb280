"""Multi-query and grouped-query attention, and the KV cache they shrink.

Why: when a decoder generates text it keeps the keys and values of every past token
(the **KV cache**) so each new token costs one row of attention, not a full
recomputation. That cache, not the weights, is what fills GPU memory at long context:

    KV cache bytes = 2 (K and V) x layers x n_kv_heads x d_head x tokens x batch x bytes

LLaMA-2 70B (arXiv 2307.09288; 80 layers, d_head 128, fp16) would need 2.5 MiB per
token with 64 KV heads; with 8 KV heads it needs 320 KiB, 1.25 GiB per 4096-token
sequence.

* **MHA**: every query head has its own K and V head (``n_kv_heads = n_heads``).
* **MQA** (Shazeer, arXiv 1911.02150): all query heads share one K/V head
  (``n_kv_heads = 1``): the cache shrinks by ``n_heads``, quality drops a little.
* **GQA** (Ainslie et al., arXiv 2305.13245): query heads form ``n_kv_heads`` groups of
  ``g = n_heads / n_kv_heads`` consecutive heads; each group shares one K/V head.

The head mapping is **integer division**: query head ``h`` reads KV head
``h // g``. With 8 query heads and 2 KV heads, heads 0-3 read KV head 0 and heads 4-7
read KV head 1. (``h % n_kv_heads`` would interleave the groups instead; that is a
different model and does not load Hugging Face checkpoints correctly.) In code,
``repeat_interleave`` of the KV heads realises exactly this mapping; ``repeat``
(tiling) realises the wrong, modulo one.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from toolkit.arguments import check_kv_heads
from toolkit.attention import scaled_dot_product_attention
from toolkit.masks import causal_mask, combine_masks


def kv_head_for_query_head(h: int, n_heads: int, n_kv_heads: int) -> int:
    """The KV head read by query head ``h``: ``h // (n_heads / n_kv_heads)``."""
    check_kv_heads(n_heads, n_kv_heads)
    if not 0 <= h < n_heads:
        raise ValueError(f"h must be in [0, {n_heads}), got {h}")
    return h // (n_heads // n_kv_heads)  # group size g = n_heads / n_kv_heads


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Copy each KV head for its query heads: ``(B, n_kv, T, d) -> (B, n_kv * n_rep, T, d)``.

    Output head ``h`` is input head ``h // n_rep`` (each KV head repeated ``n_rep``
    times *in place*: ``[k0, k0, k1, k1]``, not ``[k0, k1, k0, k1]``). Same result as
    Hugging Face's ``repeat_kv`` and ``torch.repeat_interleave(x, n_rep, dim=1)``.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be (B, n_kv_heads, T, d), got shape {tuple(x.shape)}")
    if n_rep < 1:
        raise ValueError(f"n_rep must be >= 1, got {n_rep}")
    if n_rep == 1:
        return x
    B, n_kv, T, d = x.shape
    # Insert a repeat axis *after* the KV-head axis, broadcast, then flatten the two:
    # index (kv, r) -> kv * n_rep + r, so output head h comes from kv = h // n_rep.
    return x[:, :, None, :, :].expand(B, n_kv, n_rep, T, d).reshape(B, n_kv * n_rep, T, d)


def grouped_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, scale: float | None = None
) -> Tensor:
    """GQA without copying K and V: fold the query heads into ``(n_kv, g)`` groups.

    Args:
        q: ``(B, H, T_q, d)``; k: ``(B, H_kv, T_k, d)``; v: ``(B, H_kv, T_k, d_v)``;
            ``H`` a multiple of ``H_kv``.
        mask: bool, broadcastable to ``(B, H, T_q, T_k)``.

    Returns:
        ``(B, H, T_q, d_v)``, equal to attention with :func:`repeat_kv`-expanded K, V.
    """
    B, H, T_q, d = q.shape
    H_kv = k.shape[1]
    check_kv_heads(H, H_kv)
    g = H // H_kv
    qg = q.reshape(B, H_kv, g, T_q, d)  # head h = kv * g + r sits at [kv, r]
    kg, vg = k.unsqueeze(2), v.unsqueeze(2)  # (B, H_kv, 1, T_k, .) broadcasts over the group
    if mask is not None:
        mask = torch.broadcast_to(mask, (B, H, T_q, k.shape[2])).reshape(B, H_kv, g, T_q, -1)
    out = scaled_dot_product_attention(qg, kg, vg, mask, scale)  # (B, H_kv, g, T_q, d_v)
    return out.reshape(B, H, T_q, v.shape[-1])


def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    n_tokens: int,
    batch: int = 1,
    bytes_per_element: float = 2,
) -> float:
    """Size of a KV cache: ``2 x layers x n_kv_heads x d_head x tokens x batch x bytes``.

    The 2 counts K and V. ``bytes_per_element`` is 2 for fp16/bf16, 4 for fp32,
    1 for fp8; fractional values model sub-byte quantisation. Returns an ``int``
    when the product is whole.

    LLaMA-2 70B (80 layers, 8 KV heads, d_head 128), fp16, 4096 tokens, batch 1:
    ``2 * 80 * 8 * 128 * 4096 * 2 = 1,342,177,280`` bytes = 1.25 GiB.
    """
    for name, value in (
        ("n_layers", n_layers),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("n_tokens", n_tokens),
        ("batch", batch),
        ("bytes_per_element", bytes_per_element),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    total = 2 * n_layers * n_kv_heads * d_head * n_tokens * batch * bytes_per_element  # K and V
    return int(total) if float(total).is_integer() else total


class DynamicKVCache:
    """Per-layer key/value cache for incremental decoding.

    Stores, for every layer, ``K`` and ``V`` of shape ``(B, n_kv_heads, T_cached, d)``.
    Each step appends the new tokens' keys and values along the time axis and hands
    back the full history, which the new queries then attend to. Only KV heads are
    stored: GQA's saving is in exactly this tensor.

    *Dynamic* as Hugging Face's ``DynamicCache``: it grows by concatenation and needs no
    capacity up front. :class:`toolkit.models.StaticKVCache` pre-allocates instead.
    """

    def __init__(self) -> None:
        self.keys: list[Tensor | None] = []
        self.values: list[Tensor | None] = []

    def append(self, layer_idx: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k, v (B, n_kv, T_new, d)`` to ``layer_idx``; return all its keys and values."""
        if layer_idx < 0:
            raise ValueError(f"layer_idx must be >= 0, got {layer_idx}")
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer_idx] is None:
            self.keys[layer_idx], self.values[layer_idx] = k, v
        else:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k], dim=2)  # along time
            self.values[layer_idx] = torch.cat([self.values[layer_idx], v], dim=2)
        return self.keys[layer_idx], self.values[layer_idx]

    def get(self, layer_idx: int) -> tuple[Tensor, Tensor] | None:
        """The cached ``(K, V)`` of a layer, or ``None`` if nothing is cached yet."""
        if layer_idx >= len(self.keys) or self.keys[layer_idx] is None:
            return None
        return self.keys[layer_idx], self.values[layer_idx]

    def length(self, layer_idx: int = 0) -> int:
        """Number of cached tokens in ``layer_idx`` (0 if empty)."""
        cached = self.get(layer_idx)
        return 0 if cached is None else cached[0].shape[2]

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    def nbytes(self) -> int:
        """Bytes held by all cached tensors (compare with :func:`kv_cache_bytes`)."""
        return sum(
            t.numel() * t.element_size() for t in self.keys + self.values if t is not None
        )

    def reset(self) -> None:
        self.keys.clear()
        self.values.clear()


class GroupedQueryAttention(nn.Module):
    """Grouped-query attention with an optional KV cache (arXiv 2305.13245).

    ``d_head = d_model / n_heads``. Projections, named as in Hugging Face LLaMA:

    * ``q_proj``: ``d_model -> n_heads * d_head``
    * ``k_proj``, ``v_proj``: ``d_model -> n_kv_heads * d_head`` (the saving)
    * ``o_proj``: ``n_heads * d_head -> d_model``

    ``n_kv_heads == n_heads`` is ordinary multi-head attention; ``n_kv_heads == 1`` is
    multi-query attention.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = False):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        check_kv_heads(n_heads, n_kv_heads)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.n_rep = n_heads // n_kv_heads  # group size g
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        cache: DynamicKVCache | None = None,
        layer_idx: int = 0,
        causal: bool = True,
        rotary: Callable[[Tensor, Tensor], Tensor] | None = None,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``, the new tokens only when decoding with a cache.
            mask: extra bool mask broadcastable to ``(B, n_heads, T, T_past + T)``
                (e.g. key padding), AND-ed with the causal mask.
            cache: a :class:`DynamicKVCache`; the new K, V are appended to ``layer_idx`` and
                the queries attend to everything cached so far.
            causal: query at absolute position ``p`` sees keys ``<= p``.
            rotary: optional ``rotary(t, positions)`` applied to q and k (e.g.
                RoPE) with absolute positions ``T_past .. T_past + T - 1``; cached keys
                keep the rotation they were stored with.

        Returns:
            ``(B, T, d_model)``. Feeding a sequence token by token through a cache
            gives the same outputs as one call on the whole sequence.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        past = 0 if cache is None else cache.length(layer_idx)
        q = self.q_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B,H_kv,T,d)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        if rotary is not None:
            positions = torch.arange(past, past + T, device=x.device)
            q, k = rotary(q, positions), rotary(k, positions)
        if cache is not None:
            k, v = cache.append(layer_idx, k, v)  # (B, H_kv, past + T, d)
        attn_mask = causal_mask(T, past + T, offset=past, device=x.device) if causal else None
        attn_mask = combine_masks(attn_mask, mask)
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, past + T, d)
        out = scaled_dot_product_attention(q, k, v, attn_mask)  # (B, H, T, d)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.d_head))
