"""What every ``prepare`` script that trains a checkpoint does, whatever it trains.

``autograder validate`` and ``autograder demo`` grade submissions made from the
instructor notebook; when the assignment asks for a trained checkpoint next to the
notebook, the assignment's ``prepare`` script makes one for each made submission
(:func:`autograder.submissions.run_prepare`). Such a script (05's and 07's
``prepare_submission.py``) says what to train and how to save it; this module does the
rest, the same for all of them:

1. read the notebook and keep the code cells a student writes or runs (no test cells,
   nothing tagged ``skip-grading``): :func:`assignment_cells`;
2. look the checkpoint up in the cache shared by one ``write_submissions`` call
   (``AUTOGRADER_PREPARE_SCRATCH``), keyed by the script, torch's version and the cells
   training uses (:func:`cache_key`): the reference and the mutants of exercises that
   training never calls share one run (the runs overlap; a lock per key makes the
   later ones wait for the first instead of training again);
3. otherwise execute the cells in one namespace (:func:`run_cells`; a failing cell is
   reported and skipped, as a broken submission's would be) and hand it to the script's
   ``train_and_save``;
4. never fail: a submission that cannot train gets no checkpoint, as a student's would
   not, and the checks then say the file is missing.
"""

from __future__ import annotations
import __future__

import fcntl
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from importlib.metadata import version
from pathlib import Path


def assignment_cells(nb: dict) -> list[tuple[str, str]]:
    """``(grade_id, source)`` of the code cells a prepare script executes, in order."""
    cells = []
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {})
        nbgrader = meta.get("nbgrader")
        if cell.get("cell_type") != "code" or not nbgrader:
            continue
        if nbgrader.get("grade") and not nbgrader.get("solution"):
            continue  # a test cell
        if "skip-grading" in meta.get("tags", []):
            continue
        source = cell.get("source", "")
        cells.append((nbgrader.get("grade_id", "?"), "".join(source) if isinstance(source, list)
                      else source))
    return cells


def cache_key(script: Path, cells: list[tuple[str, str]], not_for_training: set[str]) -> str:
    """A hash of the script, torch's version and the cells that training uses."""
    digest = hashlib.sha256(Path(script).read_bytes())
    # The installed version, read without importing torch (2 s): a run that finds its
    # checkpoint in the cache never needs torch.
    digest.update(version("torch").encode())
    for grade_id, source in cells:
        if grade_id not in not_for_training:
            digest.update(grade_id.encode() + b"\0" + source.encode() + b"\0")
    return digest.hexdigest()[:32]


def run_cells(cells: list[tuple[str, str]], module_name: str) -> dict:
    """Execute the cells in one namespace; a failing cell is reported and skipped."""
    namespace: dict = {"__name__": module_name}
    flags = __future__.annotations.compiler_flag
    for grade_id, source in cells:
        try:
            exec(compile(source, f"<cell {grade_id}>", "exec", flags=flags, dont_inherit=True),
                 namespace)
        except Exception as exc:  # a broken submission: what can run, runs
            print(f"cell {grade_id}: {type(exc).__name__}: {exc}")
    return namespace


def prepare_checkpoint(
    student: str, *, script: Path, notebook: str, checkpoint: str, name: str,
    not_for_training: set[str], train_and_save: Callable[[dict], float], steps: int,
) -> int:
    """Write ``checkpoint`` next to ``notebook`` (in the working directory); returns 0.

    Args:
        student: the made submission's id, for the messages.
        script: the prepare script (part of the cache key).
        name: prefix of the cached file and of the cells' module name.
        not_for_training: grade ids of cells that training never calls (left out of the
            cache key).
        train_and_save: trains on the executed cells' namespace, saves ``checkpoint``,
            returns the last training loss.
        steps: training steps, for the message.
    """
    try:
        nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{student}: no checkpoint: {notebook} is unreadable ({exc})")
        return 0
    cells = assignment_cells(nb)
    scratch = os.environ.get("AUTOGRADER_PREPARE_SCRATCH")
    if not scratch:
        _train(student, cells, checkpoint, name, train_and_save, steps)
        return 0
    key = cache_key(script, cells, not_for_training)
    cached = Path(scratch, f"{name}-{key}.safetensors")
    # Submissions are prepared in parallel: the first run of a key trains while later
    # runs of the same key wait here, then copy its checkpoint.
    with open(Path(scratch, f"{name}-{key}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if cached.is_file():
            shutil.copyfile(cached, checkpoint)
            print(f"{student}: {checkpoint} from the cache")
            return 0
        _train(student, cells, checkpoint, name, train_and_save, steps)
        if Path(checkpoint).is_file():
            shutil.copyfile(checkpoint, cached)
    return 0


def _train(student, cells, checkpoint, name, train_and_save, steps) -> None:
    """Run the cells, train and save; a submission that cannot train gets no checkpoint."""
    started = time.perf_counter()
    try:
        loss = train_and_save(run_cells(cells, f"{name}_submission"))
    except Exception as exc:  # the stub, or a mutant that cannot train
        Path(checkpoint).unlink(missing_ok=True)
        print(f"{student}: no checkpoint: training failed ({type(exc).__name__}: {exc})"[:500])
        return
    print(f"{student}: trained {steps} steps in {time.perf_counter() - started:.0f}s, "
          f"last training loss {loss:.3f}; saved {checkpoint}")
