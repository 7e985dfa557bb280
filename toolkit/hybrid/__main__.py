"""``python -m toolkit.hybrid``: train the three MQAR models once (cached) and print the table."""

from __future__ import annotations

import argparse
import sys

import torch

from toolkit.hybrid.experiment import MQARConfig, measure, results_table, trained_models


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(prog="python -m toolkit.hybrid", description=__doc__)
    parser.add_argument("--steps", type=int, default=MQARConfig.steps)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    cfg = MQARConfig(steps=args.steps)
    table = results_table(measure(trained_models(cfg), cfg))
    print(table)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
