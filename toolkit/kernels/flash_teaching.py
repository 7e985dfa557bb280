"""The teaching kernel of Assignment 04: FlashAttention forward, sized for a notebook.

A smaller sibling of the tuned kernel in :mod:`toolkit.kernels.flash_tuned`, sized for
a student to write in a notebook: the same algorithm, GQA mapping, bottom-right causal
mask and ``(out, lse)``, but for *contiguous* tensors (every offset follows from the
shapes, so there are no stride arguments) and a head size ``d`` that is a power of two
>= 16 (no padding of the feature axis). The wrapper :func:`flash_attention_triton` makes
its inputs contiguous; :func:`check_kernel_launch` holds every argument check, so that
the notebook's wrapper is only the launch itself.

The kernel is defined at module level (the assignment's solution must be a copy of
it), which needs a ``triton.jit`` to decorate with even where Triton is missing
(:mod:`toolkit.kernels.runtime` provides a stand-in).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.kernels.runtime import (
    _ENABLE_HINT,
    HAS_TRITON,
    LOG2E,
    _check_dtype,
    _interpreted,
    _is_pow2,
    tl,
    triton,
)


@triton.jit
def flash_attention_kernel(
    Q, K, V, O, LSE,  # contiguous: Q, O (B, H, N_Q, D); K, V (B, H_KV, N_K, D); LSE (B, H, N_Q)
    n_heads, n_kv_heads, N_Q, N_K,
    qk_scale,  # softmax scale times log2(e)
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,  # d, a power of two >= 16
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: ``BLOCK_M`` queries of one (batch, head), online softmax over the keys."""
    pid_m = tl.program_id(0)  # which tile of queries
    pid_bh = tl.program_id(1)  # which (batch, query head)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    kv_h = h // (n_heads // n_kv_heads)  # GQA: group g = H / H_kv, KV head h // g

    # Contiguous (B, heads, N, D): row n of head (b, h) starts at ((b * heads + h) * N + n) * D.
    q_base = Q + (b * n_heads + h) * N_Q * HEAD_DIM
    k_base = K + (b * n_kv_heads + kv_h) * N_K * HEAD_DIM
    v_base = V + (b * n_kv_heads + kv_h) * N_K * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query rows of this tile
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_Q  # the last tile may stick out of the sequence
    q_ptrs = q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_M, HEAD_DIM)
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base 2)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # unnormalised output

    shift = N_K - N_Q  # bottom-right causal alignment: query i sees keys j <= i + shift
    hi = N_K
    if CAUSAL:
        hi = tl.minimum(N_K, (pid_m + 1) * BLOCK_M + shift)  # later key tiles are all masked

    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # key indices of this tile
        col_ok = cols < N_K
        kT_ptrs = k_base + cols[None, :] * HEAD_DIM + offs_d[:, None]  # K^T: (HEAD_DIM, BLOCK_N)
        kT = tl.load(kT_ptrs, mask=col_ok[None, :], other=0.0)
        s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale  # S = Q K^T scale log2(e)
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + shift)  # j <= i + shift
        s = tl.where(keep, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # m' = max(m, rowmax(S))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
        p = tl.exp2(s - m_safe[:, None])  # P~ = 2^(S - m')
        alpha = tl.exp2(m_i - m_safe)  # 2^(m - m'): rescales the old sum and accumulator
        l_i = l_i * alpha + tl.sum(p, axis=1)  # l' = l alpha + rowsum(P~)
        v_ptrs = v_base + cols[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
        v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)
        acc = acc * alpha[:, None]  # acc' = acc alpha + P~ V
        acc += tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    visible = l_i > 0.0
    l_safe = tl.where(visible, l_i, 1.0)
    out = acc / l_safe[:, None]  # O = acc / l (a row with no visible key stays 0)
    # L = ln(sum_j e^(s_j)) = m ln 2 + ln l: back from base 2 to the natural log
    lse = tl.where(visible, m_i * 0.6931471805599453 + tl.log(l_safe), float("-inf"))
    o_ptrs = O + (b * n_heads + h) * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + (b * n_heads + h) * N_Q + offs_m, lse, mask=row_ok)


def check_kernel_launch(
    kernel, q: Tensor, k: Tensor, v: Tensor, block_m: int, block_n: int
) -> None:
    """Every argument check before launching :func:`flash_attention_kernel` (or a copy of it).

    Args:
        kernel: the ``@triton.jit`` function about to be launched; its interpreter mode
            must agree with Triton's own library.
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)``, ``H`` a multiple of ``H_kv``,
            ``d`` a power of two >= 16, one dtype (fp16 or fp32; bf16 on a GPU only),
            one device, nothing empty.
        block_m, block_n: powers of two >= 16 (``tl.dot``'s smallest tile).

    Raises:
        RuntimeError: Triton missing, or CPU tensors without ``TRITON_INTERPRET=1``
            (with instructions), or the interpreter switched on too late.
        ValueError: shapes, dtypes, devices or block sizes, naming the argument.
    """
    if not HAS_TRITON:
        raise RuntimeError("triton is not installed (it ships for Linux only). " + _ENABLE_HINT)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor (B, heads, N, d)")
        if t.numel() == 0:
            raise ValueError(f"{name} is empty (shape {tuple(t.shape)})")
    B, H, _, d = q.shape
    if k.shape[0] != B or v.shape != k.shape or k.shape[-1] != d:
        raise ValueError(
            f"k and v must both be (B, H_kv, N_k, d) with q's B and d; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if H % k.shape[1] != 0:
        raise ValueError(f"q's heads ({H}) must be a multiple of k/v's heads ({k.shape[1]})")
    if not (_is_pow2(d) and d >= 16):
        raise ValueError(f"this kernel needs a head size d that is a power of two >= 16, got {d}")
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if not (isinstance(value, int) and _is_pow2(value) and value >= 16):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot's minimum), got {value}")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")
    interpreting, library_interpreted = _interpreted(kernel), _interpreted(tl.max)
    if interpreting != library_interpreted:
        raise RuntimeError(
            "TRITON_INTERPRET changed after triton had been imported, so Triton's library is "
            f"{'interpreted' if library_interpreted else 'compiled'} but the kernel is "
            f"{'interpreted' if interpreting else 'compiled'}. " + _ENABLE_HINT
        )
    if q.device.type != "cuda" and not interpreting:
        raise RuntimeError(f"q is on {q.device} and the Triton interpreter is off. " + _ENABLE_HINT)
    _check_dtype(q, interpreting)


def flash_attention_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_m: int = 32,
    block_n: int = 32,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention forward with the teaching kernel :func:`flash_attention_kernel`.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)`` (see :func:`check_kernel_launch`).
        causal: bottom-right aligned causal mask (``j <= i + N_k - N_q``).
        block_m, block_n: query / key tile sizes.
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``out (B, H, N_q, d)`` in the input dtype and ``lse (B, H, N_q)`` float32, equal to
        :func:`toolkit.flash.flash_attention_forward` up to rounding.
    """
    check_kernel_launch(flash_attention_kernel, q, k, v, block_m, block_n)
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel assumes this layout
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N_q, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(N_q, block_m), B * H)  # one program per (query tile, batch x head)
    flash_attention_kernel[grid](
        q, k, v, out, lse,
        H, H_kv, N_q, N_k,
        scale * LOG2E,  # exp(x) = 2^(x log2 e): the kernel works in base 2
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    return out, lse
