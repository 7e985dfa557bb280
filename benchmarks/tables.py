"""What every benchmark prints: the command that reproduces its run, then its tables (a
title, then right-aligned columns)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path


def print_command(script: str, argv: list[str] | None = None) -> None:
    """``command: python benchmarks/NAME.py ARGS``, the first line of a benchmark's output:
    ``script`` is the benchmark's ``__file__``, ``argv`` its arguments (default: this
    process's)."""
    args = sys.argv[1:] if argv is None else list(argv)
    print("command: " + shlex.join(["python", f"benchmarks/{Path(script).name}", *args]))


def print_table(title: str, header: list[str], rows: list[list]) -> None:
    cells = [[str(h) for h in header]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    print(f"\n{title}")
    print("  ".join(h.rjust(w) for h, w in zip(cells[0], widths)))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print("  ".join(c.rjust(w) for c, w in zip(row, widths)))
