"""What every ``prepare`` script that trains a checkpoint does, whatever it trains.

``autograder validate`` and ``autograder demo`` grade submissions made from the
instructor notebook; when the assignment asks for a trained checkpoint next to the
notebook, the assignment's ``prepare`` script makes one for each made submission
(:func:`autograder.authoring.submissions.run_prepare`). Such a script (05's and 07's
``prepare_submission.py``) says what to train and how to save it; this module does the
rest, the same for all of them:

1. read the notebook and keep the code cells a student writes or runs (no test cells,
   nothing tagged ``skip-grading``): :func:`assignment_cells`;
2. look the checkpoint up in the checkpoint cache (``AUTOGRADER_PREPARE_SCRATCH``, which
   ``write_submissions`` points at :func:`checkpoint_cache_dir`), keyed by everything
   training reads, in two parts. :func:`cache_key` hashes the script, the cells training
   uses, this module, the toolkit's data files and the versions of Python (the corpus is
   its standard library) and torch. The toolkit's code is keyed the way ccache's
   manifests key headers: a run that trains records which of the toolkit's modules it
   imported (:func:`imported_library_files`, kept beside the checkpoints as
   ``<name>-<key>.reads.json``), and the checkpoint is stored under a second hash of
   those files' contents (:func:`code_key`). So a change to a widget or a lecture's helper
   reuses every checkpoint, and a change to a module training imports trains again. The
   reference and the mutants of exercises that training never calls share one run (the
   runs overlap; a lock per key makes the later ones wait for the first instead of
   training again), and a second ``validate`` or ``demo`` of an unchanged assignment
   trains nothing;
3. otherwise execute the cells in one namespace (:func:`run_cells`; a failing cell is
   reported and skipped, as a broken submission's would be) and hand it to the script's
   ``train_and_save``;
4. never fail: a submission that cannot train gets no checkpoint, as a student's would
   not, and the checks then say the file is missing; a cache that cannot be written to
   (a full disk, a folder of someone else's) only costs a training.
"""

from __future__ import annotations
import __future__

import fcntl
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from importlib.util import find_spec
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


#: The toolkit package's folder (found without importing it, which would import torch):
#: its modules that training imports are keyed by :func:`code_key`, its data files by
#: :func:`cache_key`.
_TOOLKIT = find_spec("toolkit")
LIBRARY = Path(_TOOLKIT.submodule_search_locations[0]) if _TOOLKIT else None


def files_digest(paths) -> bytes:
    """A hash of the files under ``paths`` (files or folders), names and contents, in a
    fixed order; byte-code caches left out."""
    digest = hashlib.sha256()
    for root in paths:
        root = Path(root)
        files = sorted(root.rglob("*")) if root.is_dir() else [root]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                name = f.relative_to(root) if root.is_dir() else f.name
                digest.update(str(name).encode() + b"\0" + f.read_bytes() + b"\0")
    return digest.digest()


def _library_data(library: Path | None) -> list[Path]:
    """The library's files that are not Python modules (data a training run may open)."""
    if library is None or not library.is_dir():
        return []
    return [f for f in sorted(library.rglob("*"))
            if f.is_file() and f.suffix != ".py" and "__pycache__" not in f.parts]


def cache_key(script: Path, cells: list[tuple[str, str]], not_for_training: set[str],
              also_reads: tuple[Path, ...] = (), library: Path | None = LIBRARY) -> str:
    """A hash of what a training run reads besides the library's code: the script, the
    cells that training uses, this module, the library's data files and ``also_reads``,
    and the versions of Python and torch. The library's modules are keyed by
    :func:`code_key`."""
    digest = hashlib.sha256(Path(script).read_bytes())
    digest.update(files_digest((__file__, *_library_data(library), *also_reads)))
    # The corpus is the standard library's source, so it changes with Python's version.
    # torch's installed version is read without importing torch (2 s): a run that finds
    # its checkpoint in the cache never needs torch.
    digest.update(f"python {sys.version}\0torch {version('torch')}\0".encode())
    for grade_id, source in cells:
        if grade_id not in not_for_training:
            digest.update(grade_id.encode() + b"\0" + source.encode() + b"\0")
    return digest.hexdigest()[:32]


def imported_library_files(library: Path | None = LIBRARY) -> list[str]:
    """The library's modules this process has imported, as paths relative to the library's
    folder, sorted: what a training run that just ended read of the library's code."""
    if library is None:
        return []
    root = library.resolve()
    found = set()
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if not path:
            continue
        path = Path(path).resolve()
        if path.is_relative_to(root):
            found.add(path.relative_to(root).as_posix())
    return sorted(found)


def code_key(files: list[str], library: Path | None = LIBRARY) -> str:
    """A hash of the named library files' current contents (a file gone counts too)."""
    digest = hashlib.sha256()
    for name in files:
        path = Path(library, name) if library is not None else Path(name)
        content = path.read_bytes() if path.is_file() else b"\0missing"
        digest.update(name.encode() + b"\0" + content + b"\0")
    return digest.hexdigest()[:16]


#: Cached checkpoints unused for this long are deleted by :func:`checkpoint_cache_dir`.
CACHE_MAX_AGE_DAYS = 30


def checkpoint_cache_dir() -> Path | None:
    """The folder of cached checkpoints, created if needed; ``None`` when switched off.

    ``AUTOGRADER_CHECKPOINT_CACHE`` names it; ``off`` switches caching across runs off
    (each ``write_submissions`` call then trains afresh). Unset, it is
    ``$XDG_CACHE_HOME/autograder/checkpoints`` (``~/.cache/...``). Files unused for
    :data:`CACHE_MAX_AGE_DAYS` days are deleted here; a folder that cannot be written
    switches caching off with a message rather than failing.
    """
    setting = os.environ.get("AUTOGRADER_CHECKPOINT_CACHE", "")
    if setting.lower() == "off":
        return None
    cache_home = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    folder = Path(setting) if setting else Path(cache_home, "autograder", "checkpoints")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        oldest = time.time() - CACHE_MAX_AGE_DAYS * 86400
        for f in folder.iterdir():
            if f.is_file() and f.stat().st_mtime < oldest:
                f.unlink(missing_ok=True)
    except OSError as exc:
        print(f"checkpoint cache {folder} is not usable ({exc}); training afresh. "
              "Set AUTOGRADER_CHECKPOINT_CACHE to a writable folder, or to off.",
              file=sys.stderr)
        return None
    return folder


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
    also_reads: tuple[Path, ...] = (),
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
        also_reads: files or folders training reads besides the toolkit (a data file of
            the assignment's own), made part of the cache key. The toolkit's modules
            need no listing: the ones training imports are recorded and keyed.
    """
    try:
        nb = json.loads(Path(notebook).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"{student}: no checkpoint: {notebook} is unreadable ({exc})")
        return 0
    cells = assignment_cells(nb)
    scratch = os.environ.get("AUTOGRADER_PREPARE_SCRATCH")
    library = LIBRARY  # read at call time (a test points it elsewhere)
    key = cache_key(script, cells, not_for_training, also_reads, library)
    lock = _open_lock(Path(scratch, f"{name}-{key}.lock"), student) if scratch else None
    if lock is None:  # no cache: train
        _train(student, cells, checkpoint, name, train_and_save, steps)
        return 0
    reads = Path(scratch, f"{name}-{key}.reads.json")
    suffix = Path(checkpoint).suffix
    # Submissions are prepared in parallel: the first run of a key trains while later
    # runs of the same key wait here, then copy its checkpoint.
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            read_before = json.loads(reads.read_text(encoding="utf-8"))["library"]
        except (OSError, ValueError, KeyError, TypeError):
            read_before = None  # never trained (or an unreadable record): train
        if read_before is not None:
            cached = Path(scratch, f"{name}-{key}-{code_key(read_before, library)}{suffix}")
            if cached.is_file():
                shutil.copyfile(cached, checkpoint)
                os.utime(cached)  # recently used: not pruned
                os.utime(reads)
                print(f"{student}: {checkpoint} from the cache ({cached})")
                return 0
        _train(student, cells, checkpoint, name, train_and_save, steps)
        if Path(checkpoint).is_file():
            read_now = imported_library_files(library)
            cached = Path(scratch, f"{name}-{key}-{code_key(read_now, library)}{suffix}")
            # Copy, then rename: a run stopped mid-copy leaves no truncated checkpoint
            # (or record) for every later run to reuse.
            try:
                for target, write in (
                        (cached, lambda to: shutil.copyfile(checkpoint, to)),
                        (reads, lambda to: Path(to).write_text(
                            json.dumps({"library": read_now}, indent=0), encoding="utf-8"))):
                    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
                    try:
                        write(partial)
                        os.replace(partial, target)
                    finally:
                        partial.unlink(missing_ok=True)
            except OSError as exc:  # a full disk costs the next run a training, no more
                print(f"{student}: {checkpoint} not cached ({exc})")
    return 0


def _open_lock(path: Path, student: str):
    """The key's lock file, open for writing; None (with a message) where the cache
    cannot be written to, which then only costs a training."""
    try:
        return open(path, "w")
    except OSError as exc:
        print(f"{student}: not using the cache {path.parent} ({exc})")
        return None


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
