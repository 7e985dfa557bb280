"""Preparing made submissions in parallel trains each distinct notebook once.

``write_submissions`` runs an assignment's ``prepare`` script for several submissions at
a time; :func:`autograder.prepare_checkpoint.prepare_checkpoint` caches checkpoints by
the cells training uses, and a lock per key makes overlapping runs of one key wait for
the first instead of training again. Real processes, started together.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from autograder.prepare_checkpoint import assignment_cells, cache_key

TRAIN_SECONDS = 1.5  # long enough that runs started together overlap

SCRIPT = textwrap.dedent(f"""
    import sys, time
    from pathlib import Path
    from autograder.prepare_checkpoint import prepare_checkpoint

    def train_and_save(namespace):
        time.sleep({TRAIN_SECONDS})  # "training"
        Path("model.bin").write_text(str(namespace["ANSWER"]))
        return 0.5

    sys.exit(prepare_checkpoint(
        sys.argv[1], script=Path(__file__), notebook="work.ipynb", checkpoint="model.bin",
        name="toy", not_for_training={{"unused"}}, train_and_save=train_and_save, steps=1))
""")


def _notebook(answer: int, unused: str) -> dict:
    def cell(grade_id, source, **nbgrader):
        meta = {"nbgrader": {"grade_id": grade_id, **nbgrader}}
        return {"cell_type": "code", "metadata": meta, "source": source, "outputs": [],
                "execution_count": None}

    return {"cells": [cell("answer", f"ANSWER = {answer}", solution=True),
                      cell("unused", unused, solution=True),
                      cell("test", "assert False", grade=True, points=1)],
            "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def _prepare_together(tmp_path: Path, notebooks: dict[str, dict]) -> dict[str, str]:
    script = tmp_path / "prepare.py"
    script.write_text(SCRIPT)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "AUTOGRADER_PREPARE_SCRATCH": str(scratch)}
    runs = {}
    for student, nb in notebooks.items():
        folder = tmp_path / student
        folder.mkdir()
        (folder / "work.ipynb").write_text(json.dumps(nb))
        runs[student] = subprocess.Popen([sys.executable, str(script), student], cwd=folder,
                                         env=env, stdout=subprocess.PIPE, text=True)
    out = {}
    for student, run in runs.items():
        stdout, _ = run.communicate(timeout=120)
        assert run.returncode == 0, stdout
        out[student] = stdout
        assert (tmp_path / student / "model.bin").is_file(), student
    return out


def test_overlapping_runs_of_one_key_train_once(tmp_path):
    # Same training cells, different cells that training never uses: one key.
    notebooks = {"reference": _notebook(42, "x = 1"), "mutant": _notebook(42, "x = 2"),
                 "other": _notebook(7, "x = 1")}
    out = _prepare_together(tmp_path, notebooks)
    trained = sorted(s for s, text in out.items() if "trained" in text)
    cached = [s for s, text in out.items() if "from the cache" in text]
    assert len(cached) == 1 and cached[0] in ("reference", "mutant"), out
    assert "other" in trained and len(trained) == 2, out
    assert (tmp_path / "reference" / "model.bin").read_text() == "42"
    assert (tmp_path / "mutant" / "model.bin").read_text() == "42"
    assert (tmp_path / "other" / "model.bin").read_text() == "7"


def test_key_ignores_only_the_cells_training_never_calls(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass")
    key = lambda nb: cache_key(script, assignment_cells(nb), {"unused"})  # noqa: E731
    assert key(_notebook(1, "a")) == key(_notebook(1, "b"))
    assert key(_notebook(1, "a")) != key(_notebook(2, "a"))
    # test cells are never executed, so they are not part of the key either
    assert [grade_id for grade_id, _ in assignment_cells(_notebook(1, "a"))] == ["answer",
                                                                                  "unused"]
