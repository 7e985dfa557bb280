"""Attention benchmarks: the Triton FlashAttention kernel against PyTorch, and memory.

On a CUDA machine
    1. correctness of the Triton forward + backward (``toolkit.kernels.triton_attention``)
       in fp16, bf16 and fp32, causal and GQA, beside SDPA, against float64;
    2. forward and backward TFLOP/s of the Triton kernels and of
       ``torch.nn.functional.scaled_dot_product_attention`` restricted to its
       FlashAttention backend, fp16 and bf16, B = 4, H = 32, d in {64, 128},
       N = 1k .. 16k, causal and not, with the ratio of their times (both measured in
       this process). FLOPs: ``4 B H N^2 d`` forward, 2.5 times that backward, halved
       with a causal mask. See ``attention_gpu.py``.

On a CPU-only machine
    0. the capstone's two CPU backends, ``blocked``
       (:mod:`toolkit.models.blocked_attention`) against PyTorch's fused kernel
       (``sdpa``), forward with backward and forward alone, per sequence length, head
       size and head grouping, 2,048 tokens a batch, taking turns on the same tensors
       (``--cpu-backends`` runs this table alone);
    1. peak extra memory of naive attention (``toolkit.attention``, which builds
       ``N x N`` matrices) against tiled attention (``toolkit.flash``) as N grows,
       counted by :class:`toolkit.flash.PeakMemoryCounter` (bytes of every tensor the
       computation creates, minus those it frees);
    2. correctness and wall time of the Triton forward and backward kernels in the
       interpreter (``TRITON_INTERPRET=1``) on small shapes, beside the PyTorch tiled
       versions.

Usage::

    python benchmarks/attention.py            # full run
    python benchmarks/attention.py --quick    # a few seconds
    python benchmarks/attention.py --cpu      # the CPU report even when CUDA is present
    python benchmarks/attention.py --cpu-backends  # the CPU backends' table alone
    python benchmarks/attention.py --seq 2048,8192 --dtypes fp16 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch

FORCE_CPU = "--cpu" in sys.argv
USE_CUDA = torch.cuda.is_available() and not FORCE_CPU
if not USE_CUDA:
    # The interpreter must be chosen before triton is first imported.
    os.environ.setdefault("TRITON_INTERPRET", "1")

from tables import print_command, print_table  # noqa: E402  (beside this file, as attention_gpu)

from toolkit.attention import scaled_dot_product_attention  # noqa: E402
from toolkit.flash import (  # noqa: E402
    PeakMemoryCounter,
    attention_memory_bytes,
    flash_attention_backward,
    flash_attention_forward,
)
from toolkit.kernels import (  # noqa: E402
    HAS_TRITON,
    flash_attention_backward_tuned,
    flash_attention_tuned,
    interpreter_active,
)

MB = 1e6


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
# GPU (the tables live in attention_gpu.py)
# ---------------------------------------------------------------------------


def bench_gpu(args) -> None:
    import attention_gpu

    from toolkit.kernels import flash_backward_kernels as kernels

    device = torch.cuda.get_device_name()
    results = {"device": device, "torch": torch.__version__}
    import triton

    results["triton"] = triton.__version__
    print(f"{device}, triton {triton.__version__}")
    if not args.no_check:
        results["check"] = attention_gpu.check()
        print(f"correctness: {sum(r['ok'] for r in results['check'])}/{len(results['check'])} ok")
    if args.sweep_forward:
        attention_gpu.sweep_forward_blocks()
    seqs = [int(n) for n in args.seq.split(",")]
    dtypes = args.dtypes.split(",")

    def save(rows):  # after every row, so that a run cut short keeps what it measured
        results["bench"] = rows
        results["tuned"] = {
            name: {str(key): str(config) for key, config in kernel.cache.items()}
            for name, kernel in (("dkdv", kernels.bwd_dkdv_tuned),
                                 ("dq", kernels.bwd_dq_tuned))
        }
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)

    if args.precompile:
        try:
            attention_gpu.precompile(dtypes)
        except Exception as exc:  # then the timed run compiles as it goes
            print(f"precompiling failed ({type(exc).__name__}: {exc}); compiling serially")
    rows = attention_gpu.bench(seqs, dtypes, rep=args.rep, on_row=save)
    attention_gpu.print_tables(rows, device, print_table)
    for key in ("fwd_ratio", "bwd_ratio"):
        print(f"geometric mean {key}: {attention_gpu.geometric_mean(r[key] for r in rows):.2f}, "
              f"min {min(r[key] for r in rows):.2f}")


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


def bench_cpu_backends(quick: bool) -> None:
    """``blocked`` against ``sdpa`` on the CPU, as the capstone's attention layer calls
    them: q, k, v strided views of one joint projection, causal, 4 query heads; the two
    backends taking turns, the median of the repeats, timed by the thread's CPU time on
    one thread and by the wall clock on more (worker threads' time is not the caller's)."""
    import statistics

    from toolkit.models.backends import causal_attention

    lengths = (64, 128) if quick else (64, 128, 256, 512, 1024, 2048)
    heads = ((4, 2),) if quick else ((4, 4), (4, 2))
    head_sizes = (32,) if quick else (32, 64)
    repeats = 5 if quick else 11
    threads = torch.get_num_threads()
    clock, timed_by = (time.thread_time, "thread CPU time") if threads == 1 else (
        time.perf_counter, "wall clock")
    rows = []
    for D in head_sizes:
        for H, H_kv in heads:
            for T in lengths:
                B = max(1, 2048 // T)
                g = torch.Generator().manual_seed(0)
                joint = torch.randn(B, T, H + 2 * H_kv, D, generator=g)
                d_out = torch.randn(B, T, H, D, generator=g).transpose(1, 2)

                def run(backend, backward, joint=joint, d_out=d_out, H=H, H_kv=H_kv):
                    x = joint.detach().requires_grad_(backward)
                    q, k, v = (t.transpose(1, 2) for t in x.split((H, H_kv, H_kv), dim=2))
                    with torch.set_grad_enabled(backward):
                        out = causal_attention(q, k, v, backend)
                        if backward:
                            out.backward(d_out)

                times = {(b, bw): [] for b in ("sdpa", "blocked") for bw in (True, False)}
                for key in times:
                    run(*key)  # warm-up
                for _ in range(repeats):
                    for key, spent in times.items():
                        start = clock()
                        run(*key)
                        spent.append(clock() - start)
                ms = {key: statistics.median(v) * 1e3 for key, v in times.items()}
                rows.append([D, f"{H}/{H_kv}", T, B,
                             f"{ms['sdpa', True]:.2f}", f"{ms['blocked', True]:.2f}",
                             f"{ms['sdpa', True] / ms['blocked', True]:.2f}x",
                             f"{ms['sdpa', False]:.2f}", f"{ms['blocked', False]:.2f}",
                             f"{ms['sdpa', False] / ms['blocked', False]:.2f}x"])
    print_table(
        f"Causal attention on the CPU, blocked against sdpa: ms per call ({threads} "
        f"thread(s), {timed_by}, median of {repeats}, taking turns; B x T = 2,048 tokens; "
        "q, k, v views of one projection)",
        ["d_head", "H/H_kv", "T", "B", "fwd+bwd sdpa", "fwd+bwd blocked", "speed-up",
         "fwd sdpa", "fwd blocked", "speed-up"],
        rows,
    )


def reference_grads(q, k, v, dout, causal):
    """float64 autograd gradients of :func:`reference` (dq, dk, dv)."""
    q, k, v = (t.double().requires_grad_() for t in (q, k, v))
    out = reference(q, k, v, causal)
    return torch.autograd.grad(out, (q, k, v), dout.double())


def bench_cpu_interpreter_backward(quick: bool) -> None:
    """The backward kernel in the interpreter: error against float64, time against PyTorch."""
    if not (HAS_TRITON and interpreter_active()):
        return
    shapes = [(1, 4, 2, 64, 32)] if quick else [(1, 4, 2, 64, 32), (2, 4, 1, 128, 64)]
    rows = []
    for B, H, H_kv, N, d in shapes:
        for causal in (False, True):
            for dtype in (torch.float32, torch.float16):
                g = torch.Generator().manual_seed(1)
                q, dout = (torch.randn(B, H, N, d, generator=g).to(dtype) for _ in range(2))
                k, v = (torch.randn(B, H_kv, N, d, generator=g).to(dtype) for _ in range(2))
                out, lse = flash_attention_tuned(q, k, v, causal=causal)
                want = reference_grads(q, k, v, dout, causal)
                got = flash_attention_backward_tuned(q, k, v, out, lse, dout, causal)
                t_interp = best_time(lambda a=(q, k, v, out, lse, dout), c=causal:
                                     flash_attention_backward_tuned(*a, c))
                t_torch = best_time(lambda a=(q, k, v, out, lse, dout), c=causal:
                                    flash_attention_backward(*a, c, 32, 32))
                err = max((x.double() - w).abs().max().item() for x, w in zip(got, want))
                rows.append([B, H, H_kv, N, d, causal, str(dtype).replace("torch.", ""),
                             f"{err:.1e}", f"{t_interp * 1e3:.0f}", f"{t_torch * 1e3:.1f}",
                             f"{t_interp / t_torch:.1f}"])
    print_table(
        "Triton backward in the interpreter (tiles 32x32) vs PyTorch tiled backward: largest "
        "error of dq, dk, dv against float64 autograd (1 thread, best of 3)",
        ["B", "H", "H_kv", "N", "d", "causal", "dtype", "max |err|", "interp ms",
         "torch tiled ms", "interp/torch"],
        rows,
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, a few seconds")
    parser.add_argument("--cpu", action="store_true", help="run the CPU report even on a GPU")
    parser.add_argument("--cpu-backends", action="store_true",
                        help="only the CPU table of the blocked and sdpa backends")
    parser.add_argument("--threads", type=int, default=1,
                        help="--cpu-backends: torch threads (times are then wall clock)")
    parser.add_argument("--seq", default="1024,2048,4096,8192,16384", help="GPU: sequence lengths")
    parser.add_argument("--dtypes", default="fp16,bf16", help="GPU: fp16, bf16, fp32")
    parser.add_argument("--no-check", action="store_true", help="GPU: skip the correctness check")
    parser.add_argument("--sweep-forward", action="store_true", help="GPU: forward tile sizes")
    parser.add_argument("--json", help="GPU: write every number to this file")
    parser.add_argument("--rep", type=int, default=100, help="GPU: milliseconds timed per call")
    parser.add_argument("--precompile", action="store_true",
                        help="GPU: compile the kernels in parallel processes first")
    args = parser.parse_args(argv)
    print_command(__file__, argv)
    print(f"torch {torch.__version__}, CUDA: {USE_CUDA}, "
          f"triton interpreter: {HAS_TRITON and interpreter_active()}")
    if args.cpu_backends:
        torch.set_num_threads(args.threads)  # 1 by default, as the capstone's CPU races
        bench_cpu_backends(args.quick)
    elif USE_CUDA:
        bench_gpu(args)
    else:
        # One thread: the interpreter is single-threaded, and small ops on a busy
        # machine otherwise stall waiting for worker threads.
        torch.set_num_threads(1)
        bench_cpu_backends(args.quick)
        bench_cpu_memory(args.quick)
        bench_cpu_interpreter(args.quick)
        bench_cpu_interpreter_backward(args.quick)


if __name__ == "__main__":
    main()
