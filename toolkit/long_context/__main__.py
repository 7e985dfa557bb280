"""``python -m toolkit.long_context``: train the four models once (cached) and print the table."""

from __future__ import annotations

import argparse
import sys

import torch

from toolkit.long_context.experiment import (
    ExperimentConfig,
    measure,
    results_table,
    trained_models,
)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m toolkit.long_context", description=__doc__)
    parser.add_argument("--train-len", type=int, default=ExperimentConfig.train_len)
    parser.add_argument("--steps", type=int, default=ExperimentConfig.steps)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = ExperimentConfig(train_len=args.train_len, steps=args.steps)
    table = results_table(measure(trained_models(cfg), cfg.train_len))
    print(table)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
