"""FlashAttention in plain PyTorch: tiles, online softmax, recomputation.

FlashAttention (Dao et al., arXiv 2205.14135; FlashAttention-2, arXiv 2307.08691)
computes *exact* attention without ever storing the ``N x N`` score matrix. On a
GPU the point is memory traffic: the scores never leave on-chip SRAM. Here, in
PyTorch, the same algorithm shows the idea and its bookkeeping. Read in this order:

* :mod:`toolkit.flash.online`: the softmax's maximum and sum gathered in one
  streaming pass, and the rescaled accumulator;
* :mod:`toolkit.flash.tiled`: the tiled forward (saving the logsumexp), the backward
  that recomputes each tile from it, and the autograd wrapper;
* :mod:`toolkit.flash.cost`: FLOPs, modelled memory, and a peak-memory counter.

FA3 (arXiv 2407.08608) adds Hopper-specific asynchrony and FP8 *(reading)*; the GPU
kernel in Triton is :mod:`toolkit.kernels`.

Conventions: ``q (B, H, N_q, d)``, ``k (B, H_kv, N_k, d)``, ``v (B, H_kv, N_k, d_v)``
with ``H`` a multiple of ``H_kv`` (grouped-query attention: query head ``h`` reads KV
head ``h // (H / H_kv)``). ``causal=True`` lets query ``i`` see keys
``j <= i + (N_k - N_q)``: the causal diagonal is aligned to the *bottom right*, as in
the flash-attn library, so the last query always sees the last key (for
``N_q == N_k`` this is the usual ``j <= i``). A query row with no visible key
returns zeros and ``lse = -inf``.

Every public name is importable from this package: ``from toolkit.flash import
flash_attention``.
"""

from toolkit.flash.cost import PeakMemoryCounter, attention_forward_flops, attention_memory_bytes
from toolkit.flash.online import NEG_INF, online_softmax, online_softmax_trace
from toolkit.flash.tiled import (
    FlashAttention,
    causal_tile_mask,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
)

__all__ = [
    "NEG_INF",
    "FlashAttention",
    "PeakMemoryCounter",
    "attention_forward_flops",
    "causal_tile_mask",
    "attention_memory_bytes",
    "flash_attention",
    "flash_attention_backward",
    "flash_attention_forward",
    "online_softmax",
    "online_softmax_trace",
]
