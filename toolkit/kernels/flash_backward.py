"""The FlashAttention-2 backward pass in Triton: strided, causal, GQA, autotuned on a GPU.

Same mathematics as the teaching kernel (:mod:`toolkit.kernels.flash_backward_teaching`,
FlashAttention-2, arXiv 2307.08691, Algorithm 2): probabilities are recomputed from the
saved log-sum-exp, ``P = exp(S - L)``, and

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dK = dS^T Q scale,   dQ = dS K scale,

with ``D = rowsum(dO * O)``. Organised for speed, in three launches:

1. **Preprocess** (one program per query tile): ``D`` and the log-sum-exp in base 2,
   ``L log2(e)``, so the inner loops use ``exp2`` (one hardware instruction) with no
   extra multiply; a row that saw no key (``L = -inf``) gets 0, and its masked scores
   then give ``P = 2^-inf = 0``.
2. **dK, dV** (one program per key tile of one (batch, KV head)): ``K_j``, ``V_j`` stay
   on chip while the program walks over the queries of every head in the GQA group,
   so the group's sum happens in registers and each ``dK_j``, ``dV_j`` is written once.
   It works on transposed tiles, ``S^T = K Q^T``, so the key axis is the row axis of
   every product and nothing is transposed in registers.
3. **dQ** (one program per query tile of one (batch, head)): ``Q_i``, ``dO_i`` stay on
   chip while the program walks over the keys. ``S`` and ``dP`` are computed a second
   time here, which costs less than the atomic adds of a single fused launch.

**Masks cost only where needed.** With a causal mask, a key tile is seen by no query
before ``n0 - shift`` (``shift = N_k - N_q``, the bottom-right alignment of the forward)
and by every query from ``n0 + BLOCK_N - 1 - shift`` on; only the tiles in between
cross the diagonal. Each loop is therefore split in two calls of one inner function,
``MASK=True`` on the diagonal band (and, for dQ, on a last key tile that sticks out of
the sequence) and ``MASK=False`` on the rest. Rows or keys past the sequence elsewhere
are loaded as zeros and only ever feed their own, never stored, rows.

On a GPU, block sizes, warps and pipeline stages are chosen per problem by
``triton.autotune``; in the interpreter (``TRITON_INTERPRET=1``) fixed small blocks are
used. fp32 inputs use exact fp32 products (not TF32); fp16 and bf16 accumulate in fp32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.kernels.flash_triton import _ENABLE_HINT, HAS_TRITON, LOG2E, _interpreted, tl, triton

if HAS_TRITON:
    import triton.testing

    @triton.jit
    def _bwd_preprocess_kernel(
        O, DO, LSE, DELTA, LSE2,  # DELTA, LSE2: contiguous (B * H, N_Q) float32 outputs
        stride_ob, stride_oh, stride_on, stride_od,
        stride_db, stride_dh, stride_dn, stride_dd,
        stride_lb, stride_lh, stride_ln,
        n_heads, N_Q, HEAD_DIM,
        BLOCK_M: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = pid_bh // n_heads
        h = pid_bh % n_heads
        rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        row_ok = rows < N_Q
        tile_ok = row_ok[:, None] & (offs_d[None, :] < HEAD_DIM)
        o = tl.load(O + b * stride_ob + h * stride_oh + rows[:, None] * stride_on
                    + offs_d[None, :] * stride_od, mask=tile_ok, other=0.0)
        do = tl.load(DO + b * stride_db + h * stride_dh + rows[:, None] * stride_dn
                     + offs_d[None, :] * stride_dd, mask=tile_ok, other=0.0)
        acc_type = DELTA.dtype.element_ty  # float32, or float64 for float64 inputs
        delta = tl.sum(o.to(acc_type) * do.to(acc_type), axis=1)  # D = rowsum(dO * O)
        lse = tl.load(LSE + b * stride_lb + h * stride_lh + rows * stride_ln, mask=row_ok,
                      other=0.0)
        lse2 = tl.where(lse == float("-inf"), 0.0, lse * 1.4426950408889634)  # L log2(e)
        tl.store(DELTA + pid_bh * N_Q + rows, delta, mask=row_ok)
        tl.store(LSE2 + pid_bh * N_Q + rows, lse2, mask=row_ok)

    @triton.jit
    def _dkdv_steps(
        dk, dv, k, v,  # (BLOCK_N, BLOCK_D): accumulators and this program's keys and values
        Q, DO, LSE2, DELTA,  # already offset to one (batch, query head)
        stride_qn, stride_qd, stride_dn, stride_dd,
        offs_n, offs_d, d_ok, start, stop, N_Q, shift, qk_scale,
        BLOCK_M: tl.constexpr,
        MASK: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):  # fmt: skip
        """Add the query tiles ``start, start + BLOCK_M, ... < stop`` to ``dk`` and ``dv``."""
        for start_m in range(start, stop, BLOCK_M):
            rows = start_m + tl.arange(0, BLOCK_M)
            row_ok = rows < N_Q
            qT = tl.load(Q + rows[None, :] * stride_qn + offs_d[:, None] * stride_qd,
                         mask=row_ok[None, :] & d_ok[:, None], other=0.0)  # (BLOCK_D, BLOCK_M)
            lse2 = tl.load(LSE2 + rows, mask=row_ok, other=0.0)
            sT = tl.dot(k, qT, input_precision=DOT_PRECISION)  # S^T = K Q^T: (BLOCK_N, BLOCK_M)
            pT = tl.exp2(sT * qk_scale - lse2[None, :])  # P^T = 2^(S^T scale log2e - L log2e)
            if MASK:
                pT = tl.where(offs_n[:, None] <= rows[None, :] + shift, pT, 0.0)  # j <= i + shift
            do = tl.load(DO + rows[:, None] * stride_dn + offs_d[None, :] * stride_dd,
                         mask=row_ok[:, None] & d_ok[None, :], other=0.0)  # (BLOCK_M, BLOCK_D)
            dv += tl.dot(pT.to(do.dtype), do, input_precision=DOT_PRECISION)  # dV += P^T dO
            delta = tl.load(DELTA + rows, mask=row_ok, other=0.0)
            dpT = tl.dot(v, tl.trans(do), input_precision=DOT_PRECISION)  # dP^T = V dO^T
            dsT = pT * (dpT - delta[None, :])  # dS^T = P^T * (dP^T - D)
            dk += tl.dot(dsT.to(qT.dtype), tl.trans(qT), input_precision=DOT_PRECISION)  # dS^T Q
        return dk, dv

    @triton.jit
    def _bwd_dkdv_kernel(
        Q, K, V, DO, LSE2, DELTA, DK, DV,
        stride_qb, stride_qh, stride_qn, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_db, stride_dh, stride_dn, stride_dd,
        stride_dkb, stride_dkh, stride_dkn, stride_dkd,
        stride_dvb, stride_dvh, stride_dvn, stride_dvd,
        n_kv_heads, n_group, N_Q, N_K, HEAD_DIM,  # n_group: query heads per KV head
        scale, qk_scale,  # softmax scale, and scale * log2(e)
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,  # queries per inner step
        BLOCK_N: tl.constexpr,  # keys per program
        BLOCK_D: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):  # fmt: skip
        pid_n = tl.program_id(0)
        pid_bkv = tl.program_id(1)
        b = pid_bkv // n_kv_heads
        kv_h = pid_bkv % n_kv_heads
        start_n = pid_n * BLOCK_N
        offs_n = start_n + tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        tile_ok = (offs_n[:, None] < N_K) & d_ok[None, :]
        k = tl.load(K + b * stride_kb + kv_h * stride_kh + offs_n[:, None] * stride_kn
                    + offs_d[None, :] * stride_kd, mask=tile_ok, other=0.0)
        v = tl.load(V + b * stride_vb + kv_h * stride_vh + offs_n[:, None] * stride_vn
                    + offs_d[None, :] * stride_vd, mask=tile_ok, other=0.0)
        dk = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
        dv = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)

        shift = N_K - N_Q
        first = 0  # first query that sees a key of this tile
        unmasked = 0  # first query tile of the band after the diagonal
        if CAUSAL:
            first = tl.maximum(0, start_n - shift)
            # queries from start_n + BLOCK_N - 1 - shift on see the whole tile
            band = tl.maximum(tl.minimum(start_n + BLOCK_N - 1 - shift, N_Q), first) - first
            unmasked = first + tl.cdiv(band, BLOCK_M) * BLOCK_M  # band >= 0: no negative division

        for r in range(0, n_group):  # GQA: the group's gradients are summed in registers
            h = kv_h * n_group + r
            q_head = Q + b * stride_qb + h * stride_qh
            do_head = DO + b * stride_db + h * stride_dh
            row0 = (b * n_kv_heads * n_group + h) * N_Q  # LSE2 and DELTA are (B * H, N_Q)
            if CAUSAL:
                dk, dv = _dkdv_steps(dk, dv, k, v, q_head, do_head, LSE2 + row0, DELTA + row0,
                                     stride_qn, stride_qd, stride_dn, stride_dd,
                                     offs_n, offs_d, d_ok, first, unmasked, N_Q, shift, qk_scale,
                                     BLOCK_M, True, DOT_PRECISION)  # fmt: skip
            dk, dv = _dkdv_steps(dk, dv, k, v, q_head, do_head, LSE2 + row0, DELTA + row0,
                                 stride_qn, stride_qd, stride_dn, stride_dd,
                                 offs_n, offs_d, d_ok, unmasked, N_Q, N_Q, shift, qk_scale,
                                 BLOCK_M, False, DOT_PRECISION)  # fmt: skip

        tl.store(DK + b * stride_dkb + kv_h * stride_dkh + offs_n[:, None] * stride_dkn
                 + offs_d[None, :] * stride_dkd, (dk * scale).to(DK.dtype.element_ty), mask=tile_ok)
        tl.store(DV + b * stride_dvb + kv_h * stride_dvh + offs_n[:, None] * stride_dvn
                 + offs_d[None, :] * stride_dvd, dv.to(DV.dtype.element_ty), mask=tile_ok)

    @triton.jit
    def _dq_steps(
        dq, q, do, lse2, delta,  # this program's query tile and its statistics
        K, V,  # already offset to one (batch, KV head)
        stride_kn, stride_kd, stride_vn, stride_vd,
        rows, offs_d, d_ok, start, stop, N_K, shift, qk_scale,
        BLOCK_N: tl.constexpr,
        MASK: tl.constexpr,
        CAUSAL: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):  # fmt: skip
        """Add the key tiles ``start, start + BLOCK_N, ... < stop`` to ``dq``."""
        for start_n in range(start, stop, BLOCK_N):
            cols = start_n + tl.arange(0, BLOCK_N)
            tile_ok = (cols[None, :] < N_K) & d_ok[:, None]
            kT = tl.load(K + cols[None, :] * stride_kn + offs_d[:, None] * stride_kd,
                         mask=tile_ok, other=0.0)  # (BLOCK_D, BLOCK_N)
            vT = tl.load(V + cols[None, :] * stride_vn + offs_d[:, None] * stride_vd,
                         mask=tile_ok, other=0.0)
            s = tl.dot(q, kT, input_precision=DOT_PRECISION)  # S = Q K^T: (BLOCK_M, BLOCK_N)
            p = tl.exp2(s * qk_scale - lse2[:, None])  # P = 2^(S scale log2e - L log2e)
            if MASK:
                keep = cols[None, :] < N_K
                if CAUSAL:
                    keep = keep & (cols[None, :] <= rows[:, None] + shift)  # j <= i + shift
                p = tl.where(keep, p, 0.0)
            dp = tl.dot(do, vT, input_precision=DOT_PRECISION)  # dP = dO V^T
            ds = p * (dp - delta[:, None])  # dS = P * (dP - D)
            dq += tl.dot(ds.to(kT.dtype), tl.trans(kT), input_precision=DOT_PRECISION)  # dS K
        return dq

    @triton.jit
    def _bwd_dq_kernel(
        Q, K, V, DO, LSE2, DELTA, DQ,
        stride_qb, stride_qh, stride_qn, stride_qd,
        stride_kb, stride_kh, stride_kn, stride_kd,
        stride_vb, stride_vh, stride_vn, stride_vd,
        stride_db, stride_dh, stride_dn, stride_dd,
        stride_dqb, stride_dqh, stride_dqn, stride_dqd,
        n_heads, n_group, N_Q, N_K, HEAD_DIM,
        scale, qk_scale,
        CAUSAL: tl.constexpr,
        BLOCK_M: tl.constexpr,  # queries per program
        BLOCK_N: tl.constexpr,  # keys per inner step
        BLOCK_D: tl.constexpr,
        DOT_PRECISION: tl.constexpr,
    ):  # fmt: skip
        pid_m = tl.program_id(0)
        pid_bh = tl.program_id(1)
        b = pid_bh // n_heads
        h = pid_bh % n_heads
        kv_h = h // n_group  # GQA: integer division, never h % H_kv
        start_m = pid_m * BLOCK_M
        rows = start_m + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        row_ok = rows < N_Q
        tile_ok = row_ok[:, None] & d_ok[None, :]
        q = tl.load(Q + b * stride_qb + h * stride_qh + rows[:, None] * stride_qn
                    + offs_d[None, :] * stride_qd, mask=tile_ok, other=0.0)
        do = tl.load(DO + b * stride_db + h * stride_dh + rows[:, None] * stride_dn
                     + offs_d[None, :] * stride_dd, mask=tile_ok, other=0.0)
        lse2 = tl.load(LSE2 + pid_bh * N_Q + rows, mask=row_ok, other=0.0)
        delta = tl.load(DELTA + pid_bh * N_Q + rows, mask=row_ok, other=0.0)
        dq = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)

        shift = N_K - N_Q
        stop = N_K
        full = N_K  # keys before `full` lie in whole tiles visible to every row of this tile
        if CAUSAL:
            stop = tl.minimum(N_K, start_m + BLOCK_M + shift)  # later keys are all masked
            full = tl.maximum(0, tl.minimum(start_m + shift + 1, N_K))
        full = (full // BLOCK_N) * BLOCK_N
        k_head = K + b * stride_kb + kv_h * stride_kh
        v_head = V + b * stride_vb + kv_h * stride_vh
        dq = _dq_steps(dq, q, do, lse2, delta, k_head, v_head,
                       stride_kn, stride_kd, stride_vn, stride_vd,
                       rows, offs_d, d_ok, 0, full, N_K, shift, qk_scale,
                       BLOCK_N, False, CAUSAL, DOT_PRECISION)  # fmt: skip
        dq = _dq_steps(dq, q, do, lse2, delta, k_head, v_head,
                       stride_kn, stride_kd, stride_vn, stride_vd,
                       rows, offs_d, d_ok, full, stop, N_K, shift, qk_scale,
                       BLOCK_N, True, CAUSAL, DOT_PRECISION)  # fmt: skip
        tl.store(DQ + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqn
                 + offs_d[None, :] * stride_dqd, (dq * scale).to(DQ.dtype.element_ty), mask=tile_ok)

    def _quick_bench(kernel_call, quantiles):
        # Short timing runs: the backward has many problem shapes, each tuned once.
        return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)

    # (queries per step, keys per program) for dK/dV; (queries per program, keys per step)
    # for dQ. Wide tiles on the axis a program keeps on chip, narrow on the one it streams.
    _DKDV_CONFIGS = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((32, 128, 4, 3), (32, 128, 8, 3), (64, 128, 8, 3),
                             (32, 64, 4, 3), (64, 64, 4, 2))
    ]  # fmt: skip
    _DQ_CONFIGS = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((128, 32, 4, 3), (128, 32, 8, 3), (128, 64, 8, 3),
                             (64, 32, 4, 3), (64, 64, 4, 2))
    ]  # fmt: skip
    _TUNE_KEY = ["N_Q", "N_K", "HEAD_DIM", "CAUSAL", "n_group"]  # Triton adds the dtypes
    _bwd_dkdv_tuned = triton.autotune(_DKDV_CONFIGS, key=_TUNE_KEY, do_bench=_quick_bench)(
        _bwd_dkdv_kernel
    )
    _bwd_dq_tuned = triton.autotune(_DQ_CONFIGS, key=_TUNE_KEY, do_bench=_quick_bench)(
        _bwd_dq_kernel
    )

else:  # pragma: no cover - depends on the platform
    _bwd_preprocess_kernel = _bwd_dkdv_kernel = _bwd_dq_kernel = None


_INTERPRETER_BLOCKS = 32  # block size in the interpreter: fewer, larger NumPy steps


def _check_backward_args(q, k, v, out, lse, dout) -> bool:
    """Validate the arguments; return True if the kernels run in the interpreter."""
    if not HAS_TRITON:
        raise RuntimeError("triton is not installed (it ships for Linux only). " + _ENABLE_HINT)
    for name, t in (("q", q), ("k", k), ("v", v), ("out", out), ("dout", dout)):
        if not isinstance(t, Tensor) or t.dim() != 4:
            raise ValueError(f"{name} must be a 4-d tensor (B, heads, N, d)")
    B, H, N_q, d = q.shape
    if k.shape[0] != B or v.shape != k.shape or k.shape[-1] != d:
        raise ValueError(
            f"k and v must both be (B, H_kv, N_k, d) with q's B and d; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if H % k.shape[1] != 0:
        raise ValueError(f"q's heads ({H}) must be a multiple of k/v's heads ({k.shape[1]})")
    for name, t in (("out", out), ("dout", dout)):
        if t.shape != q.shape:
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {tuple(t.shape)}")
    if not isinstance(lse, Tensor) or lse.shape != q.shape[:3]:
        got = tuple(lse.shape) if isinstance(lse, Tensor) else type(lse).__name__
        raise ValueError(
            f"lse must be the forward's log-sum-exp, shape {tuple(q.shape[:3])}; got {got}"
        )
    tensors = {"q": q, "k": k, "v": v, "out": out, "dout": dout, "lse": lse}
    if len({t.device for t in tensors.values()}) != 1:
        raise ValueError("q, k, v, out, lse, dout must be on one device, got "
                         + ", ".join(f"{n} {t.device}" for n, t in tensors.items()))
    if not (q.dtype == k.dtype == v.dtype == out.dtype == dout.dtype):
        raise ValueError("q, k, v, out, dout must share a dtype, got "
                         + ", ".join(f"{n} {t.dtype}" for n, t in tensors.items() if n != "lse"))
    interpreting = _interpreted(_bwd_dq_kernel)
    if interpreting != _interpreted(tl.max):
        raise RuntimeError(
            "TRITON_INTERPRET changed after triton had been imported, so Triton's library "
            "and these kernels disagree on interpreter mode. " + _ENABLE_HINT
        )
    if q.device.type != "cuda" and not interpreting:
        raise RuntimeError(f"q is on {q.device} and the Triton interpreter is off. " + _ENABLE_HINT)
    # bf16 compiled only (the interpreter's bf16 tl.dot is wrong); float64 in the
    # interpreter only, for gradient checks.
    allowed = (torch.float16, torch.float32)
    allowed += (torch.float64,) if interpreting else (torch.bfloat16,)
    if q.dtype not in allowed:
        if q.dtype == torch.bfloat16:
            raise ValueError("q, k, v are bfloat16, which the Triton interpreter "
                             "(TRITON_INTERPRET=1) computes wrongly in tl.dot; use float16 or "
                             "float32 on CPU.")
        raise ValueError(f"q, k, v dtype must be one of {allowed}, got {q.dtype}")
    return interpreting


def triton_flash_attention_backward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    causal: bool = False,
    *,
    scale: float | None = None,
    block_m: int | None = None,
    block_n: int | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention-2 backward with the Triton kernels.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)``, ``H`` a multiple of ``H_kv``;
            any strides. fp16, fp32, and bf16 on a GPU or fp64 in the interpreter
            (for gradient checks).
        out: ``(B, H, N_q, d)``, lse: ``(B, H, N_q)``: the forward's output and natural-log
            log-sum-exp (:func:`toolkit.kernels.triton_flash_attention` returns both).
        dout: ``(B, H, N_q, d)``, the gradient of the loss with respect to ``out``.
        causal: bottom-right aligned causal mask (``j <= i + N_k - N_q``).
        scale: default ``1 / sqrt(d)``; must be the forward's.
        block_m, block_n: fixed tile sizes (powers of two >= 16) for both kernels
            instead of the autotuned ones on a GPU or 32 in the interpreter; for tests.

    Returns:
        ``dq (B, H, N_q, d)``, ``dk (B, H_kv, N_k, d)``, ``dv (B, H_kv, N_k, d)`` in the
        input dtype; ``dk``, ``dv`` summed over the query heads sharing a KV head.
    """
    interpreting = _check_backward_args(q, k, v, out, lse, dout)
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    block_d = max(16, triton.next_power_of_2(d))
    fixed = {}
    if interpreting or block_m is not None or block_n is not None:
        fixed = {"BLOCK_M": block_m or _INTERPRETER_BLOCKS,
                 "BLOCK_N": block_n or _INTERPRETER_BLOCKS}
        for name, value in fixed.items():
            if not (value >= 16 and value & (value - 1) == 0):
                raise ValueError(f"{name.lower()} must be a power of two >= 16, got {value}")

    stats_dtype = torch.float64 if q.dtype == torch.float64 else torch.float32
    delta = torch.empty(B * H, N_q, dtype=stats_dtype, device=q.device)
    lse2 = torch.empty_like(delta)
    pre_block = 64
    _bwd_preprocess_kernel[(triton.cdiv(N_q, pre_block), B * H)](
        out, dout, lse, delta, lse2,
        *out.stride(), *dout.stride(), *lse.stride(),
        H, N_q, d,
        BLOCK_M=pre_block, BLOCK_D=block_d,
    )  # fmt: skip

    common = dict(
        CAUSAL=bool(causal),
        BLOCK_D=block_d,
        DOT_PRECISION="tf32" if q.dtype in (torch.float16, torch.bfloat16) else "ieee",
    )
    dkdv = _bwd_dkdv_kernel if fixed else _bwd_dkdv_tuned
    dkdv[lambda meta: (triton.cdiv(N_k, meta["BLOCK_N"]), B * H_kv)](
        q, k, v, dout, lse2, delta, dk, dv,
        *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dk.stride(), *dv.stride(),
        H_kv, H // H_kv, N_q, N_k, d,
        scale, scale * LOG2E,
        **common, **fixed,
    )  # fmt: skip
    dq_kernel = _bwd_dq_kernel if fixed else _bwd_dq_tuned
    dq_kernel[lambda meta: (triton.cdiv(N_q, meta["BLOCK_M"]), B * H)](
        q, k, v, dout, lse2, delta, dq,
        *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dq.stride(),
        H, H // H_kv, N_q, N_k, d,
        scale, scale * LOG2E,
        **common, **fixed,
    )  # fmt: skip
    return dq, dk, dv
