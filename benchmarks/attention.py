"""Attention benchmarks: the Triton FlashAttention kernel against PyTorch, and memory.

On a CUDA machine
    forward TFLOP/s of ``toolkit.kernels.flash_attention_tuned`` and of
    ``torch.nn.functional.scaled_dot_product_attention`` restricted to its
    FlashAttention backend, fp16, B = 4, H = 32, d in {64, 128}, N = 1k .. 16k,
    causal and not, with the ratio Triton / PyTorch (both measured in this process).
    FLOPs are counted as ``4 B H N^2 d`` (half with a causal mask).

On a CPU-only machine
    1. peak extra memory of naive attention (``toolkit.attention``, which builds
       ``N x N`` matrices) against tiled attention (``toolkit.flash``) as N grows,
       counted by :class:`toolkit.flash.PeakMemoryCounter` (bytes of every tensor the
       computation creates, minus those it frees);
    2. correctness and wall time of the Triton kernel in the interpreter
       (``TRITON_INTERPRET=1``) on small shapes, beside the PyTorch tiled version.

Usage::

    python benchmarks/attention.py            # full run
    python benchmarks/attention.py --quick    # a few seconds
    python benchmarks/attention.py --cpu      # the CPU report even when CUDA is present
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import torch

FORCE_CPU = "--cpu" in sys.argv
USE_CUDA = torch.cuda.is_available() and not FORCE_CPU
if not USE_CUDA:
    # The interpreter must be chosen before triton is first imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

import torch.nn.functional as F  # noqa: E402

from toolkit.attention import scaled_dot_product_attention  # noqa: E402
from toolkit.flash import (  # noqa: E402
    PeakMemoryCounter,
    attention_forward_flops,
    attention_memory_bytes,
    flash_attention_forward,
)
from toolkit.kernels import HAS_TRITON, flash_attention_tuned, interpreter_active  # noqa: E402

MB = 1e6


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(cells[0], widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def reference(q, k, v, causal):
    """float64 attention with KV head h // group and bottom-right causal alignment."""
    q, k, v = q.double().cpu(), k.double().cpu(), v.double().cpu()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)
    N_q, N_k = q.shape[2], k.shape[2]
    mask = None
    if causal:
        i = torch.arange(N_q)[:, None] + (N_k - N_q)
        mask = torch.arange(N_k)[None, :] <= i
    return scaled_dot_product_attention(q, k, v, mask)


# ---------------------------------------------------------------------------
# GPU
# ---------------------------------------------------------------------------


def bench_gpu(quick: bool) -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    B, H = 4, 32
    Ns = [1024, 2048, 4096] if quick else [1024, 2048, 4096, 8192, 16384]
    rep = 20 if quick else 100
    rows = []
    for d in (64, 128):
        for causal in (False, True):
            for N in Ns:
                g = torch.Generator(device="cuda").manual_seed(0)
                q, k, v = (torch.randn(B, H, N, d, device="cuda", dtype=torch.float16,
                                       generator=g) for _ in range(3))
                out, _ = flash_attention_tuned(q, k, v, causal=causal)
                with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                    t_torch = do_bench(
                        lambda q=q, k=k, v=v, c=causal: F.scaled_dot_product_attention(
                            q, k, v, is_causal=c), warmup=10, rep=rep)
                t_triton = do_bench(
                    lambda q=q, k=k, v=v, c=causal: flash_attention_tuned(q, k, v, causal=c),
                    warmup=10, rep=rep)
                err = (out.float() - ref.float()).abs().max().item()
                flops = attention_forward_flops(B, H, N, d, causal)
                tf_triton = flops / (t_triton * 1e-3) / 1e12
                tf_torch = flops / (t_torch * 1e-3) / 1e12
                rows.append([d, causal, N, f"{t_triton:.3f}", f"{tf_triton:.1f}",
                             f"{t_torch:.3f}", f"{tf_torch:.1f}", f"{tf_triton / tf_torch:.2f}",
                             f"{err:.1e}"])
                del q, k, v, out, ref
                torch.cuda.empty_cache()
    print_table(
        f"Forward, fp16, B={B}, H={H} on {torch.cuda.get_device_name()} "
        "(TFLOP/s = 4BHN^2d / time, halved when causal)",
        ["d", "causal", "N", "triton ms", "triton TFLOP/s", "sdpa-flash ms",
         "sdpa-flash TFLOP/s", "triton/sdpa", "max |diff|"],
        rows,
    )


# ---------------------------------------------------------------------------
# CPU
# ---------------------------------------------------------------------------


def peak_bytes(fn) -> int:
    with torch.no_grad(), PeakMemoryCounter() as counter:
        fn()
    return counter.peak


def bench_cpu_memory(quick: bool) -> None:
    B, H, d, block = 1, 2, 64, 64
    Ns = [256, 512, 1024] if quick else [256, 512, 1024, 2048, 4096]
    rows = []
    for N in Ns:
        g = torch.Generator().manual_seed(0)
        q, k, v = (torch.randn(B, H, N, d, generator=g) for _ in range(3))
        naive = peak_bytes(lambda q=q, k=k, v=v: scaled_dot_product_attention(q, k, v))
        tiled = peak_bytes(
            lambda q=q, k=k, v=v: flash_attention_forward(q, k, v, block_q=block, block_k=block)
        )
        scores = attention_memory_bytes(N, d, batch=B, heads=H, bytes_per_element=4)
        rows.append([N, f"{naive / MB:.2f}", f"{tiled / MB:.3f}", f"{naive / tiled:.1f}",
                     f"{scores / MB:.2f}"])
    print_table(
        f"Peak extra memory of the forward, fp32, B={B}, H={H}, d={d}, tiles {block}x{block} "
        "(counted tensor bytes; tiled includes its output and logsumexp)",
        ["N", "naive MB", "tiled MB", "naive/tiled", "one NxN score matrix MB"],
        rows,
    )


def best_time(fn, repeats: int = 3) -> float:
    """Best of ``repeats`` wall times in seconds, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_cpu_interpreter(quick: bool) -> None:
    if not HAS_TRITON:
        print("\ntriton is not installed: interpreter benchmark skipped")
        return
    if not interpreter_active():
        print("\nTriton interpreter is not active (triton imported before TRITON_INTERPRET=1?)")
        return
    shapes = [(1, 4, 2, 64, 32)] if quick else [(1, 4, 2, 64, 32), (2, 4, 1, 128, 64),
                                                (1, 8, 2, 256, 64)]
    rows = []
    for B, H, H_kv, N, d in shapes:
        for causal in (False, True):
            for dtype in (torch.float32, torch.float16):
                g = torch.Generator().manual_seed(0)
                q = torch.randn(B, H, N, d, generator=g).to(dtype)
                k = torch.randn(B, H_kv, N, d, generator=g).to(dtype)
                v = torch.randn(B, H_kv, N, d, generator=g).to(dtype)
                ref = reference(q, k, v, causal)
                out, _ = flash_attention_tuned(q, k, v, causal=causal)
                t_interp = best_time(
                    lambda q=q, k=k, v=v, c=causal: flash_attention_tuned(q, k, v, causal=c))
                t_torch = best_time(lambda q=q, k=k, v=v, c=causal: flash_attention_forward(
                    q, k, v, causal=c, block_q=32, block_k=32))
                err = (out.double() - ref).abs().max().item()
                rows.append([B, H, H_kv, N, d, causal, str(dtype).replace("torch.", ""),
                             f"{err:.1e}", f"{t_interp * 1e3:.0f}", f"{t_torch * 1e3:.1f}",
                             f"{t_interp / t_torch:.1f}"])
    print_table(
        "Triton kernel in the interpreter (TRITON_INTERPRET=1, tiles 32x32) vs PyTorch tiled "
        "(1 thread, best of 3)",
        ["B", "H", "H_kv", "N", "d", "causal", "dtype", "max |err|", "interp ms",
         "torch tiled ms", "interp/torch"],
        rows,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--cpu", action="store_true", help="run the CPU report even on a GPU")
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, CUDA: {USE_CUDA}, "
          f"triton interpreter: {HAS_TRITON and interpreter_active()}")
    if USE_CUDA:
        bench_gpu(args.quick)
    else:
        # One thread: the interpreter is single-threaded, and small ops on a busy
        # machine otherwise stall waiting for worker threads.
        torch.set_num_threads(1)
        bench_cpu_memory(args.quick)
        bench_cpu_interpreter(args.quick)


if __name__ == "__main__":
    main()
