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


PEER = '''
from dataclasses import dataclass

import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    block_size: int
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    dropout: float
    bias: bool


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.wte = nn.Embedding(config.vocab_size, config.n_embd)
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size)

    def forward(self, idx, targets=None):
        logits = self.lm_head(self.wte(idx))
        return logits, F.cross_entropy(logits.flatten(0, 1), targets.flatten())
'''


def test_profile_table_lists_operators_and_totals(capsys, monkeypatch, tmp_path):
    """A stand-in for nanoGPT's model.py: the table names operators of both models and
    ends with the totals by kind (no timing is asserted)."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_capstone", BENCHMARKS / "capstone.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "benchmark_capstone", module)
    spec.loader.exec_module(module)
    (tmp_path / "model.py").write_text(PEER)
    module.main(["--tables", "profile", "--peer", str(tmp_path / "model.py"), "--d-model", "32",
                 "--n-layers", "1", "--n-heads", "2", "--batch-size", "2", "--block-size", "16",
                 "--profile-rounds", "2", "--profile-steps", "1", "--modern-ffn", "48"])
    out = capsys.readouterr().out
    assert "Operator self time per training step" in out
    assert "modern recipe (SwiGLU 48)" in out  # --modern-ffn sets its width
    assert out.startswith("command: python benchmarks/capstone.py --tables profile --peer ")
    assert "aten::mm" in out  # both models multiply matrices
    for total in ("= matrix products", "= attention", "= all (self time)"):
        assert total in out, total


def test_peer_table_gives_the_time_to_the_baselines_final_loss(capsys, monkeypatch):
    """The race table's last column: the training seconds at a model's first evaluation
    at or below the baseline's final validation loss, and the baseline's own seconds over
    them; a model that never gets there says so."""
    import torch

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("benchmark_capstone", BENCHMARKS / "capstone.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "benchmark_capstone", module)
    spec.loader.exec_module(module)
    from capstone_race import RaceResult

    def result(losses, seconds):
        return RaceResult(train_seconds=seconds[-1], steps=20, tokens=2000, train_loss=[1.0],
                          val_step=[10, 20], val_loss=losses, val_seconds=seconds)

    results = {"nanoGPT": result([2.0, 1.5], [5.0, 10.0]),
               "modern": result([1.4, 1.0], [8.0, 16.0]),  # there at its first evaluation
               "slow": result([2.5, 1.8], [4.0, 8.0])}
    models = {name: torch.nn.Linear(2, 2) for name in results}
    module._race_table("race", results, models, "nanoGPT", dict.fromkeys(results, ""),
                       time_to_baseline=True)
    out = capsys.readouterr().out
    assert "to nanoGPT's final val loss (1.500)" in out
    rows = {line.split()[0]: line for line in out.splitlines()[2:] if line.strip()}
    assert rows["nanoGPT"].endswith("10.0 s (1.00x)")
    assert rows["modern"].endswith("8.0 s (1.25x)")
    assert rows["slow"].endswith("not reached")
