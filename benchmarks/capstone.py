"""Capstone benchmark: recipes, KV-cache decoding, nanoGPT side by side, attention backends.

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

3. Side by side with nanoGPT (``--tables peer --peer PATH``). ``PATH`` is nanoGPT's
   ``model.py`` (github.com/karpathy/nanoGPT; fetch it yourself, it is not part of this
   project). nanoGPT's GPT, our classic recipe with nanoGPT's exact GELU (the same
   architecture: learned positions, LayerNorm, GELU MLP, MHA, biases, tied embeddings),
   the classic recipe as GPT-2 has it (tanh GELU) and our modern recipe
   (parameter-matched; ``--modern-ffn N`` adds it with SwiGLU width ``N``) train at
   4 layers, 4 heads, d 128, block 128, batch 16 on the same batches with the same
   optimiser, taking turns (:mod:`capstone_race`). Reported: tokens/s, the ratio to
   nanoGPT measured in the same windows, validation loss at equal steps, and the
   training seconds each model took to reach nanoGPT's final validation loss (at the
   evaluations, every ``--eval-every`` steps; default a quarter of the run). Our models
   are :class:`toolkit.models.FastGPT`; ``--with-reference`` adds the same recipes on
   the teaching :class:`toolkit.models.GPT`, the speed before the fast paths.

4. Attention backends (``--tables backends --device cuda``): the modern recipe, one
   initialisation, trained with each of ``--backends`` (default ``sdpa,triton``) on the
   same batches, taking turns: tokens/s, and training seconds until the validation
   loss first reaches ``--target-loss`` (default: the highest of the models' best
   losses, which all of them reach). bf16 autocast on a GPU (``--dtype``).

5. What each modern part costs (``--tables parts``): the modern recipe against copies
   with one part swapped for the classic one (LayerNorm, learned positions, a GELU
   MLP of ``4 d``, all heads for K/V), and the classic recipe with the exact GELU,
   taking turns on the same batches: tokens/s relative to the modern recipe.

6. Where the time goes (``--tables profile --peer PATH``): nanoGPT and our modern recipe
   (parameter-matched, as in 3., or with ``--modern-ffn`` as its SwiGLU width) each train
   ``--profile-rounds`` short turns of ``--profile-steps`` steps under
   ``torch.profiler``, taking turns; reported is each operator's self time per step for
   both, and their difference, largest first, with the totals of matrix products,
   attention and everything else.

Timings are wall-clock in this process. By default torch uses one thread
(``--threads 1``), which keeps timings stable on a shared machine; ``--threads 0``
leaves torch's default.

Usage::

    python benchmarks/capstone.py            # recipes and decoding (a few minutes, 2 cores)
    python benchmarks/capstone.py --quick    # smaller model, fewer steps (under a minute)
    python benchmarks/capstone.py --tables peer --peer /tmp/nanoGPT/model.py --steps 500
    python benchmarks/capstone.py --tables backends --device cuda --threads 0
    python benchmarks/capstone.py --tables profile --peer /tmp/nanoGPT/model.py
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import platform
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # capstone_race beside this file

from capstone_race import race  # noqa: E402
from tables import print_command, print_table  # noqa: E402

from toolkit.data import load_corpus  # noqa: E402
from toolkit.generate import greedy  # noqa: E402
from toolkit.models import (  # noqa: E402
    GPT,
    FastGPT,
    GPTConfig,
    count_parameters,
    parameter_matched_configs,
)
from toolkit.train import TrainConfig, train  # noqa: E402

PROMPT_LEN = 16


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
    p.add_argument("--tables", default="recipes,decoding",
                   help="comma list of: recipes, decoding, peer, backends, parts, profile")
    p.add_argument("--peer", default=None, help="nanoGPT's model.py, for --tables peer")
    p.add_argument("--with-reference", action="store_true",
                   help="peer table: add our recipes on the teaching code")
    p.add_argument("--backend", default="auto", help="our FastGPTs' attention_backend (peer)")
    p.add_argument("--backends", default="sdpa,triton", help="backends table: which to race")
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="bf16", help="backends table on a GPU: autocast dtype")
    p.add_argument("--target-loss", type=float, default=None,
                   help="backends table: seconds to reach this validation loss")
    p.add_argument("--window", type=int, default=5, help="steps per turn in a race")
    p.add_argument("--eval-every", type=int, default=None)
    p.add_argument("--profile-rounds", type=int, default=8, help="profile table: turns each")
    p.add_argument("--profile-steps", type=int, default=2, help="profile table: steps a turn")
    p.add_argument("--profile-rows", type=int, default=25, help="profile table: operators shown")
    p.add_argument("--modern-ffn", type=int, default=None,
                   help="peer and profile tables: also race (profile: use) the modern recipe "
                        "with this SwiGLU hidden size; 3 d is nanoGPT's multiply-adds per token")
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
        train(FastGPT(config), corpus.train, corpus.val, warm)
    rows, models = [], {}
    for name, config in (("classic", classic_cfg), ("modern", modern_cfg)):
        torch.manual_seed(args.seed)
        model = FastGPT(config)
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


def load_peer(path: str):
    """nanoGPT's ``model.py`` as a module, from wherever the user keeps it."""
    spec = importlib.util.spec_from_file_location("peer_model", path)
    if spec is None or not Path(path).is_file():
        raise SystemExit(f"--peer {path}: no such file; pass the path of nanoGPT's model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _race_table(title: str, results, models, baseline: str | None, details: dict,
                time_to_baseline: bool = False) -> None:
    """One row a model: tokens/s and their ratio to ``baseline``'s, validation losses, and
    (``time_to_baseline``) the training seconds each model took to first reach the
    baseline's final validation loss, at the race's evaluations: how fast a recipe gets as
    good as the baseline ends, where tokens/s only say how fast it computes."""
    steps = sorted({s for r in results.values() for s in r.val_step})
    shown = steps if len(steps) <= 4 else [steps[len(steps) // 2 - 1], steps[-1]]
    time_to_baseline = time_to_baseline and baseline is not None
    target = results[baseline].val_loss[-1] if time_to_baseline else None
    baseline_seconds = results[baseline].seconds_to(target) if time_to_baseline else None
    rows = []
    for name, r in results.items():
        ratio = (r.tokens_per_s / results[baseline].tokens_per_s) if baseline else float("nan")
        val = {s: loss for s, loss in zip(r.val_step, r.val_loss)}
        row = [name, details[name], f"{count_parameters(models[name]):,}",
               f"{r.tokens_per_s:,.0f}", "" if math.isnan(ratio) else f"{ratio:.2f}x",
               *(f"{val[s]:.3f}" for s in shown), f"{r.train_loss[-1]:.3f}"]
        if time_to_baseline:
            seconds = r.seconds_to(target)
            row.append("not reached" if seconds is None else
                       f"{seconds:.1f} s ({baseline_seconds / seconds:.2f}x)")
        rows.append(row)
    header = ["model", "components", "params", "train tok/s",
              f"x {baseline}" if baseline else "", *(f"val @{s}" for s in shown), "train loss"]
    if time_to_baseline:
        header.append(f"to {baseline}'s final val loss ({target:.3f})")
    print_table(title, header, rows)


def bench_peer(args, corpus) -> None:
    if not args.peer:
        raise SystemExit("--tables peer needs --peer PATH (nanoGPT's model.py)")
    peer = load_peer(args.peer)
    classic, modern = parameter_matched_configs(
        vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
        n_heads=args.n_heads, max_seq_len=args.block_size, attention_backend=args.backend,
    )
    torch.manual_seed(args.seed)
    peer_config = {  # in nanoGPT's own names
        "block_size": args.block_size, "vocab_size": corpus.vocab_size, "n_layer": args.n_layers,
        "n_head": args.n_heads, "n_embd": args.d_model, "dropout": 0.0, "bias": True,
    }
    models = {"nanoGPT": peer.GPT(peer.GPTConfig(**peer_config))}
    details = {"nanoGPT": "LN+GELU+MHA+learned pos (its model.py)"}
    # nanoGPT's MLP uses the exact GELU, GPT-2 (our classic recipe) the tanh approximation,
    # which costs more on a CPU: "classic" with mlp="gelu" is nanoGPT's architecture.
    recipes = [("classic", replace(classic, mlp="gelu")), ("classic, tanh GELU", classic),
               ("modern", modern)]
    if args.modern_ffn:
        recipes.append((f"modern, d_ff {args.modern_ffn}", replace(modern, d_ff=args.modern_ffn)))
    recipes = [(name, config, FastGPT) for name, config in recipes]
    if args.with_reference:
        recipes += [(f"{n} (reference)", c, GPT) for n, c, _ in recipes]
    for name, config, model_class in recipes:
        torch.manual_seed(args.seed)
        models[name] = model_class(config)
        gelu = "GELU(tanh)" if config.mlp_type == "gelu_tanh" else "GELU"
        parts = (f"LN+{gelu}+MHA+learned pos" if config.recipe == "classic" else
                 f"RMS+SwiGLU({config.ffn_hidden})+GQA({config.kv_heads} kv)+RoPE")
        how = config.attention_backend if model_class is FastGPT else "teaching GPT"
        details[name] = f"{parts}, {how}"
    eval_every = args.eval_every or max(1, args.steps // 4)
    results = race(models, corpus.train, corpus.val, steps=args.steps,
                   batch_size=args.batch_size, block_size=args.block_size, window=args.window,
                   eval_every=eval_every, seed=args.seed)
    _race_table(
        f"Side by side with nanoGPT's model.py: {args.steps} steps x {args.batch_size} x "
        f"{args.block_size} tokens, d_model={args.d_model}, n_layers={args.n_layers}, "
        f"n_heads={args.n_heads}, same batches, AdamW + warm-up/cosine + clip 1.0, "
        f"turns of {args.window} steps, {torch.get_num_threads()} thread(s)",
        results, models, "nanoGPT", details, time_to_baseline=True)


def bench_backends(args, corpus) -> None:
    device = torch.device(args.device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": None}[args.dtype]
    if device.type != "cuda":
        dtype = None  # autocast to bf16 on a CPU is neither fast nor what students run
    base = modern_config(args, corpus)
    torch.manual_seed(args.seed)
    state = GPT(base).state_dict()
    models, details = {}, {}
    for backend in args.backends.split(","):
        model = FastGPT(replace(base, attention_backend=backend)).to(device)
        model.load_state_dict(state)  # one initialisation for every backend
        models[backend], details[backend] = model, f"modern, {backend}"
    eval_every = args.eval_every or max(1, args.steps // 10)
    results = race(models, corpus.train, corpus.val, steps=args.steps,
                   batch_size=args.batch_size, block_size=args.block_size, window=args.window,
                   eval_every=eval_every, device=device, autocast_dtype=dtype, seed=args.seed)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "the CPU"
    _race_table(
        f"Attention backends on {name}: modern recipe, d_model={args.d_model}, "
        f"n_layers={args.n_layers}, n_heads={args.n_heads}, {args.steps} steps x "
        f"{args.batch_size} x {args.block_size} tokens, autocast {dtype}",
        results, models, args.backends.split(",")[0], details)
    target = args.target_loss
    if target is None:  # the highest of the models' best losses: every model reaches it
        target = max(min(r.val_loss) for r in results.values())
    rows = [[n, f"{target:.3f}", "not reached" if r.seconds_to(target) is None
             else f"{r.seconds_to(target):.1f} s"] for n, r in results.items()]
    print_table("Training time to a validation loss", ["backend", "val loss", "time"], rows)


def bench_parts(args, corpus) -> None:
    classic, modern = parameter_matched_configs(
        vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
        n_heads=args.n_heads, max_seq_len=args.block_size, attention_backend=args.backend,
    )
    variants = {
        "modern": (modern, "RMSNorm, SwiGLU, GQA, RoPE"),
        "LayerNorm": (replace(modern, norm="layernorm"), "RMSNorm -> LayerNorm"),
        "learned positions": (replace(modern, position="learned"), "RoPE -> learned"),
        "GELU MLP": (replace(modern, mlp="gelu", d_ff=4 * args.d_model), "SwiGLU -> GELU(4d)"),
        "MHA": (replace(modern, n_kv_heads=args.n_heads), "GQA -> all heads for K/V"),
        "classic": (replace(classic, mlp="gelu"), "LayerNorm, GELU, MHA, learned"),
    }
    models, details = {}, {}
    for name, (config, detail) in variants.items():
        torch.manual_seed(args.seed)
        models[name], details[name] = FastGPT(config), f"{detail}, {config.attention_backend}"
    eval_every = args.eval_every or max(1, args.steps // 4)
    results = race(models, corpus.train, corpus.val, steps=args.steps,
                   batch_size=args.batch_size, block_size=args.block_size, window=args.window,
                   eval_every=eval_every, seed=args.seed)
    _race_table(f"One part swapped at a time: {args.steps} steps x {args.batch_size} x "
                f"{args.block_size} tokens, d_model={args.d_model}, n_layers={args.n_layers}, "
                f"{torch.get_num_threads()} thread(s)", results, models, "modern", details)


def _peer_and_modern(args, corpus) -> dict[str, torch.nn.Module]:
    """nanoGPT's GPT and our modern FastGPT, parameter-matched as in the peer table (or
    with ``--modern-ffn`` as its SwiGLU hidden size)."""
    peer = load_peer(args.peer)
    _, modern = parameter_matched_configs(
        vocab_size=corpus.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
        n_heads=args.n_heads, max_seq_len=args.block_size, attention_backend=args.backend,
    )
    torch.manual_seed(args.seed)
    peer_config = {"block_size": args.block_size, "vocab_size": corpus.vocab_size,
                   "n_layer": args.n_layers, "n_head": args.n_heads, "n_embd": args.d_model,
                   "dropout": 0.0, "bias": True}
    models = {"nanoGPT": peer.GPT(peer.GPTConfig(**peer_config))}
    if args.modern_ffn:
        modern = replace(modern, d_ff=args.modern_ffn)
    torch.manual_seed(args.seed)
    models["modern"] = FastGPT(modern)
    return models


#: The operators of each attention backend a CPU profile shows: PyTorch's fused kernel,
#: and the blocked backend's products, softmax and its autograd Function's own time.
_ATTENTION_OPS = ("aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::_softmax_backward_data",
                  "_BlockedCausalAttention", "_BlockedCausalAttentionBackward")


def _category(op: str) -> str:
    if op in ("aten::mm", "aten::addmm", "aten::addmm_"):
        return "matrix products (mm, addmm, addmm_)"
    if "scaled_dot_product" in op or op in _ATTENTION_OPS:
        return "attention (SDPA, or the blocked backend's bmm, softmax and Function)"
    return "everything else (norms, activations, RoPE, adds, copies, optimiser, overhead)"


def bench_profile(args, corpus) -> None:
    """Operator self time per training step, nanoGPT against the modern recipe."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    from toolkit.data import get_batch
    from toolkit.train import configure_optimizer

    if not args.peer:
        raise SystemExit("--tables profile needs --peer PATH (nanoGPT's model.py)")
    models = _peer_and_modern(args, corpus)
    optimisers = {name: configure_optimizer(m, 3e-3, 0.1) for name, m in models.items()}
    generator = torch.Generator().manual_seed(args.seed)
    per_turn = args.profile_steps

    def steps(name: str, n: int) -> None:
        model, opt = models[name].train(), optimisers[name]
        for _ in range(n):  # the race's step: AdamW, clipping at 1.0
            x, y = get_batch(corpus.train, args.batch_size, args.block_size, generator)
            opt.zero_grad(set_to_none=True)
            _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

    for name in models:
        steps(name, 3)  # one-off costs out of the profile
    self_us = {name: Counter() for name in models}
    for turn in range(args.profile_rounds):
        order = list(models) if turn % 2 == 0 else list(models)[::-1]
        for name in order:
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                steps(name, per_turn)
            for event in prof.key_averages():
                self_us[name][event.key] += event.self_cpu_time_total
    n_steps = args.profile_rounds * per_turn
    ms = {name: {op: us / 1e3 / n_steps for op, us in c.items()} for name, c in self_us.items()}
    nano, ours = ms["nanoGPT"], ms["modern"]
    ops = sorted(set(nano) | set(ours), key=lambda op: -abs(ours.get(op, 0) - nano.get(op, 0)))
    rows = [[op[:60], f"{nano.get(op, 0):.2f}", f"{ours.get(op, 0):.2f}",
             f"{ours.get(op, 0) - nano.get(op, 0):+.2f}"] for op in ops[:args.profile_rows]]
    categories = Counter(), Counter()
    for side, table in zip(categories, (nano, ours)):
        for op, value in table.items():
            side[_category(op)] += value
    total = sum(nano.values()), sum(ours.values())
    rows += [[f"= {cat}", f"{categories[0][cat]:.2f}", f"{categories[1][cat]:.2f}",
              f"{categories[1][cat] - categories[0][cat]:+.2f}"]
             for cat in sorted(set(categories[0]) | set(categories[1]))]
    rows.append(["= all (self time)", f"{total[0]:.2f}", f"{total[1]:.2f}",
                 f"{total[1] - total[0]:+.2f} ({total[1] / total[0] - 1:+.1%})"])
    print_table(
        f"Operator self time per training step (ms), nanoGPT against the modern recipe "
        f"(SwiGLU {models['modern'].config.ffn_hidden}): "
        f"{args.profile_rounds} turns of {per_turn} steps each under torch.profiler, taking "
        f"turns, batch {args.batch_size} x {args.block_size}, d_model={args.d_model}, "
        f"n_layers={args.n_layers}, {torch.get_num_threads()} thread(s)",
        ["operator", "nanoGPT", "modern", "modern - nanoGPT"], rows)


def modern_config(args, corpus) -> GPTConfig:
    """The modern recipe at the benchmark's size."""
    return GPTConfig.modern(vocab_size=corpus.vocab_size, d_model=args.d_model,
                            n_layers=args.n_layers, n_heads=args.n_heads,
                            max_seq_len=args.block_size)


def main(argv=None) -> None:
    args = parse_args(argv)
    print_command(__file__, argv)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    corpus = load_corpus(args.corpus)
    print(f"python {platform.python_version()}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} thread(s), corpus {args.corpus or 'stdlib'}: "
          f"{len(corpus.train):,} train / {len(corpus.val):,} val tokens (bytes)")
    tables = args.tables.split(",")
    if "recipes" in tables or "decoding" in tables:
        models = bench_training(args, corpus)
        if "decoding" in tables:
            bench_decoding(args, corpus, models)
    if "peer" in tables:
        bench_peer(args, corpus)
    if "backends" in tables:
        bench_backends(args, corpus)
    if "parts" in tables:
        bench_parts(args, corpus)
    if "profile" in tables:
        bench_profile(args, corpus)


if __name__ == "__main__":
    sys.exit(main())
