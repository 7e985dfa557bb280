"""GPU half of ``benchmarks/attention.py``: correctness and TFLOP/s of the Triton kernels.

``check()`` compares the Triton forward + backward (``toolkit.kernels.triton_attention``)
and PyTorch's SDPA in the same dtype against float64 attention on the GPU, as relative
errors ``|x - ref| / |ref|`` (Frobenius norms) of ``out``, ``dq``, ``dk``, ``dv``. A case
passes when Triton's error is at most twice SDPA's plus a small floor for the dtype.

``bench()`` times, with ``triton.testing.do_bench`` (median, CUDA events), the forward
and the backward alone (``torch.autograd.grad`` on a retained graph) of the Triton
kernels and of SDPA restricted to its FlashAttention backend. FLOPs: ``4 B H N^2 d``
for the forward (two matrix products), 2.5 times that for the backward (five), both
halved with a causal mask, as in the FlashAttention papers. The first call of each
shape runs the backward's autotuning; it is excluded from the timings.
"""

from __future__ import annotations

import json
import math
import time

import torch
import torch.nn.functional as F

from toolkit.flash import attention_forward_flops
from toolkit.kernels import flash_attention_tuned, triton_attention

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}
ERROR_FLOOR = {torch.float16: 2e-3, torch.bfloat16: 1.5e-2, torch.float32: 1e-5}


def _inputs(B, H, H_kv, N_q, N_k, d, dtype, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)

    return randn(B, H, N_q, d), randn(B, H_kv, N_k, d), randn(B, H_kv, N_k, d), randn(B, H, N_q, d)


def _bottom_right_mask(N_q, N_k):
    rows = torch.arange(N_q, device="cuda")[:, None] + (N_k - N_q)
    return torch.arange(N_k, device="cuda")[None, :] <= rows


def _sdpa(q, k, v, causal):
    """SDPA with GQA and the bottom-right causal mask of the kernels."""
    if causal and q.shape[2] != k.shape[2]:  # is_causal aligns top-left: pass the mask
        mask = _bottom_right_mask(q.shape[2], k.shape[2])
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)


def _out_and_grads(attend, q, k, v, dout, causal):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    out = attend(q, k, v, causal)
    return (out, *torch.autograd.grad(out, (q, k, v), dout))


def _rel(x, ref):
    return ((x.double() - ref).norm() / ref.norm()).item()


CHECK_CASES = [  # (dtype, d, causal, H, H_kv, N_q, N_k); 1008 is not a multiple of any tile
    ("fp16", 64, False, 8, 8, 1008, 1008),
    ("fp16", 128, True, 8, 8, 1008, 1008),
    ("bf16", 64, True, 8, 8, 1008, 1008),
    ("bf16", 128, False, 8, 8, 1008, 1008),
    ("fp16", 128, True, 8, 2, 1008, 1008),  # GQA
    ("bf16", 64, False, 8, 2, 1008, 1008),  # GQA
    ("fp16", 64, True, 8, 2, 256, 1008),  # GQA, a chunk of queries after cached keys
    ("fp32", 64, True, 8, 2, 1008, 1008),  # GQA, exact fp32 products
]


def check(log=print) -> list[dict]:
    """Relative errors against float64 for each case of ``CHECK_CASES``."""
    rows = []
    for name, d, causal, H, H_kv, N_q, N_k in CHECK_CASES:
        dtype = DTYPES[name]
        q, k, v, dout = _inputs(2, H, H_kv, N_q, N_k, d, dtype, seed=d + H_kv)
        ref = _out_and_grads(_sdpa, q.double(), k.double(), v.double(), dout.double(), causal)
        tri = _out_and_grads(triton_attention, q, k, v, dout, causal)
        sdp = _out_and_grads(_sdpa, q, k, v, dout, causal)
        tri_err = [_rel(x, r) for x, r in zip(tri, ref)]
        sdp_err = [_rel(x, r) for x, r in zip(sdp, ref)]
        ok = all(t <= 2 * s + ERROR_FLOOR[dtype] for t, s in zip(tri_err, sdp_err))
        ok &= all(torch.isfinite(x).all().item() for x in tri)
        rows.append({"dtype": name, "d": d, "causal": causal, "H": H, "H_kv": H_kv, "N_q": N_q,
                     "N_k": N_k, "triton": tri_err, "sdpa": sdp_err, "ok": ok})
        log(f"check {name} d={d} causal={causal} H={H}/{H_kv} N={N_q}x{N_k}: "
            f"triton out/dq/dk/dv {' '.join(f'{e:.1e}' for e in tri_err)} | "
            f"sdpa {' '.join(f'{e:.1e}' for e in sdp_err)} -> {'ok' if ok else 'FAIL'}")
    return rows


def _flash_sdpa(q, k, v, causal):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _time_pair(attend, q, k, v, dout, causal, rep):
    """(forward ms, backward ms), medians; the backward alone, on a retained graph."""
    from triton.testing import do_bench

    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    out = attend(q, k, v, causal)
    torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)  # autotunes on first call
    with torch.no_grad():
        t_fwd = do_bench(lambda: attend(q, k, v, causal), warmup=10, rep=rep)
    t_bwd = do_bench(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                     warmup=10, rep=rep)
    return t_fwd, t_bwd


def _compile_one(case) -> None:
    name, d, causal = case
    q, k, v, dout = _inputs(1, 2, 2, 1024, 1024, d, DTYPES[name])
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    torch.autograd.grad(triton_attention(q, k, v, causal), (q, k, v), dout)


def precompile(dtypes, head_dims=(64, 128), log=print) -> None:
    """Compile every kernel and autotuning candidate in parallel processes.

    Triton compiles one kernel at a time per process, and the backward has a few
    candidates per (dtype, d, causal); compiled in parallel on tiny inputs with the same
    specialisations (lengths and strides divisible by 16), they land in Triton's on-disk
    cache, and the timed run only loads them.
    """
    import concurrent.futures
    import multiprocessing

    start = time.perf_counter()
    cases = [(name, d, causal) for name in dtypes for d in head_dims for causal in (False, True)]
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(len(cases), mp_context=context) as pool:
        list(pool.map(_compile_one, cases))
    log(f"precompiled {len(cases)} cases in {time.perf_counter() - start:.0f} s")


def bench(seqs, dtypes, head_dims=(64, 128), B=4, H=32, rep=100, log=print,
          on_row=None) -> list[dict]:
    """Forward and backward TFLOP/s, Triton against SDPA's FlashAttention backend."""
    rows = []
    start = time.perf_counter()
    for name in dtypes:
        for d in head_dims:
            for causal in (False, True):
                for N in seqs:
                    q, k, v, dout = _inputs(B, H, H, N, N, d, DTYPES[name])
                    tri = _time_pair(triton_attention, q, k, v, dout, causal, rep)
                    fla = _time_pair(_flash_sdpa, q, k, v, dout, causal, rep)
                    flops = attention_forward_flops(B, H, N, d, causal)
                    row = {"dtype": name, "d": d, "causal": causal, "N": N,
                           "triton_fwd_ms": tri[0], "sdpa_fwd_ms": fla[0],
                           "triton_bwd_ms": tri[1], "sdpa_bwd_ms": fla[1],
                           "triton_fwd_tflops": flops / tri[0] / 1e9,
                           "sdpa_fwd_tflops": flops / fla[0] / 1e9,
                           "triton_bwd_tflops": 2.5 * flops / tri[1] / 1e9,
                           "sdpa_bwd_tflops": 2.5 * flops / fla[1] / 1e9}
                    row["fwd_ratio"] = fla[0] / tri[0]
                    row["bwd_ratio"] = fla[1] / tri[1]
                    row["fwd_bwd_ratio"] = (fla[0] + fla[1]) / (tri[0] + tri[1])
                    row["elapsed_s"] = time.perf_counter() - start
                    rows.append(row)
                    if on_row:
                        on_row(rows)
                    log(json.dumps({k: round(x, 4) if isinstance(x, float) else x
                                    for k, x in row.items()}))
                    del q, k, v, dout
                    torch.cuda.empty_cache()
    return rows


def sweep_forward_blocks(N=4096, B=4, H=32, log=print) -> None:
    """Forward tile sizes through the wrapper's block_m/block_n (warps/stages are fixed)."""
    from triton.testing import do_bench

    for d in (64, 128):
        for causal in (False, True):
            q, k, v, _ = _inputs(B, H, H, N, N, d, torch.float16)
            flops = attention_forward_flops(B, H, N, d, causal)
            sdpa = do_bench(lambda a=(q, k, v, causal): _flash_sdpa(*a), warmup=10, rep=50)
            for bm, bn in ((64, 64), (128, 32), (128, 64), (128, 128), (64, 128)):
                try:
                    t = do_bench(lambda a=(q, k, v, causal), bm=bm, bn=bn: flash_attention_tuned(
                        *a[:3], causal=a[3], block_m=bm, block_n=bn), warmup=10, rep=50)
                except Exception as exc:  # out of shared memory or registers
                    log(f"fwd sweep d={d} causal={causal} {bm}x{bn}: {type(exc).__name__}")
                    continue
                log(f"fwd sweep d={d} causal={causal} {bm}x{bn}: {flops / t / 1e9:.0f} TFLOP/s "
                    f"({sdpa / t:.2f}x sdpa)")


def print_tables(rows: list[dict], device: str, print_table) -> None:
    for name in dict.fromkeys(r["dtype"] for r in rows):
        mine = [r for r in rows if r["dtype"] == name]
        B_H = "B=4, H=32"
        print_table(
            f"{name} on {device}, {B_H}: TFLOP/s (forward 4BHN^2d, backward 2.5x that, "
            "halved when causal); ratio = SDPA-flash time / Triton time",
            ["d", "causal", "N", "fwd triton", "fwd sdpa", "fwd ratio", "bwd triton",
             "bwd sdpa", "bwd ratio", "fwd+bwd ratio"],
            [[r["d"], r["causal"], r["N"], f"{r['triton_fwd_tflops']:.0f}",
              f"{r['sdpa_fwd_tflops']:.0f}", f"{r['fwd_ratio']:.2f}",
              f"{r['triton_bwd_tflops']:.0f}", f"{r['sdpa_bwd_tflops']:.0f}",
              f"{r['bwd_ratio']:.2f}", f"{r['fwd_bwd_ratio']:.2f}"] for r in mine],
        )


def geometric_mean(values) -> float:
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values))
