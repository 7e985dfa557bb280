"""The FlashAttention-2 backward pass in Triton: strided, causal, GQA, autotuned on a GPU.

Same mathematics as the teaching kernel (:mod:`toolkit.kernels.flash_backward_teaching`,
FlashAttention-2, arXiv 2307.08691, Algorithm 2): probabilities are recomputed from the
saved log-sum-exp, ``P = exp(S - L)``, and

    dV = P^T dO,   dP = dO V^T,   dS = P * (dP - D),   dK = dS^T Q scale,   dQ = dS K scale,

with ``D = rowsum(dO * O)``. Organised for speed (:mod:`toolkit.kernels.flash_backward_kernels`
explains how): a preprocessing launch for ``D``, one launch parallel over key tiles for
``dK`` and ``dV`` (summed over each GQA group in registers), one parallel over query
tiles for ``dQ``; no atomics, no ``N x N`` tensor.

On a GPU, block sizes, warps and pipeline stages are chosen per problem by
``triton.autotune``; in the interpreter (``TRITON_INTERPRET=1``) fixed small blocks are
used. fp32 inputs use exact fp32 products (not TF32); fp16 and bf16 accumulate in fp32.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from toolkit.arguments import check_flash_backward_inputs
from toolkit.kernels.flash_backward_kernels import (
    bwd_dkdv_kernel,
    bwd_dkdv_tuned,
    bwd_dq_kernel,
    bwd_dq_tuned,
    bwd_preprocess_kernel,
)
from toolkit.kernels.runtime import (
    _ENABLE_HINT,
    HAS_TRITON,
    LOG2E,
    _cdiv,
    _interpreted,
    _next_power_of_2,
    tl,
)

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
    if not (q.dtype == k.dtype == v.dtype) or not (q.device == k.device == v.device):
        raise ValueError(
            f"q, k, v must share a dtype and a device, got {q.dtype} {q.device}, "
            f"{k.dtype} {k.device}, {v.dtype} {v.device}"
        )
    check_flash_backward_inputs(q, out, lse, dout)
    interpreting = _interpreted(bwd_dq_kernel)
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


def flash_attention_backward_tuned(
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
            log-sum-exp (:func:`toolkit.kernels.flash_attention_tuned` returns both).
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
    return _backward_unchecked(q, k, v, out, lse, dout, causal, scale=scale, block_m=block_m,
                              block_n=block_n, interpreting=interpreting)


def _backward_unchecked(q, k, v, out, lse, dout, causal=False, *, scale=None, block_m=None,
                       block_n=None, interpreting: bool | None = None):
    """:func:`flash_attention_backward_tuned` without its argument checks, for
    :class:`toolkit.kernels.TritonFlashAttention`, whose forward checked ``q, k, v`` and
    made ``out`` and ``lse``, and whose ``dout`` autograd gives ``out``'s shape, dtype
    and device. Same arguments and results."""
    if interpreting is None:
        interpreting = _interpreted(bwd_dq_kernel)
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
    if q.numel() == 0 or k.numel() == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    block_d = max(16, _next_power_of_2(d))
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
    bwd_preprocess_kernel[(_cdiv(N_q, pre_block), B * H)](
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
    tune_key = (N_q, N_k, d, bool(causal), H // H_kv, q.dtype)
    _launch(
        bwd_dkdv_kernel, bwd_dkdv_tuned, fixed, tune_key,
        lambda meta: (_cdiv(N_k, meta["BLOCK_N"]), B * H_kv),
        (q, k, v, dout, lse2, delta, dk, dv,
         *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dk.stride(), *dv.stride(),
         H_kv, H // H_kv, N_q, N_k, d,
         scale, scale * LOG2E),
        common,
    )  # fmt: skip
    _launch(
        bwd_dq_kernel, bwd_dq_tuned, fixed, tune_key,
        lambda meta: (_cdiv(N_q, meta["BLOCK_M"]), B * H),
        (q, k, v, dout, lse2, delta, dq,
         *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *dq.stride(),
         H, H // H_kv, N_q, N_k, d,
         scale, scale * LOG2E),
        common,
    )  # fmt: skip
    return dq, dk, dv


#: (autotuned kernel, tune key) -> the ``triton.Config`` its autotuner chose for that key.
_CHOSEN: dict = {}


def _launch(kernel, tuned, fixed: dict, tune_key: tuple, grid, args: tuple, common: dict) -> None:
    """Launch ``kernel`` with the ``fixed`` block sizes, or with the configuration its
    autotuner ``tuned`` chose for ``tune_key``.

    ``tune_key`` is ``(N_q, N_k, d, causal, group, dtype)``, which determines the
    autotuner's own key (``N_Q, N_K, HEAD_DIM, CAUSAL, n_group`` and the dtypes of the
    tensor arguments). The first launch of a key goes through ``tuned`` (it benchmarks
    its configurations once); later ones launch ``kernel`` with the chosen
    configuration's arguments, exactly what the autotuner would pass, without its
    look-up (tens of microseconds per call: it filters the arguments by name, in a list).
    """
    if fixed:
        kernel[grid(fixed)](*args, **common, **fixed)
        return
    config = _CHOSEN.get((tuned, tune_key))
    if config is None:
        tuned[grid](*args, **common)  # benchmarks the configurations on the key's first call
        _CHOSEN[(tuned, tune_key)] = tuned.best_config
        return
    kernel[grid(config.kwargs)](*args, **common, **config.all_kwargs())
