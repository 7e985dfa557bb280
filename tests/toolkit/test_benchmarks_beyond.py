"""Smoke tests for benchmarks/moe.py, decoding.py and attention.py's CPU backends: they
import and run on tiny sizes (no timing is asserted; the benchmarks are run by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _load(name: str):
    if str(BENCHMARKS) not in sys.path:  # as `python benchmarks/NAME.py` has it (tables.py)
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(f"benchmark_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_moe_benchmark_runs():
    rows = _load("moe").run(n_tokens=32, repeats=1, configs=[("tiny", 4, 2, 8, 8)])
    assert rows[0]["config"] == "tiny" and rows[0]["speedup"] > 0


def test_decoding_benchmark_runs_and_states_behave():
    results = _load("decoding").run([8, 32], d_model=32, n_heads=4, n_layers=1, steps=1)
    attention, mamba = results["attention + KV cache"], results["Mamba"]
    assert attention[32][1] == 4 * attention[8][1]  # the KV cache grows with the context
    assert mamba[8][1] == mamba[32][1]  # the SSM state does not


def test_attention_cpu_backends_table_runs(capsys):
    """``benchmarks/attention.py --cpu-backends --quick``: the command line, then a row per
    length with both backends' times (no timing is asserted)."""
    _load("attention").main(["--cpu-backends", "--quick"])
    out = capsys.readouterr().out
    assert out.startswith("command: python benchmarks/attention.py --cpu-backends --quick")
    assert "blocked against sdpa" in out
    rows = [line.split() for line in out.splitlines() if line.strip().startswith("32 ")]
    assert [row[2] for row in rows] == ["64", "128"]  # d_head 32, H/H_kv 4/2, T
    assert all(row[6].endswith("x") and row[9].endswith("x") for row in rows)
