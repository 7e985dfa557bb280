"""The kernels of the FlashAttention-2 backward (:mod:`toolkit.kernels.flash_backward_tuned`).

Three launches:

1. **Preprocess** (one program per query tile): ``D = rowsum(dO * O)`` and the
   log-sum-exp in base 2, ``L log2(e)``, so the inner loops use ``exp2`` (one hardware
   instruction) with no extra multiply; a row that saw no key (``L = -inf``) gets 0, and
   its masked scores then give ``P = 2^-inf = 0``.
2. **dK, dV** (one program per key tile of one (batch, KV head)): ``K_j``, ``V_j`` stay
   on chip while the program walks over the queries of every head in the GQA group,
   so the group's sum happens in registers and each ``dK_j``, ``dV_j`` is written once.
   It works on transposed tiles, ``S^T = K Q^T``, so the key axis is the row axis of
   every product and nothing is transposed in registers.
3. **dQ** (one program per query tile of one (batch, head)): ``Q_i``, ``dO_i`` stay on
   chip while the program walks over the keys. ``S`` and ``dP`` are computed a second
   time here, which costs less than the atomic adds of a single fused launch.

**Masks cost only where needed.** With a causal mask, a key tile starting at ``n0`` is
seen by no query before ``n0 - shift`` (``shift = N_k - N_q``, the bottom-right alignment
of the forward) and by every query from ``n0 + BLOCK_N - 1 - shift`` on; only the tiles
in between cross the diagonal. Each loop is therefore split in two calls of one inner
function, ``MASK=True`` on the diagonal band (and, for dQ, on a last key tile that sticks
out of the sequence) and ``MASK=False`` on the rest. Rows or keys past the sequence
elsewhere are loaded as zeros and only ever feed their own, never stored, rows.

On a GPU, ``bwd_dkdv_tuned`` and ``bwd_dq_tuned`` choose block sizes, warps and
pipeline stages per problem with ``triton.autotune``.
"""

from __future__ import annotations

from toolkit.kernels.runtime import HAS_TRITON, tl, triton

if HAS_TRITON:
    import triton.testing

    @triton.jit
    def bwd_preprocess_kernel(
        O, DO, LSE, DELTA, LSE2,  # outputs DELTA, LSE2: contiguous (B * H, N_Q), float32 or 64
        stride_ob, stride_oh, stride_on, stride_od,
        stride_db, stride_dh, stride_dn, stride_dd,
        stride_lb, stride_lh, stride_ln,
        n_heads, N_Q, HEAD_DIM,
        BLOCK_M: tl.constexpr,
        BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        """One program: ``D`` and ``L log2(e)`` for ``BLOCK_M`` rows of one (batch, head)."""
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
    def dkdv_steps(
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
    def bwd_dkdv_kernel(
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
        """One program: ``dK``, ``dV`` of ``BLOCK_N`` keys of one (batch, KV head)."""
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
        unmasked = 0  # first query of the steps without a mask
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
                dk, dv = dkdv_steps(dk, dv, k, v, q_head, do_head, LSE2 + row0, DELTA + row0,
                                     stride_qn, stride_qd, stride_dn, stride_dd,
                                     offs_n, offs_d, d_ok, first, unmasked, N_Q, shift, qk_scale,
                                     BLOCK_M, True, DOT_PRECISION)  # fmt: skip
            dk, dv = dkdv_steps(dk, dv, k, v, q_head, do_head, LSE2 + row0, DELTA + row0,
                                 stride_qn, stride_qd, stride_dn, stride_dd,
                                 offs_n, offs_d, d_ok, unmasked, N_Q, N_Q, shift, qk_scale,
                                 BLOCK_M, False, DOT_PRECISION)  # fmt: skip

        tl.store(DK + b * stride_dkb + kv_h * stride_dkh + offs_n[:, None] * stride_dkn
                 + offs_d[None, :] * stride_dkd, (dk * scale).to(DK.dtype.element_ty), mask=tile_ok)
        tl.store(DV + b * stride_dvb + kv_h * stride_dvh + offs_n[:, None] * stride_dvn
                 + offs_d[None, :] * stride_dvd, dv.to(DV.dtype.element_ty), mask=tile_ok)

    @triton.jit
    def dq_steps(
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
    def bwd_dq_kernel(
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
        """One program: ``dQ`` of ``BLOCK_M`` queries of one (batch, query head)."""
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
        dq = dq_steps(dq, q, do, lse2, delta, k_head, v_head,
                       stride_kn, stride_kd, stride_vn, stride_vd,
                       rows, offs_d, d_ok, 0, full, N_K, shift, qk_scale,
                       BLOCK_N, False, CAUSAL, DOT_PRECISION)  # fmt: skip
        dq = dq_steps(dq, q, do, lse2, delta, k_head, v_head,
                       stride_kn, stride_kd, stride_vn, stride_vd,
                       rows, offs_d, d_ok, full, stop, N_K, shift, qk_scale,
                       BLOCK_N, True, CAUSAL, DOT_PRECISION)  # fmt: skip
        tl.store(DQ + b * stride_dqb + h * stride_dqh + rows[:, None] * stride_dqn
                 + offs_d[None, :] * stride_dqd, (dq * scale).to(DQ.dtype.element_ty), mask=tile_ok)

    def _quick_bench(kernel_call, quantiles):
        # Short timing runs: the backward has many problem shapes, each tuned once.
        return triton.testing.do_bench(kernel_call, warmup=5, rep=25, quantiles=quantiles)

    # (queries per step, keys per program) for dK/dV; (queries per program, keys per step)
    # for dQ: wide tiles on the axis a program keeps on chip. The candidates are those an
    # H100 chose for some shape of benchmarks/attention.py (fp16/bf16, d 64/128, N 1k-16k);
    # (32, 128, 8 warps) for dK/dV and (128, 32) for dQ never won there and were dropped.
    _DKDV_CONFIGS = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((32, 128, 4, 3), (64, 128, 8, 3), (32, 64, 4, 3), (64, 64, 4, 2))
    ]  # fmt: skip
    _DQ_CONFIGS = [
        triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
        for bm, bn, w, s in ((128, 64, 8, 3), (64, 32, 4, 3), (64, 64, 4, 2))
    ]  # fmt: skip
    _TUNE_KEY = ["N_Q", "N_K", "HEAD_DIM", "CAUSAL", "n_group"]  # Triton adds the dtypes
    bwd_dkdv_tuned = triton.autotune(_DKDV_CONFIGS, key=_TUNE_KEY, do_bench=_quick_bench)(
        bwd_dkdv_kernel
    )
    bwd_dq_tuned = triton.autotune(_DQ_CONFIGS, key=_TUNE_KEY, do_bench=_quick_bench)(
        bwd_dq_kernel
    )

else:  # pragma: no cover - depends on the platform
    bwd_preprocess_kernel = bwd_dkdv_kernel = bwd_dq_kernel = None
    bwd_dkdv_tuned = bwd_dq_tuned = None
