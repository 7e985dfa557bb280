"""The FlashAttention backward pass as a student-sized Triton kernel (Assignment 04).

The forward saved, per query row, the output ``O`` and the log-sum-exp ``L`` of its
scaled scores. That is all the backward needs (FlashAttention-2, arXiv 2307.08691,
Algorithm 2): any tile of probabilities can be recomputed exactly as
``P = exp(S - L)`` with ``S = Q K^T scale``, so no ``N x N`` matrix is ever stored.
With ``dO`` the gradient of the loss with respect to ``O``:

    dV = P^T dO                 dP = dO V^T
    dS = P * (dP - D)           with D_i = rowsum(dO * O)_i = sum_c dO_ic O_ic
    dQ = dS K scale             dK = dS^T Q scale

``D`` comes from the softmax's Jacobian: ``dS_ij = P_ij (dP_ij - sum_l P_il dP_il)``,
and ``sum_l P_il dP_il = sum_l P_il (dO_i . v_l) = dO_i . O_i``: one dot product per
row, computed once before the kernel instead of a sum over every key.

**Parallel over keys.** One program owns a tile of ``BLOCK_N`` keys of one (batch, KV
head): it keeps ``K_j`` and ``V_j`` on chip and walks over every query that can see
them, accumulating ``dK_j`` and ``dV_j`` privately; no other program writes them. With
grouped-query attention a KV head serves ``g = H / H_kv`` query heads (``h = kv_h g + r``),
and its gradient is the **sum** over all of them, so the same program walks over the
query tiles of each head of its group. ``dQ_i`` gets a share from every key tile, so
programs add their shares into a float32 buffer with ``tl.atomic_add``, as FA2's
Algorithm 2 does. (:mod:`toolkit.kernels.flash_backward_tuned` instead runs a second kernel,
parallel over queries, for ``dQ``: no atomics, a little recomputation.)

**Causal, bottom-right.** Query ``i`` sees key ``j`` iff ``j <= i + N_k - N_q``, as in
the forward. A key tile starting at ``n0`` is invisible to every query before
``n0 - shift``, so the program starts its query loop there; the tiles it does visit
are masked row by row.

The kernel takes contiguous tensors and a head size ``d`` that is a power of two >= 16,
like the forward teaching kernel (:func:`toolkit.kernels.flash_teaching.flash_attention_kernel`).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.arguments import check_flash_backward_inputs
from toolkit.kernels.flash_teaching import check_kernel_launch
from toolkit.kernels.runtime import tl, triton


@triton.jit
def flash_attention_backward_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, DK, DV,  # contiguous; shapes in flash_attention_backward_triton
    n_heads, n_kv_heads, N_Q, N_K,
    scale,  # the softmax scale, 1 / sqrt(d) by default
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,  # d, a power of two >= 16
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: ``BLOCK_N`` keys of one (batch, KV head); dK, dV summed over its group."""
    pid_n = tl.program_id(0)  # which tile of keys
    pid_bkv = tl.program_id(1)  # which (batch, KV head)
    b = pid_bkv // n_kv_heads
    kv_h = pid_bkv % n_kv_heads
    group = n_heads // n_kv_heads  # query heads kv_h * group + r, r < group, read this KV head

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # key rows of this tile
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    key_ok = offs_n < N_K  # the last tile may stick out of the sequence
    kv_rows = (b * n_kv_heads + kv_h) * N_K + offs_n  # row index in (B * H_kv * N_K, D)
    kv_ptrs = kv_rows[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
    k = tl.load(K + kv_ptrs, mask=key_ok[:, None], other=0.0)  # stays on chip all along
    v = tl.load(V + kv_ptrs, mask=key_ok[:, None], other=0.0)

    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)  # dK, dV: summed over the group
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    shift = N_K - N_Q  # query i sees keys j <= i + shift
    first_row = 0
    if CAUSAL:
        first_row = tl.maximum(0, pid_n * BLOCK_N - shift)  # earlier queries see none of these keys

    for r in range(0, group):
        h = kv_h * group + r  # GQA: the query heads of KV head kv_h are consecutive
        for start_m in range(first_row, N_Q, BLOCK_M):
            rows = start_m + offs_m  # query indices of this tile
            row_ok = rows < N_Q
            q_rows = (b * n_heads + h) * N_Q + rows  # row index in (B * H * N_Q, D)
            q_ptrs = q_rows[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_M, HEAD_DIM)
            q = tl.load(Q + q_ptrs, mask=row_ok[:, None], other=0.0)
            do = tl.load(DO + q_ptrs, mask=row_ok[:, None], other=0.0)
            lse = tl.load(LSE + q_rows, mask=row_ok, other=0.0)
            delta = tl.load(DELTA + q_rows, mask=row_ok, other=0.0)

            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # S = Q K^T scale
            visible = row_ok[:, None] & key_ok[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= rows[:, None] + shift)  # j <= i + shift
            p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)  # P = exp(S - L), recomputed

            dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=DOT_PRECISION)  # P^T dO
            dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # dP = dO V^T
            ds = p * (dp - delta[:, None])  # dS = P * (dP - D)
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=DOT_PRECISION)  # dK += dS^T Q
            dq = tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION) * scale  # dS K scale
            tl.atomic_add(DQ + q_ptrs, dq, mask=row_ok[:, None])  # other key tiles add theirs

    tl.store(DK + kv_ptrs, (dk * scale).to(DK.dtype.element_ty), mask=key_ok[:, None])  # dK scale
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])


def check_backward_launch(
    kernel, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, dout: Tensor,
    block_m: int, block_n: int,
) -> None:  # fmt: skip
    """Every argument check before launching :func:`flash_attention_backward_kernel`.

    Args:
        kernel: the ``@triton.jit`` function about to be launched.
        q, k, v: as for the forward (:func:`toolkit.kernels.check_kernel_launch`).
        out, dout: ``(B, H, N_q, d)``, the forward's output and the loss's gradient with
            respect to it, in ``q``'s dtype and on its device.
        lse: ``(B, H, N_q)`` float32, the forward's natural-log log-sum-exp.
        block_m, block_n: powers of two >= 16.

    Raises:
        RuntimeError, ValueError: as :func:`check_kernel_launch`, or naming ``out``,
            ``dout`` or ``lse`` when one does not fit ``q``.
    """
    check_kernel_launch(kernel, q, k, v, block_m, block_n)
    check_flash_backward_inputs(q, out, lse, dout)


def flash_attention_backward_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    causal: bool = False,
    block_m: int = 32,
    block_n: int = 32,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention backward with the teaching kernel :func:`flash_attention_backward_kernel`.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)``: the forward's inputs.
        out: ``(B, H, N_q, d)`` and lse: ``(B, H, N_q)`` float32: the forward's outputs.
        dout: ``(B, H, N_q, d)``, the gradient of the loss with respect to ``out``.
        causal: bottom-right aligned causal mask, as in the forward.
        block_m, block_n: query / key tile sizes.
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``dq (B, H, N_q, d)``, ``dk``, ``dv (B, H_kv, N_k, d)`` in the input dtype, equal to
        :func:`toolkit.flash.flash_attention_backward` up to rounding; ``dk`` and ``dv``
        are summed over the query heads that share a KV head.
    """
    kernel = flash_attention_backward_kernel
    check_backward_launch(kernel, q, k, v, out, lse, dout, block_m, block_n)
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    delta = (dout.float() * out.float()).sum(-1)  # D_i = rowsum(dO * O)_i: (B, H, N_q) float32
    dq = torch.zeros(B, H, N_q, d, dtype=torch.float32, device=q.device)  # atomic adds land here
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = (triton.cdiv(N_k, block_n), B * H_kv)  # one program per (key tile, batch x KV head)
    flash_attention_backward_kernel[grid](
        q, k, v, dout, lse.contiguous(), delta, dq, dk, dv,
        H, H_kv, N_q, N_k,
        scale,
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    return dq.to(q.dtype), dk, dv
