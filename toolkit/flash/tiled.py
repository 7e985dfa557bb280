"""Tiled FlashAttention forward and backward, and its autograd wrapper.

The forward walks over the keys tile by tile with the online softmax of
:mod:`toolkit.flash.online` and saves the logsumexp ``L = m + log l``: all
the backward pass needs to recompute any tile's probabilities exactly,
``P_ij = exp(S_ij - L_i)``, so no ``N x N`` matrix is saved for the backward either:
O(N) extra memory.

Backward (FA2, Algorithm 2): with ``D_i = sum_d dO_id O_id`` (a row dot product),

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dQ = dS K * scale,   dK = dS^T Q * scale.

The results are exact: the same numbers as ``softmax(Q K^T / sqrt(d)) V`` up to
floating-point rounding, not an approximation.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.arguments import check_flash_inputs
from toolkit.flash.online import NEG_INF


def causal_tile_mask(qs: int, qe: int, ks: int, ke: int, shift: int, device) -> Tensor:
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
    g = check_flash_inputs(q, k, v, block_q, block_k)
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
                s = s.masked_fill(~causal_tile_mask(qs, qe, ks, ke, shift, q.device), NEG_INF)
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
    g = check_flash_inputs(q, k, v, block_q, block_k)
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
                s = s.masked_fill(~causal_tile_mask(qs, qe, ks, ke, shift, q.device), NEG_INF)
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
