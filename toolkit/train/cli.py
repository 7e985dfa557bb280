"""Command line: train the capstone mini-GPT on a text file, save it, sample from it.

    python -m toolkit.train --recipe modern --steps 200 --corpus FILE --out ckpt.safetensors
"""

from __future__ import annotations

import argparse

import torch

from toolkit.models import FastGPT, GPTConfig
from toolkit.train.checkpoint import save_checkpoint
from toolkit.train.loop import TrainConfig, TrainHistory, train


def main(argv: list[str] | None = None) -> TrainHistory:
    """Command-line entry point: ``python -m toolkit.train --help``."""
    from toolkit.data import ByteTokenizer, load_corpus
    from toolkit.generate import generate

    parser = argparse.ArgumentParser(
        prog="python -m toolkit.train", description="Train the capstone mini-GPT on a text file."
    )
    parser.add_argument("--recipe", choices=("classic", "modern"), default="modern")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--corpus", default=None, help="UTF-8 text file (default: stdlib corpus)")
    parser.add_argument("--out", default=None, help="checkpoint path (.safetensors)")
    parser.add_argument("--d-model", type=int, default=128)
    parser.add_argument("--n-layers", type=int, default=4)
    parser.add_argument("--n-heads", type=int, default=4)
    parser.add_argument("--n-kv-heads", type=int, default=None)
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--eval-every", type=int, default=50)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sample", type=int, default=200, help="tokens to sample after training")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)

    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    corpus = load_corpus(args.corpus, tokenizer="byte")
    build = GPTConfig.classic if args.recipe == "classic" else GPTConfig.modern
    kwargs = {} if args.n_kv_heads is None else {"n_kv_heads": args.n_kv_heads}
    config = build(
        vocab_size=ByteTokenizer.vocab_size, d_model=args.d_model, n_layers=args.n_layers,
        n_heads=args.n_heads, max_seq_len=max(args.block_size, args.sample + 1), **kwargs,
    )
    model = FastGPT(config)  # GPT on fused kernels: same weights, faster steps
    cfg = TrainConfig(
        max_steps=args.steps, batch_size=args.batch_size, block_size=args.block_size,
        max_lr=args.lr, eval_every=args.eval_every, seed=args.seed,
        progress=not args.no_progress,
    )
    history = train(model, corpus.train, corpus.val, cfg)
    print(f"recipe={args.recipe} corpus={corpus.source} steps={args.steps} "
          f"train_loss={history.train_loss[-1]:.3f} val_loss={history.val_loss[-1]:.3f} "
          f"tokens/s={history.tokens_per_s:.0f}")
    if args.out:
        save_checkpoint(model, config, args.out)
        print(f"saved {args.out}")
    if args.sample > 0:
        prompt = torch.tensor([corpus.tokenizer.encode("\n")])
        out = generate(model, prompt, args.sample, temperature=0.8, top_k=40,
                       generator=torch.Generator().manual_seed(args.seed))
        print(corpus.tokenizer.decode(out[0, 1:]))
    return history
