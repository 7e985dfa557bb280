"""A FlashAttention forward kernel in Triton, with causal masking and GQA.

The algorithm is the one in :mod:`toolkit.flash` (arXiv 2205.14135, 2307.08691),
now as a GPU kernel. Triton (Tillet et al., MAPL 2019; https://triton-lang.org)
programs operate on *blocks*: each **program instance** computes one tile
of ``BLOCK_M`` queries for one (batch, head) pair, so the launch grid is

    grid = (ceil(N_q / BLOCK_M), B * H)

Inside a program:

1. load the query tile ``Q_i`` (``BLOCK_M x d``) once; it stays in registers/SRAM;
2. walk over the keys ``BLOCK_N`` at a time: load ``K_j``, compute ``S = Q_i K_j^T``,
   mask, update the running max ``m`` and sum ``l``, rescale the accumulator and add
   ``P V_j`` (the online softmax);
3. write ``O_i = acc / l`` and the logsumexp ``L_i = m + log l``.

Memory is addressed with plain pointer arithmetic: the element ``[b, h, n, d]`` of a
tensor lives at ``base + b * stride_b + h * stride_h + n * stride_n + d * stride_d``,
so the kernel works on any strided layout. Loads use masks so that ``N`` need not be
a multiple of the block size (out-of-range rows read 0 and are never stored) and a
head size ``d`` that is not a power of two is padded to one.

Two details that are easy to get wrong:

* **GQA mapping.** With ``H`` query heads and ``H_kv`` KV heads, query head ``h``
  reads KV head ``h // (H / H_kv)`` (integer division: consecutive query heads share
  a KV head), *not* ``h % H_kv``.
* **Scores in base 2.** The kernel folds ``log2(e)`` into the scale and uses ``exp2``,
  which maps to a single hardware instruction: ``exp(x) = 2^(x log2 e)``. The
  returned ``lse`` is converted back to natural log.

Causal masking uses the bottom-right alignment of :mod:`toolkit.flash`
(query ``i`` sees keys ``j <= i + N_k - N_q``); key tiles entirely in the future are
never loaded, which halves the work.

Running without a GPU: see :mod:`toolkit.kernels.runtime`; the wrapper detects a
``TRITON_INTERPRET=1`` set too late and says so.
"""

from __future__ import annotations

import math
import os

import torch
from torch import Tensor

from toolkit.kernels.runtime import (
    _ENABLE_HINT,
    HAS_TRITON,
    LOG2E,
    _cdiv,
    _check_dtype,
    _interpreted,
    _is_pow2,
    _next_power_of_2,
    tl,
    triton,
)

if HAS_TRITON:

    @triton.jit
    def _flash_attn_fwd_kernel(
        Q, K, V, O, LSE,  # pointers to the first element of each tensor
        stride_qb, stride_qh, stride_qn, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_ob, stride_oh, stride_on, stride_od,
        stride_lb, stride_lh, stride_ln,
        n_heads, N_Q, N_K, HEAD_DIM,
        qk_scale,  # softmax scale times log2(e)
        GROUP: tl.constexpr,  # query heads per KV head, H / H_kv
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,
        BLOCK_N: tl.constexpr,
        BLOCK_D: tl.constexpr,  # HEAD_DIM rounded up to a power of two
        DOT_PRECISION: tl.constexpr,
    ):  # fmt: skip
        pid_m = tl.program_id(0)  # which tile of queries
        pid_bh = tl.program_id(1)  # which (batch, head)
        b = pid_bh // n_heads
        h = pid_bh % n_heads
        kv_h = h // GROUP  # GQA: integer division, never h % H_kv

        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query rows of this tile
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM

        # Q tile (BLOCK_M, BLOCK_D): address = base + b*sb + h*sh + n*sn + d*sd
        q_ptrs = (
            Q + b * stride_qb + h * stride_qh
            + offs_m[:, None] * stride_qn + offs_d[None, :] * stride_qd
        )  # fmt: skip
        q = tl.load(q_ptrs, mask=(offs_m[:, None] < N_Q) & d_ok[None, :], other=0.0)

        k_base = K + b * stride_kb + kv_h * stride_kh
        v_base = V + b * stride_vb + kv_h * stride_vh

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base 2)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)  # unnormalised output

        shift = N_K - N_Q  # bottom-right causal alignment
        hi = N_K
        if CAUSAL:
            # keys after the tile's last query (+ shift) are masked for every row: skip them
            hi = tl.minimum(N_K, (pid_m + 1) * BLOCK_M + shift)

        for start_n in range(0, hi, BLOCK_N):
            cols = start_n + offs_n  # key indices of this tile
            col_ok = cols < N_K
            # K^T tile (BLOCK_D, BLOCK_N), loaded already transposed through the strides
            kT_ptrs = k_base + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd
            kT = tl.load(kT_ptrs, mask=col_ok[None, :] & d_ok[:, None], other=0.0)
            s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale  # S = Q K^T scale log2e

            keep = col_ok[None, :]
            if CAUSAL:
                keep = keep & (cols[None, :] <= offs_m[:, None] + shift)  # j <= i + shift
            s = tl.where(keep, s, float("-inf"))

            m_new = tl.maximum(m_i, tl.max(s, axis=1))  # m' = max(m, rowmax(S))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible
            p = tl.exp2(s - m_safe[:, None])  # P~ = 2^(S - m')
            alpha = tl.exp2(m_i - m_safe)  # 2^(m - m'): rescale the old sum and accumulator
            l_i = l_i * alpha + tl.sum(p, axis=1)  # l' = l alpha + rowsum(P~)

            v_ptrs = v_base + cols[:, None] * stride_vn + offs_d[None, :] * stride_vd
            v = tl.load(v_ptrs, mask=col_ok[:, None] & d_ok[None, :], other=0.0)
            acc = acc * alpha[:, None]  # acc' = acc alpha + P~ V
            acc += tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
            m_i = m_new

        visible = l_i > 0.0
        l_safe = tl.where(visible, l_i, 1.0)
        out = acc / l_safe[:, None]  # O = acc / l (rows with no visible key stay 0)
        lse = tl.where(visible, m_i * 0.6931471805599453 + tl.log(l_safe), float("-inf"))

        o_ptrs = (
            O + b * stride_ob + h * stride_oh
            + offs_m[:, None] * stride_on + offs_d[None, :] * stride_od
        )  # fmt: skip
        tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=(offs_m[:, None] < N_Q) & d_ok[None, :])
        l_ptrs = LSE + b * stride_lb + h * stride_lh + offs_m * stride_ln
        tl.store(l_ptrs, lse, mask=offs_m < N_Q)  # L = m ln2 + ln l (natural log)

else:  # pragma: no cover
    _flash_attn_fwd_kernel = None


def _mode() -> tuple[bool, bool]:
    """(our kernel interpreted?, Triton's own library interpreted?).

    Triton chooses interpreter or compiler each time it *decorates* a function:
    its standard library (``tl.max``, ``tl.sum``, ...) at ``import triton``, our
    kernel at the import of this module. Both must agree.
    """
    return _interpreted(_flash_attn_fwd_kernel), _interpreted(tl.max)


def interpreter_active() -> bool:
    """True if Triton and this kernel run in the CPU interpreter (``TRITON_INTERPRET=1``
    was set before ``triton`` was first imported)."""
    return HAS_TRITON and all(_mode())


def flash_attention_tuned(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_m: int | None = None,
    block_n: int | None = None,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention forward with the Triton kernel.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)`` with ``H`` a multiple of
            ``H_kv``. Same dtype (fp16 or fp32; bf16 on a GPU only) and device.
        causal: bottom-right aligned causal mask (``j <= i + N_k - N_q``).
        block_m, block_n: query / key tile sizes, powers of two >= 16 (defaults:
            128 x 64 on a GPU, 32 x 32 in the interpreter, where bigger tiles mean
            fewer slow Python-level steps).
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``out (B, H, N_q, d)`` in the input dtype and ``lse (B, H, N_q)`` float32.

    Raises:
        RuntimeError: Triton missing, or CPU tensors without ``TRITON_INTERPRET=1``.
        ValueError: bad shapes, dtypes or block sizes (naming the argument).

    On a GPU, fp32 inputs use IEEE fp32 dot products (not TF32), so results match
    PyTorch closely; fp16 inputs accumulate in fp32.
    """
    if not HAS_TRITON:
        raise RuntimeError("triton is not installed (it ships for Linux only). " + _ENABLE_HINT)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor (B, heads, N, d)")
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    if k.shape[0] != B or v.shape != k.shape:
        raise ValueError(
            f"k and v must both be (B, H_kv, N_k, d) with q's B and d; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if k.shape[-1] != d:
        raise ValueError(f"k must have the same head size d as q ({d}), got {k.shape[-1]}")
    if H_kv < 1 or H % H_kv != 0:
        raise ValueError(f"q's heads ({H}) must be a multiple of k/v's heads ({H_kv})")
    if not (q.dtype == k.dtype == v.dtype):
        raise ValueError(f"q, k, v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"q, k, v must be on one device, got {q.device}, {k.device}, {v.device}")

    kernel_interpreted, library_interpreted = _mode()
    if kernel_interpreted != library_interpreted:
        raise RuntimeError(
            "TRITON_INTERPRET changed after triton had been imported (libraries such as "
            "transformers and torch.utils.flop_counter import triton), so Triton's library "
            f"is {'interpreted' if library_interpreted else 'compiled'} but this kernel is "
            f"{'interpreted' if kernel_interpreted else 'compiled'}. " + _ENABLE_HINT
        )
    interpreting = kernel_interpreted
    if q.device.type != "cuda" and not interpreting:
        hint = ""
        if os.environ.get("TRITON_INTERPRET") == "1":
            hint = (
                " TRITON_INTERPRET=1 is set now, but it was set after triton had been "
                "imported; restart the Python process."
            )
        raise RuntimeError(
            f"q is on {q.device} and the Triton interpreter is off.{hint} " + _ENABLE_HINT
        )
    _check_dtype(q, interpreting)

    on_gpu = not interpreting
    block_m = (128 if on_gpu else 32) if block_m is None else block_m
    block_n = (64 if on_gpu else 32) if block_n is None else block_n
    for name, value in (("block_m", block_m), ("block_n", block_n)):
        if not (_is_pow2(value) and value >= 16):
            raise ValueError(f"{name} must be a power of two >= 16 (tl.dot's minimum), got {value}")
    block_d = max(16, _next_power_of_2(d))
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)

    out = torch.empty_like(q)
    lse = torch.empty(B, H, N_q, dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        lse.fill_(float("-inf"))
        return out, lse
    grid = (_cdiv(N_q, block_m), B * H)
    launch = {}
    if on_gpu:
        launch = {"num_warps": 4 if block_d <= 64 else 8, "num_stages": 2}
    _flash_attn_fwd_kernel[grid](
        q, k, v, out, lse,
        *q.stride(), *k.stride(), *v.stride(), *out.stride(), *lse.stride(),
        H, N_q, N_k, d,
        scale * LOG2E,
        GROUP=H // H_kv,
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        BLOCK_D=block_d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
        **launch,
    )  # fmt: skip
    return out, lse
