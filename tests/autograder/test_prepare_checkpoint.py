"""Preparing made submissions in parallel trains each distinct notebook once.

``write_submissions`` runs an assignment's ``prepare`` script for several submissions at
a time; :func:`autograder.authoring.prepare_checkpoint.prepare_checkpoint` caches checkpoints by
the cells training uses, and a lock per key makes overlapping runs of one key wait for
the first instead of training again. Real processes, started together.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autograder.authoring.prepare_checkpoint import assignment_cells, cache_key

TRAIN_SECONDS = 1.5  # long enough that runs started together overlap

SCRIPT = textwrap.dedent(f"""
    import sys, time
    from pathlib import Path
    from autograder.authoring.prepare_checkpoint import prepare_checkpoint

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


def _prepare_together(tmp_path: Path, notebooks: dict[str, dict],
                      suffix: str = "") -> dict[str, str]:
    """Prepare ``notebooks`` at once, each in ``tmp_path/<student><suffix>``, sharing one
    cache; returns each run's output."""
    script = tmp_path / "prepare.py"
    script.write_text(SCRIPT)
    scratch = tmp_path / "scratch"
    scratch.mkdir(exist_ok=True)
    env = {**os.environ, "AUTOGRADER_PREPARE_SCRATCH": str(scratch)}
    runs = {}
    for student, nb in notebooks.items():
        folder = tmp_path / f"{student}{suffix}"
        folder.mkdir()
        (folder / "work.ipynb").write_text(json.dumps(nb))
        runs[student] = subprocess.Popen([sys.executable, str(script), student], cwd=folder,
                                         env=env, stdout=subprocess.PIPE, text=True)
    out = {}
    for student, run in runs.items():
        stdout, _ = run.communicate(timeout=120)
        assert run.returncode == 0, stdout
        out[student] = stdout
        assert (tmp_path / f"{student}{suffix}" / "model.bin").is_file(), student
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


def test_a_second_call_trains_nothing(tmp_path):
    notebooks = {"reference": _notebook(42, "x = 1"), "other": _notebook(7, "x = 1")}
    first = _prepare_together(tmp_path, notebooks)
    assert all("trained" in text for text in first.values()), first
    second = _prepare_together(tmp_path, notebooks, suffix="-again")
    assert all("from the cache" in text for text in second.values()), second
    assert (tmp_path / "reference-again" / "model.bin").read_text() == "42"
    assert (tmp_path / "other-again" / "model.bin").read_text() == "7"
    cached = sorted(p.name for p in (tmp_path / "scratch").glob("toy-*.bin"))
    assert len(cached) == 2, cached


def _save_answer(namespace):
    """The toy training: the checkpoint is the notebook's ANSWER."""
    Path("model.bin").write_text(str(namespace["ANSWER"]))
    return 0.5


def _prepare_here(tmp_path, monkeypatch, student, cache, train_and_save=_save_answer,
                  **options) -> Path:
    """``prepare_checkpoint`` in this process for a notebook with ANSWER = 42, in
    ``tmp_path/<student>``, sharing ``cache``; returns the submission's folder."""
    from autograder.authoring.prepare_checkpoint import prepare_checkpoint

    folder = tmp_path / student
    folder.mkdir()
    (folder / "work.ipynb").write_text(json.dumps(_notebook(42, "x = 1")))
    monkeypatch.chdir(folder)
    monkeypatch.setenv("AUTOGRADER_PREPARE_SCRATCH", str(cache))
    assert prepare_checkpoint(
        student, script=Path(__file__), notebook="work.ipynb", checkpoint="model.bin",
        name="toy", not_for_training=set(), train_and_save=train_and_save, steps=1,
        **options) == 0
    return folder


def test_a_copy_cut_short_leaves_nothing_to_reuse(tmp_path, monkeypatch):
    from autograder.authoring import prepare_checkpoint as pc

    cache = tmp_path / "cache"
    cache.mkdir()

    def copy_cut_short(src, dst):  # the process dies half-way through writing dst
        Path(dst).write_text(Path(src).read_text()[:1])
        raise KeyboardInterrupt

    monkeypatch.setattr(pc.shutil, "copyfile", copy_cut_short)
    with pytest.raises(KeyboardInterrupt):
        _prepare_here(tmp_path, monkeypatch, "s", cache)
    assert not list(cache.glob("toy-*.bin")), "a truncated checkpoint would be reused"


def test_a_cache_that_cannot_be_written_costs_a_training_not_the_checkpoint(
        tmp_path, monkeypatch, capsys):
    from autograder.authoring import prepare_checkpoint as pc

    def prepare(student, cache):
        folder = _prepare_here(tmp_path, monkeypatch, student, cache)
        assert (folder / "model.bin").read_text() == "42"
        return capsys.readouterr().out

    not_a_folder = tmp_path / "not-a-folder"
    not_a_folder.write_text("")
    assert "not using the cache" in prepare("a", not_a_folder)

    full = tmp_path / "full-disk"
    full.mkdir()
    real_copy = shutil.copyfile

    def no_space_in_the_cache(src, dst):
        if Path(dst).parent == full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_copy(src, dst)

    monkeypatch.setattr(pc.shutil, "copyfile", no_space_in_the_cache)
    assert "not cached" in prepare("b", full)
    assert not list(full.glob("toy-*.bin*")), "nothing half-written stays in the cache"


def test_a_data_file_named_in_also_reads_is_part_of_the_key(tmp_path, monkeypatch, capsys):
    data, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    data.write_text("first corpus")
    cache.mkdir()

    def train_and_save(namespace):
        Path("model.bin").write_text(data.read_text())
        return 0.5

    def prepare(student):
        folder = _prepare_here(tmp_path, monkeypatch, student, cache, train_and_save,
                               also_reads=(data,))
        return capsys.readouterr().out, (folder / "model.bin").read_text()

    assert "trained" in prepare("a")[0]
    assert "from the cache" in prepare("b")[0]
    data.write_text("second corpus")
    out, trained_on = prepare("c")
    assert "trained" in out and trained_on == "second corpus"


def test_key_follows_the_library_data_not_its_modules(tmp_path):
    script = tmp_path / "s.py"
    script.write_text("pass")
    library = tmp_path / "toolkit"
    library.mkdir()
    (library / "models.py").write_text("WIDTH = 64")
    (library / "corpus.txt").write_text("first")
    cells = assignment_cells(_notebook(1, "a"))
    key = lambda: cache_key(script, cells, set(), library=library)  # noqa: E731
    before = key()
    (library / "__pycache__").mkdir()
    (library / "__pycache__" / "models.cpython-311.pyc").write_bytes(b"\0")
    assert key() == before  # byte code is not code that changed
    (library / "models.py").write_text("WIDTH = 128")
    assert key() == before  # modules are keyed by what training imports (code_key)
    (library / "corpus.txt").write_text("second")
    assert key() != before  # data a training run may open is keyed here


def test_only_the_modules_training_imports_retrain(tmp_path, monkeypatch, capsys):
    """A change to a module training never imported (a widget) reuses the checkpoint; a
    change to one it imported trains again; going back finds the first checkpoint."""
    import importlib

    from autograder.authoring import prepare_checkpoint as pc

    library = tmp_path / "lib" / "toylib"
    library.mkdir(parents=True)
    (library / "__init__.py").write_text("")
    (library / "models.py").write_text("WIDTH = 64\n")
    (library / "widgets.py").write_text("COLOUR = 'red'\n")
    monkeypatch.syspath_prepend(str(tmp_path / "lib"))
    monkeypatch.setattr(pc, "LIBRARY", library)
    cache = tmp_path / "cache"
    cache.mkdir()

    def train_and_save(namespace):
        models = importlib.import_module("toylib.models")
        importlib.reload(models)  # this process trains again: read the file as it is now
        Path("model.bin").write_text(f"{namespace['ANSWER']} {models.WIDTH}")
        return 0.5

    def prepare(student):
        folder = _prepare_here(tmp_path, monkeypatch, student, cache, train_and_save)
        return capsys.readouterr().out, (folder / "model.bin").read_text()

    try:
        assert "trained" in prepare("first")[0]
        (reads,) = cache.glob("toy-*.reads.json")
        assert "models.py" in reads.read_text() and "widgets.py" not in reads.read_text()
        (library / "widgets.py").write_text("COLOUR = 'blue'\n")
        out, trained = prepare("widget-changed")
        assert "from the cache" in out and trained == "42 64"
        (library / "models.py").write_text("WIDTH = 128\n")
        out, trained = prepare("model-changed")
        assert "trained" in out and trained == "42 128"
        (library / "models.py").write_text("WIDTH = 64\n")
        out, trained = prepare("model-back")
        assert "from the cache" in out and trained == "42 64"
    finally:
        for name in [m for m in sys.modules if m == "toylib" or m.startswith("toylib.")]:
            del sys.modules[name]


def test_cache_folder_setting_and_pruning(tmp_path, monkeypatch, capsys):
    from autograder.authoring.prepare_checkpoint import CACHE_MAX_AGE_DAYS, checkpoint_cache_dir

    monkeypatch.setenv("AUTOGRADER_CHECKPOINT_CACHE", "off")
    assert checkpoint_cache_dir() is None
    monkeypatch.delenv("AUTOGRADER_CHECKPOINT_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert checkpoint_cache_dir() == tmp_path / "xdg" / "autograder" / "checkpoints"
    folder = tmp_path / "mine"
    monkeypatch.setenv("AUTOGRADER_CHECKPOINT_CACHE", str(folder))
    assert checkpoint_cache_dir() == folder and folder.is_dir()
    stale, fresh = folder / "toy-old.bin", folder / "toy-new.bin"
    stale.write_text("1")
    fresh.write_text("2")
    long_ago = time.time() - (CACHE_MAX_AGE_DAYS + 1) * 86400
    os.utime(stale, (long_ago, long_ago))
    checkpoint_cache_dir()
    assert not stale.exists() and fresh.exists()
    # A folder that cannot be made: no cache, a message that says what to set.
    (tmp_path / "a-file").write_text("")
    monkeypatch.setenv("AUTOGRADER_CHECKPOINT_CACHE", str(tmp_path / "a-file" / "cache"))
    assert checkpoint_cache_dir() is None
    assert "AUTOGRADER_CHECKPOINT_CACHE" in capsys.readouterr().err
