"""FlashAttention in plain PyTorch: tiles, online softmax, recomputation.

FlashAttention (Dao et al., arXiv 2205.14135; FlashAttention-2, arXiv 2307.08691)
computes *exact* attention without ever storing the ``N x N`` score matrix. On a
GPU the point is memory traffic: the scores never leave on-chip SRAM. Here, in
PyTorch, the same algorithm shows the idea and its bookkeeping.

1. **Online softmax.** ``softmax(x)_j = exp(x_j - m) / l`` needs the row maximum ``m``
   and the sum ``l = sum_j exp(x_j - m)``. Both can be built while reading the row
   block by block: when a new block raises the maximum from ``m`` to ``m'``, every
   term summed so far was relative to the old maximum, so multiply the running sum
   by ``exp(m - m')`` and add the new block:

       m' = max(m, max_j x_j)           l' = l * exp(m - m') + sum_j exp(x_j - m')

2. **Rescaled accumulator.** Attention needs ``sum_j softmax_j v_j``, not the softmax
   itself. Keep an unnormalised accumulator ``acc = sum_j exp(x_j - m) v_j``; when
   the maximum changes it must be rescaled by the same ``exp(m - m')`` (forgetting
   that is the classic bug), and one division by ``l`` at the end normalises:

       acc' = acc * exp(m - m') + sum_j exp(x_j - m') v_j,   out = acc / l

3. **Save the logsumexp.** ``L = m + log l`` is all the backward pass needs to
   recompute any tile's probabilities exactly, ``P_ij = exp(S_ij - L_i)``, so no
   ``N x N`` matrix is saved for the backward either: O(N) extra memory.

Backward (FA2, Algorithm 2): with ``D_i = sum_d dO_id O_id`` (a row dot product),

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dQ = dS K * scale,   dK = dS^T Q * scale.

The results are exact: the same numbers as ``softmax(Q K^T / sqrt(d)) V`` up to
floating-point rounding, not an approximation.

Cost: the forward does two matrix products per (query, key) pair, ``Q K^T`` and
``P V``, each ``2 N^2 d`` FLOPs per head: ``4 B H N^2 d`` in all, half of it with a
causal mask (tiles above the diagonal are skipped). FA3 (arXiv 2407.08608) adds
Hopper-specific asynchrony and FP8 *(reading)*.

Conventions: ``q (B, H, N_q, d)``, ``k (B, H_kv, N_k, d)``, ``v (B, H_kv, N_k, d_v)``
with ``H`` a multiple of ``H_kv`` (grouped-query attention: query head ``h`` reads KV
head ``h // (H / H_kv)``). ``causal=True`` lets query ``i`` see keys
``j <= i + (N_k - N_q)``: the causal diagonal is aligned to the *bottom right*, as in
the flash-attn library, so the last query always sees the last key (for
``N_q == N_k`` this is the usual ``j <= i``). A query row with no visible key
returns zeros and ``lse = -inf``.
"""

from __future__ import annotations

import math
import weakref

import torch
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

NEG_INF = float("-inf")


# --------------------------------------------------------------------------------------
# 1. Online softmax, on its own
# --------------------------------------------------------------------------------------


def online_softmax(x: Tensor, block: int) -> Tensor:
    """Softmax over the last axis, computing ``m`` and ``l`` in one streaming pass over blocks.

    Educational: the statistics are gathered block by block (as a kernel would,
    without the whole row in memory), then a second pass normalises. Equal to
    ``torch.softmax(x, -1)`` for finite inputs.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype, device=x.device)  # running max
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # running sum
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        m_new = torch.maximum(m, xb.amax(dim=-1))  # m' = max(m, max_j x_j)
        # l' = l * exp(m - m') + sum_j exp(x_j - m'): old terms re-expressed relative to m'
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)  # softmax_j = exp(x_j - m) / l


def online_softmax_trace(scores: Tensor, values: Tensor, block: int) -> list[dict]:
    """Step-by-step record of the online softmax + accumulator for one query row.

    Args:
        scores: ``(N,)`` one row of scaled scores ``q . k_j / sqrt(d)``.
        values: ``(N, d_v)``.
        block: keys per tile.

    Returns:
        one dict per tile with ``start``, ``stop``, ``m_prev``, ``m``, ``l``,
        ``rescale = exp(m_prev - m)``, ``acc`` (unnormalised, ``(d_v,)``) and
        ``out = acc / l``, the answer if the row ended after this tile. After the
        last tile ``out`` equals ``softmax(scores) @ values``.
    """
    if scores.dim() != 1 or values.dim() != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError("scores must be (N,) and values (N, d_v) with the same N")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    m = torch.tensor(NEG_INF, dtype=scores.dtype)
    l = torch.tensor(0.0, dtype=scores.dtype)
    acc = torch.zeros(values.shape[1], dtype=values.dtype)
    steps = []
    for start in range(0, scores.shape[0], block):
        stop = min(start + block, scores.shape[0])
        s = scores[start:stop]
        m_new = torch.maximum(m, s.max())  # m' = max(m, max_j s_j)
        rescale = torch.exp(m - m_new)  # exp(m - m'), 0 on the first tile
        p = torch.exp(s - m_new)  # exp(s_j - m')
        l_new = l * rescale + p.sum()  # l' = l exp(m - m') + sum_j p_j
        acc = acc * rescale + p @ values[start:stop]  # acc' = acc exp(m - m') + P V
        steps.append(
            {
                "start": start,
                "stop": stop,
                "m_prev": float(m),
                "m": float(m_new),
                "rescale": float(rescale),
                "l": float(l_new),
                "acc": acc.clone(),
                "out": acc / l_new,
            }
        )
        m, l = m_new, l_new
    return steps


# --------------------------------------------------------------------------------------
# 2. Tiled forward and backward
# --------------------------------------------------------------------------------------


def _check_inputs(q: Tensor, k: Tensor, v: Tensor, block_q: int, block_k: int) -> int:
    """Validate shapes; return the GQA group size ``g = H / H_kv``."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, heads, N, d), got shape {tuple(t.shape)}")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"k and v must be (B, H_kv, N_k, .) with q's batch; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same d, got {q.shape[-1]} and {k.shape[-1]}")
    H, H_kv = q.shape[1], k.shape[1]
    if H % H_kv != 0:
        raise ValueError(f"q heads ({H}) must be a multiple of k/v heads ({H_kv}) for GQA")
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block_q and block_k must be >= 1, got {block_q}, {block_k}")
    return H // H_kv


def _causal_tile_mask(qs: int, qe: int, ks: int, ke: int, shift: int, device) -> Tensor:
    """One causal tile: True where key ``j`` is visible to query ``i`` (``j <= i + shift``)."""
    rows = torch.arange(qs, qe, device=device).unsqueeze(1) + shift
    cols = torch.arange(ks, ke, device=device).unsqueeze(0)
    return cols <= rows


def flash_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Tiled attention forward with online softmax.

    Args:
        q: ``(B, H, N_q, d)``; k: ``(B, H_kv, N_k, d)``; v: ``(B, H_kv, N_k, d_v)``.
        causal: bottom-right aligned causal mask (see the module docstring).
        block_q, block_k: tile sizes; the largest intermediate is a
            ``(B, H, block_q, block_k)`` score tile.
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``out (B, H, N_q, d_v)`` and ``lse (B, H, N_q)``, ``lse = m + log l`` (float32
        or float64, whichever is wider than the input).
    """
    g = _check_inputs(q, k, v, block_q, block_k)
    B, H, N_q, d = q.shape
    H_kv, N_k, d_v = k.shape[1], k.shape[2], v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    acc_dtype = torch.promote_types(q.dtype, torch.float32)  # accumulate in >= fp32
    shift = N_k - N_q  # bottom-right causal alignment
    qg = q.reshape(B, H_kv, g, N_q, d)  # head h = kv * g + r: no copy of K or V for GQA
    out = torch.empty(B, H_kv, g, N_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H_kv, g, N_q, dtype=acc_dtype, device=q.device)

    for qs in range(0, N_q, block_q):
        qe = min(qs + block_q, N_q)
        q_tile = qg[..., qs:qe, :].to(acc_dtype)  # (B, H_kv, g, bq, d)
        m = torch.full((B, H_kv, g, qe - qs), NEG_INF, dtype=acc_dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(B, H_kv, g, qe - qs, d_v, dtype=acc_dtype, device=q.device)
        # With a causal mask, key tiles starting after the tile's last visible key are skipped.
        k_end = min(N_k, qe + shift) if causal else N_k
        for ks in range(0, max(k_end, 0), block_k):
            ke = min(ks + block_k, N_k)
            k_tile = k[:, :, None, ks:ke, :].to(acc_dtype)  # (B, H_kv, 1, bk, d)
            v_tile = v[:, :, None, ks:ke, :].to(acc_dtype)  # (B, H_kv, 1, bk, d_v)
            s = (q_tile @ k_tile.transpose(-2, -1)) * scale  # S = Q K^T / sqrt(d): (.., bq, bk)
            if causal and ke - 1 > qs + shift:  # tile crosses the diagonal
                s = s.masked_fill(~_causal_tile_mask(qs, qe, ks, ke, shift, q.device), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))  # m' = max(m, rowmax(S))
            m_safe = torch.where(m_new == NEG_INF, 0.0, m_new)  # rows with no visible key yet
            p = torch.exp(s - m_safe.unsqueeze(-1))  # P~ = exp(S - m')
            alpha = torch.exp(m - m_safe)  # exp(m - m'): rescales what was summed so far
            l = alpha * l + p.sum(dim=-1)  # l' = l exp(m - m') + rowsum(P~)
            acc = alpha.unsqueeze(-1) * acc + p @ v_tile  # acc' = acc exp(m - m') + P~ V
            m = m_new
        visible = l > 0
        l_safe = torch.where(visible, l, 1.0)
        out[..., qs:qe, :] = (acc / l_safe.unsqueeze(-1)).to(q.dtype)  # O = acc / l
        lse[..., qs:qe] = torch.where(visible, m + torch.log(l_safe), NEG_INF)  # L = m + log l
    return out.reshape(B, H, N_q, d_v), lse.reshape(B, H, N_q)


def flash_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """Tiled backward that recomputes probabilities from the saved logsumexp.

    Args:
        q, k, v: the forward inputs; out, lse: the forward outputs;
        dout: ``(B, H, N_q, d_v)``, the gradient of the loss w.r.t. ``out``.

    Returns:
        ``dq (B, H, N_q, d)``, ``dk (B, H_kv, N_k, d)``, ``dv (B, H_kv, N_k, d_v)``.
        For GQA the gradients of a shared KV head are summed over its query group.
    """
    g = _check_inputs(q, k, v, block_q, block_k)
    B, H, N_q, d = q.shape
    H_kv, N_k, d_v = k.shape[1], k.shape[2], v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    acc_dtype = torch.promote_types(q.dtype, torch.float32)
    shift = N_k - N_q

    qg = q.reshape(B, H_kv, g, N_q, d).to(acc_dtype)
    dog = dout.reshape(B, H_kv, g, N_q, d_v).to(acc_dtype)
    lse_g = lse.reshape(B, H_kv, g, N_q).to(acc_dtype)
    lse_g = torch.where(lse_g == NEG_INF, 0.0, lse_g)  # fully masked rows: every S is -inf, P = 0
    D = (dog * out.reshape(B, H_kv, g, N_q, d_v).to(acc_dtype)).sum(-1)  # D_i = dO_i . O_i
    dq = torch.zeros(B, H_kv, g, N_q, d, dtype=acc_dtype, device=q.device)
    dk = torch.zeros(B, H_kv, N_k, d, dtype=acc_dtype, device=q.device)
    dv = torch.zeros(B, H_kv, N_k, d_v, dtype=acc_dtype, device=q.device)

    for ks in range(0, N_k, block_k):  # outer loop over key tiles (FA2)
        ke = min(ks + block_k, N_k)
        k_tile = k[:, :, None, ks:ke, :].to(acc_dtype)  # (B, H_kv, 1, bk, d)
        v_tile = v[:, :, None, ks:ke, :].to(acc_dtype)
        for qs in range(0, N_q, block_q):
            qe = min(qs + block_q, N_q)
            if causal and qe - 1 + shift < ks:  # every query in the tile is before every key
                continue
            q_tile, do_tile = qg[..., qs:qe, :], dog[..., qs:qe, :]
            s = (q_tile @ k_tile.transpose(-2, -1)) * scale  # recompute S
            if causal and ke - 1 > qs + shift:
                s = s.masked_fill(~_causal_tile_mask(qs, qe, ks, ke, shift, q.device), NEG_INF)
            p = torch.exp(s - lse_g[..., qs:qe].unsqueeze(-1))  # P = exp(S - L), exact
            dv[:, :, ks:ke] += (p.transpose(-2, -1) @ do_tile).sum(2)  # dV += P^T dO (sum group)
            dp = do_tile @ v_tile.transpose(-2, -1)  # dP = dO V^T
            ds = p * (dp - D[..., qs:qe].unsqueeze(-1))  # dS = P * (dP - D)
            dq[..., qs:qe, :] += (ds @ k_tile) * scale  # dQ += dS K / sqrt(d)
            # dK += dS^T Q / sqrt(d), summed over the query heads sharing this KV head
            dk[:, :, ks:ke] += (ds.transpose(-2, -1) @ q_tile).sum(2) * scale
    return (
        dq.reshape(B, H, N_q, d).to(q.dtype),
        dk.to(k.dtype),
        dv.to(v.dtype),
    )


class FlashAttention(torch.autograd.Function):
    """Autograd wrapper: forward saves ``(q, k, v, out, lse)``, never the probabilities.

    ``FlashAttention.apply(q, k, v, causal, block_q, block_k, scale) -> out`` (``apply``
    takes positional arguments only).
    """

    @staticmethod
    def forward(ctx, q, k, v, causal=False, block_q=64, block_k=64, scale=None):
        out, lse = flash_attention_forward(q, k, v, causal, block_q, block_k, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.config = (causal, block_q, block_k, scale)
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        causal, block_q, block_k, scale = ctx.config
        dq, dk, dv = flash_attention_backward(
            q, k, v, out, lse, dout, causal, block_q, block_k, scale=scale
        )
        return dq, dk, dv, None, None, None, None


def flash_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    *,
    scale: float | None = None,
) -> Tensor:
    """Differentiable exact attention with O(N) extra memory.

    Shapes as in :func:`flash_attention_forward`; returns ``out (B, H, N_q, d_v)``.
    """
    return FlashAttention.apply(q, k, v, causal, block_q, block_k, scale)


# --------------------------------------------------------------------------------------
# 3. Counting: FLOPs and bytes
# --------------------------------------------------------------------------------------


def attention_forward_flops(B: int, H: int, N: int, d: int, causal: bool = False) -> int:
    """Forward FLOPs of attention: ``4 B H N^2 d``, halved with a causal mask.

    Two matrix products per head, ``Q K^T`` (``N x d`` by ``d x N``) and ``P V``
    (``N x N`` by ``N x d``), each ``N^2 d`` multiply-adds = ``2 N^2 d`` FLOPs. The
    softmax's ``O(N^2)`` is ignored, as is customary. The causal count is the
    conventional half (exactly: ``N (N + 1) / 2`` visible pairs).
    """
    for name, value in (("B", B), ("H", H), ("N", N), ("d", d)):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    flops = 4 * B * H * N * N * d  # 2 matmuls x 2 FLOPs per multiply-add
    return flops // 2 if causal else flops


def attention_memory_bytes(
    N: int,
    d: int,
    *,
    batch: int = 1,
    heads: int = 1,
    tiled: bool = False,
    block_q: int = 128,
    block_k: int = 128,
    bytes_per_element: float = 2,
) -> float:
    """Extra memory of the forward beyond inputs and output (a model, not a measurement).

    * naive: the ``N x N`` score matrix per head, ``B H N^2 bytes`` (4096 tokens in fp16:
      33.5 MB per head); the probabilities need as much again unless computed in place.
    * tiled: one score tile ``block_q x block_k``, the accumulator ``block_q x d`` and
      ``m, l`` in fp32, plus the saved logsumexp, ``N`` fp32 values per head: O(N).
    """
    if N < 0 or d < 0:
        raise ValueError(f"N and d must be >= 0, got {N}, {d}")
    if not tiled:
        return batch * heads * N * N * bytes_per_element
    bq, bk = min(block_q, N), min(block_k, N)
    per_head = bq * bk * bytes_per_element + bq * d * 4 + 2 * bq * 4 + N * 4
    return batch * heads * per_head


class PeakMemoryCounter(TorchDispatchMode):
    """Count the bytes of tensors created inside the ``with`` block; track the peak.

    Every operator's fresh output storage is added to ``live`` when it is created and
    subtracted when Python frees it, so ``peak`` is the largest amount of memory
    the computation held at once *on top of* what existed before (inputs). Views
    share storage and are not counted twice. Works on any device, CPU included,
    where ``torch.cuda.max_memory_allocated`` does not exist.

    ``shapes`` keeps every output shape, so a test can assert that no ``N x N``
    tensor was ever produced.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self.shapes: list[tuple[int, ...]] = []
        self._tracked: set[int] = set()

    def _release(self, key: int, nbytes: int) -> None:
        self._tracked.discard(key)
        self.live -= nbytes

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        # Views and in-place results reuse an input's storage: not a new allocation.
        inputs = {
            a.untyped_storage().data_ptr()
            for a in tree_flatten((args, kwargs))[0]
            if isinstance(a, Tensor)
        }
        for t in tree_flatten(result)[0]:
            if not isinstance(t, Tensor):
                continue
            self.shapes.append(tuple(t.shape))
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if nbytes == 0 or key in self._tracked or key in inputs:
                continue
            self._tracked.add(key)
            self.live += nbytes
            self.peak = max(self.peak, self.live)
            weakref.finalize(storage, self._release, key, nbytes).atexit = False
        return result
