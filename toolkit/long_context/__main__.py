"""``python -m toolkit.long_context``: train the four models and measure them, once (both
cached), and print the table."""

from __future__ import annotations

import argparse
import sys

import torch

from toolkit.long_context.experiment import (
    ExperimentConfig,
    cached_measurement,
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
    table = results_table(cached_measurement(trained_models(cfg), cfg))
    print(table)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
