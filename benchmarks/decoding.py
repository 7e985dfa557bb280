"""Per-token generation cost: attention with a KV cache vs a Mamba SSM vs RWKV.

For each context length (default 1k, 4k and 16k tokens) the script builds the
token-mixing layers of a small model three ways (the feed-forward layers would cost
the same in all three, so they are left out):

* **attention**: ``n_layers`` multi-head attention layers (``q/k/v/o`` projections of
  :class:`toolkit.gqa.GroupedQueryAttention`) over a KV cache holding ``T`` tokens,
  pre-allocated so that a step writes one row and reads ``T + 1``;
* **Mamba**: ``n_layers`` :class:`toolkit.ssm.MambaMixer`, stepped with
  :meth:`~toolkit.ssm.MambaMixer.step` from a :class:`~toolkit.ssm.MambaCache`;
* **RWKV**: ``n_layers`` :class:`toolkit.rwkv.RwkvTimeMixing`, stepped with its
  ``(last x, (a, b, p))`` state.

The caches are filled with random values of the right shape (a step's cost depends on
the cache's size, not on its contents), then one new token is generated ``--steps``
times; reported are the median time per token and the bytes of state each model
holds for the sequence (the KV cache, or the constant-size recurrent state). Timings
are wall-clock in this process, one torch thread by default (``--threads``).

Usage::

    python benchmarks/decoding.py                 # 1k, 4k, 16k; about a minute on 2 cores
    python benchmarks/decoding.py --lengths 1024 4096 16384 65536
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from tables import print_command

from toolkit.attention import scaled_dot_product_attention
from toolkit.gqa import GroupedQueryAttention
from toolkit.rwkv import RwkvTimeMixing
from toolkit.ssm import MambaMixer


class CachedAttention:
    """``n_layers`` attention layers over a pre-allocated KV cache of ``capacity`` tokens."""

    def __init__(self, d_model: int, n_heads: int, n_layers: int, context: int, capacity: int):
        self.layers = [GroupedQueryAttention(d_model, n_heads, n_heads).eval()
                       for _ in range(n_layers)]
        self.n_heads, self.d_head = n_heads, d_model // n_heads
        shape = (1, n_heads, capacity, self.d_head)
        self.keys = [torch.randn(shape) for _ in range(n_layers)]
        self.values = [torch.randn(shape) for _ in range(n_layers)]
        self.context = context  # tokens in the cache before the step

    def nbytes(self) -> int:  # what the sequence holds: K and V of `context` tokens per layer
        return sum(2 * self.n_heads * self.d_head * self.context * t.element_size()
                   for t in self.keys)

    def step(self, x: torch.Tensor) -> torch.Tensor:  # x: (1, d_model)
        T = self.context
        shape = (1, self.n_heads, 1, self.d_head)
        for layer, K, V in zip(self.layers, self.keys, self.values):
            q = layer.q_proj(x).view(shape)
            K[:, :, T:T + 1] = layer.k_proj(x).view(shape)  # write the new token's key, value
            V[:, :, T:T + 1] = layer.v_proj(x).view(shape)
            out = scaled_dot_product_attention(q, K[:, :, :T + 1], V[:, :, :T + 1])
            x = layer.o_proj(out.reshape(1, -1))
        return x


class SteppedMamba:
    def __init__(self, d_model: int, n_layers: int):
        self.layers = [MambaMixer(d_model).eval() for _ in range(n_layers)]
        self.caches = [m.empty_cache(1) for m in self.layers]
        for cache in self.caches:
            cache.conv_state.normal_()
            cache.ssm_state.normal_()

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.caches)

    def step(self, x: torch.Tensor) -> torch.Tensor:
        for i, layer in enumerate(self.layers):
            x, self.caches[i] = layer.step(x, self.caches[i])
        return x


class SteppedRwkv:
    def __init__(self, d_model: int, n_layers: int):
        self.layers = [RwkvTimeMixing(d_model, i, n_layers).eval() for i in range(n_layers)]
        self.states = [(torch.randn(1, d_model), (torch.randn(1, d_model),
                                                  torch.rand(1, d_model) + 1,
                                                  torch.randn(1, d_model)))
                       for _ in range(n_layers)]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for last, abp in self.states for t in (last, *abp))

    def step(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, None]  # (1, 1, d_model)
        for i, layer in enumerate(self.layers):
            x, self.states[i] = layer(x, self.states[i])
        return x[:, 0]


def time_per_token(model, d_model: int, steps: int) -> float:
    x = torch.randn(1, d_model)
    model.step(x)  # warm-up
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        model.step(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run(lengths, d_model: int, n_heads: int, n_layers: int, steps: int, seed: int = 0):
    """``{kind: {T: (seconds per token, state bytes)}}``, the format the widget draws."""
    results = {"attention + KV cache": {}, "Mamba": {}, "RWKV": {}}
    with torch.no_grad():
        for T in lengths:
            torch.manual_seed(seed)
            models = {
                "attention + KV cache": CachedAttention(d_model, n_heads, n_layers, T, T + 1),
                "Mamba": SteppedMamba(d_model, n_layers),
                "RWKV": SteppedRwkv(d_model, n_layers),
            }
            for kind, model in models.items():
                results[kind][T] = (time_per_token(model, d_model, steps), model.nbytes())
            del models
    return results


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--lengths", type=int, nargs="+", default=[1024, 4096, 16384])
    p.add_argument("--d-model", type=int, default=1024)
    p.add_argument("--n-heads", type=int, default=16)
    p.add_argument("--n-layers", type=int, default=4)
    p.add_argument("--steps", type=int, default=20, help="timed tokens per configuration")
    p.add_argument("--threads", type=int, default=1, help="torch threads (0 = torch's default)")
    args = p.parse_args(argv)
    print_command(__file__, argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, "
          f"{torch.get_num_threads()} thread(s); d_model {args.d_model}, {args.n_layers} "
          f"layers, fp32, batch 1, median of {args.steps} tokens")
    results = run(args.lengths, args.d_model, args.n_heads, args.n_layers, args.steps)
    print(f"\n{'model':22s}" + "".join(f"{f'T={T}: ms/token, state':>30s}" for T in args.lengths))
    for kind, row in results.items():
        cells = "".join(f"{1e3 * s:16.2f} {b / 2**20:9.2f} MiB" for s, b in row.values())
        print(f"{kind:22s}{cells}")
    return results


if __name__ == "__main__":
    main()
