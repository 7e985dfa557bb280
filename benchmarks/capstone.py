"""Capstone benchmark: classic vs modern recipe, and decoding with vs without a KV cache.

1. Training. :func:`toolkit.models.parameter_matched_configs` builds a classic
   (GPT-2) and a modern (LLaMA-style) config of about equal parameter count; both
   are trained for the same number of steps, on the same batches, with the same
   optimiser settings (:class:`toolkit.train.TrainConfig`). Reported: parameters,
   training tokens/s, final training loss and held-out validation loss.
   At this toy scale a few hundred steps say little about which recipe is
   "better"; the point is a fair, reproducible comparison students can extend.

2. Decoding. Greedy decoding of ``--new-tokens`` (512) tokens from a 16-token
   prompt, with the KV cache (one token per step) and without it (the whole
   sequence re-run every step). Both must produce the same tokens; reported are
   tokens/s and the ratio cached / uncached (target: >= 5x on CPU).

Timings are wall-clock in this process. By default torch uses one thread
(``--threads 1``), which keeps timings stable on a shared machine; ``--threads 0``
leaves torch's default.

Usage::

    python benchmarks/capstone.py            # full run (a few minutes on 2 cores)
    python benchmarks/capstone.py --quick    # smaller model, fewer steps (under a minute)
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import torch

from toolkit.data import load_corpus
from toolkit.generate import greedy
from toolkit.models import GPT, count_parameters, parameter_matched_configs
from toolkit.train import TrainConfig, train

PROMPT_LEN = 16


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(cells[0], widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small model, few steps")
    p.add_argument("--steps", type=int, default=None)
    p.add_argument("--d-model", type=int, default=None)
    p.add_argument("--n-layers", type=int, default=None)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--block-size", type=int, default=None)
    p.add_argument("--new-tokens", type=int, default=512)
    p.add_argument("--corpus", default=None, help="text file (default: stdlib corpus)")
    p.add_argument("--threads", type=int, default=1, help="torch threads; 0 = torch default")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    quick = {"steps": 40, "d_model": 64, "n_layers": 2, "block_size": 64}
    full = {"steps": 200, "d_model": 128, "n_layers": 4, "block_size": 128}
    for key, value in (quick if args.quick else full).items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def bench_training(args, corpus) -> dict[str, GPT]:
    classic_cfg, modern_cfg = parameter_matched_configs(
        vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
        n_heads=args.n_heads, max_seq_len=max(args.block_size, PROMPT_LEN + args.new_tokens),
    )
    cfg = TrainConfig(max_steps=args.steps, batch_size=args.batch_size,
                      block_size=args.block_size, eval_every=max(1, args.steps // 4),
                      eval_batches=8, seed=args.seed, progress=False)
    # Warm-up: the first steps of a process pay one-off costs; keep them out of the timing.
    warm = TrainConfig(max_steps=3, batch_size=args.batch_size, block_size=args.block_size,
                       eval_every=3, eval_batches=1, progress=False)
    for config in (classic_cfg, modern_cfg):
        train(GPT(config), corpus.train, corpus.val, warm)
    rows, models = [], {}
    for name, config in (("classic", classic_cfg), ("modern", modern_cfg)):
        torch.manual_seed(args.seed)
        model = GPT(config)
        history = train(model, corpus.train, corpus.val, cfg)
        models[name] = model
        detail = (f"LN+GELU(4d={config.ffn_hidden})+MHA+learned pos" if name == "classic" else
                  f"RMS+SwiGLU({config.ffn_hidden})+GQA({config.kv_heads} kv)+RoPE")
        rows.append([name, detail, f"{count_parameters(model):,}",
                     f"{history.tokens_per_s:,.0f}", f"{history.train_loss[-1]:.3f}",
                     f"{history.val_loss[-1]:.3f}"])
    print_table(
        f"Training: {args.steps} steps x {args.batch_size} x {args.block_size} tokens, "
        f"d_model={args.d_model}, n_layers={args.n_layers}, n_heads={args.n_heads}, "
        "AdamW + warm-up/cosine + clip 1.0",
        ["recipe", "components", "params", "train tok/s", "train loss", "val loss"],
        rows,
    )
    return models


def _time(fn) -> tuple[float, torch.Tensor]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def bench_decoding(args, corpus, models: dict[str, GPT]) -> None:
    prompt = corpus.val[:PROMPT_LEN][None]
    rows = []
    for name, model in models.items():
        greedy(model, prompt, 8)  # warm-up
        t_cache, with_cache = _time(lambda m=model: greedy(m, prompt, args.new_tokens))
        t_full, without = _time(lambda m=model: greedy(m, prompt, args.new_tokens, use_cache=False))
        same = torch.equal(with_cache, without)
        n = args.new_tokens
        rows.append([name, f"{n / t_full:,.0f}", f"{n / t_cache:,.0f}",
                     f"{t_full / t_cache:.1f}x", "yes" if same else "NO"])
    print_table(
        f"Greedy decoding: {args.new_tokens} new tokens after a {PROMPT_LEN}-token prompt, "
        "batch 1",
        ["recipe", "no cache tok/s", "KV cache tok/s", "speed-up", "same tokens"],
        rows,
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus)
    print(f"python {platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), corpus {args.corpus or 'stdlib'}: "
          f"{len(corpus.train):,} train / {len(corpus.val):,} val tokens (bytes)")
    models = bench_training(args, corpus)
    bench_decoding(args, corpus, models)


if __name__ == "__main__":
    sys.exit(main())
