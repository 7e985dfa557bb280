"""Smoke test for benchmarks/capstone.py's table of modern parts: it runs on a tiny model
and lists every variant (no timing is asserted; the benchmark is run by hand)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_parts_table_races_every_variant(capsys, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # capstone.py imports capstone_race
    spec = importlib.util.spec_from_file_location("benchmark_capstone", BENCHMARKS / "capstone.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "benchmark_capstone", module)
    spec.loader.exec_module(module)
    module.main(["--tables", "parts", "--steps", "4", "--d-model", "32", "--n-layers", "1",
                 "--n-heads", "2", "--batch-size", "2", "--block-size", "16",
                 "--eval-every", "2", "--window", "2"])
    out = capsys.readouterr().out
    assert "One part swapped at a time" in out
    for name in ("modern", "LayerNorm", "learned positions", "GELU MLP", "MHA", "classic"):
        assert any(line.strip().startswith(name) for line in out.splitlines()), name
    assert "1.00x" in out  # the modern recipe against itself
