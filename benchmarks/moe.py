"""MoE dispatch benchmark: sort-based dispatch against the naive per-expert loop.

Both functions of :mod:`toolkit.moe.dispatch` compute ``y_t = sum_j g_tj E_{i_tj}(x_t)``
with the same SwiGLU experts on the same routing; the script checks that the outputs
agree, then times each (median of ``--repeats`` runs, forward under ``no_grad``) in
this process (alternately) and reports the speed-up ``naive / sorted``.

The naive loop scans the whole ``(n_tokens, k)`` routing table once per expert; the
sorted version sorts the assignments once and hands every expert a contiguous block.
Two measurements per configuration:

* **dispatch + combine only**: every expert is the identity, so the time is the
  bookkeeping alone (finding each expert's tokens, gathering, adding back);
* **whole layer**: SwiGLU experts, whose matrix multiplies are the same work in both
  versions and dominate on a CPU when the experts are few and wide.

The bookkeeping gap grows with the number of experts (fine-grained MoE: DeepSeekMoE
routes to 6 of 64).

Usage::

    python benchmarks/moe.py            # three configurations, ~1 minute on 2 cores
    python benchmarks/moe.py --quick    # smaller, a few seconds
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from tables import print_command

from toolkit.ffn import SwiGLU
from toolkit.moe import naive_dispatch, sorted_dispatch, top_k_gating

CONFIGS = [  # (label, n_experts, k, d_model, d_ff)
    ("Mixtral-like: 8 experts, top-2", 8, 2, 256, 512),
    ("fine-grained: 64 experts, top-6", 64, 6, 256, 128),
    ("many tiny experts: 128, top-8", 128, 8, 128, 64),
]


def time_pair(first, second, args: tuple, repeats: int) -> tuple[float, float]:
    """Median seconds of ``first(*args)`` and ``second(*args)``, timed alternately so that
    a load change on a shared machine hits both alike."""
    first(*args), second(*args)  # warm-up
    times: tuple[list, list] = ([], [])
    for _ in range(repeats):
        for fn, out in ((first, times[0]), (second, times[1])):
            start = time.perf_counter()
            fn(*args)
            out.append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def run(n_tokens: int, repeats: int, configs=CONFIGS, seed: int = 0) -> list[dict]:
    rows = []
    for label, n_experts, k, d_model, d_ff in configs:
        torch.manual_seed(seed)
        swiglu = torch.nn.ModuleList(SwiGLU(d_model, d_ff) for _ in range(n_experts)).eval()
        identity = torch.nn.ModuleList(torch.nn.Identity() for _ in range(n_experts))
        x = torch.randn(n_tokens, d_model)
        gates, indices = top_k_gating(torch.randn(n_tokens, n_experts), k)
        for what, experts in (("dispatch + combine only", identity), ("whole layer", swiglu)):
            args = (x, gates, indices, experts)
            with torch.no_grad():
                if not torch.allclose(naive_dispatch(*args), sorted_dispatch(*args), atol=1e-5,
                                      rtol=1e-4):
                    raise SystemExit(f"{label}: sorted and naive dispatch disagree")
                naive_s, sorted_s = time_pair(naive_dispatch, sorted_dispatch, args, repeats)
            rows.append({"config": label, "measured": what, "tokens": n_tokens,
                         "naive_ms": 1e3 * naive_s, "sorted_ms": 1e3 * sorted_s,
                         "speedup": naive_s / sorted_s})
    return rows


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer tokens and repeats")
    p.add_argument("--tokens", type=int, default=None, help="tokens routed (default 4096)")
    p.add_argument("--repeats", type=int, default=None)
    p.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    args = p.parse_args(argv)
    print_command(__file__, argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    tokens = args.tokens or (512 if args.quick else 4096)
    repeats = args.repeats or (3 if args.quick else 7)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} thread(s); {tokens} tokens, median of {repeats}")
    rows = run(tokens, repeats)
    width = max(len(r["config"]) for r in rows)
    print(f"\n{'configuration'.ljust(width)}  {'measured':23s}  naive ms  sorted ms  "
          "naive / sorted")
    for r in rows:
        print(f"{r['config'].ljust(width)}  {r['measured']:23s}  {r['naive_ms']:8.2f}  "
              f"{r['sorted_ms']:9.2f}  {r['speedup']:13.2f}x")
    return rows


if __name__ == "__main__":
    main()
