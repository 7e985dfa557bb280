"""Make submissions from an assignment: the reference, the stub, each named mutant,
and hostile or broken ones. ``validate`` and ``demo`` grade these like a class.

A made submission is the *released* notebook with the solution cells filled in
from the instructor source (as a student who solved everything would hand in),
so cell ids, checksums and metadata are exactly what nbgrader released.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from pathlib import Path

import nbformat
from nbgrader.preprocessors import ClearSolutions
from tqdm import tqdm

from ..workspace.assignment_spec import apply_mutant
from ..workspace.course import AssignmentSpec, Course, CourseError, notebook_from_text
from .prepare_checkpoint import checkpoint_cache_dir
from .warm_script import run_script


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_solution(cell) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("solution"))


#: nbgrader's solution delimiters (ClearSolutions' defaults, which the course keeps): a
#: line holding one of them marks where the released stub replaces the instructor's answer.
SOLUTION_DELIMITERS = tuple(
    ClearSolutions.class_traits()[name].default_value
    for name in ("begin_solution_delimeter", "end_solution_delimeter")  # nbgrader's spelling
)


def without_delimiters(source: str) -> str:
    """``source`` without its solution delimiter lines: the answer as a student writes it
    (a written answer would otherwise show a "BEGIN SOLUTION" heading in the feedback)."""
    return "\n".join(line for line in source.split("\n")
                     if not any(mark in line for mark in SOLUTION_DELIMITERS))


def fill_solutions(released: nbformat.NotebookNode, source: nbformat.NotebookNode):
    """The released notebook with every solution cell's source taken from ``source``
    (without the solution delimiters, which no student hands in)."""
    answers = {_grade_id(c): without_delimiters(c.source) for c in source.cells
               if _is_solution(c)}
    nb = nbformat.from_dict(json.loads(nbformat.writes(released)))
    for cell in nb.cells:
        if _is_solution(cell) and _grade_id(cell) in answers:
            cell.source = answers[_grade_id(cell)]
    return nb


def released_notebook(course: Course, spec: AssignmentSpec, nb_id: str):
    path = course.path("release", spec.name, f"{nb_id}.ipynb")
    if not path.is_file():
        raise CourseError(f"{path} does not exist: run `autograder release {spec.name}`")
    return nbformat.read(path, as_version=4)


def solution_defined_names(nb) -> list[str]:
    """Top-level functions and classes defined in the notebook's solution cells."""
    names = []
    for cell in nb.cells:
        if cell.cell_type == "code" and _is_solution(cell):
            try:
                tree = ast.parse(cell.source)
            except SyntaxError:
                continue
            names += [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    return names


TAMPER_PATCH = """\
# A hostile submission: make every in-notebook comparison report success.
import torch, torch.testing
torch.allclose = lambda *args, **kwargs: True
torch.testing.assert_close = lambda *args, **kwargs: None
torch.equal = lambda *args, **kwargs: True
"""

#: Appended to a made submission: wraps every graded function (and every public method of
#: every graded class) so that its results pass through ``_transform`` defined before it.
_TRANSFORM_GRADED = """\
import functools as _functools
def _transformed(fn):
    @_functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return _transform(fn(*args, **kwargs))
    return wrapper
for _name in {names!r}:
    _obj = globals()[_name]
    if isinstance(_obj, type):  # every public method the class defines, forward included
        for _attr, _method in list(vars(_obj).items()):
            if callable(_method) and not _attr.startswith("_"):
                setattr(_obj, _attr, _transformed(_method))
    else:
        globals()[_name] = _transformed(_obj)
"""

TAMPER_CORRUPT = """\
# ...and quietly return wrong (random) values from everything that is graded.
def _transform(value):
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool:
            return torch.rand(value.shape) < 0.5
        return value + torch.randn_like(value)
    if isinstance(value, tuple):
        return tuple(_transform(v) for v in value)
    return value
""" + _TRANSFORM_GRADED

CONSTANT_ANSWERS = """\
# A degenerate submission: every graded function returns a constant of the right shape
# (it runs the reference only to learn that shape). Property checks such as "the future
# never changes the past" hold trivially for a constant; they must earn nothing here.
def _transform(value):
    if isinstance(value, torch.Tensor):
        if value.dtype == torch.bool:
            return torch.ones_like(value)
        if value.is_floating_point() or value.is_complex():
            return torch.full_like(value, 0.25)
        return torch.zeros_like(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_transform(v) for v in value)
    if isinstance(value, dict):  # named results (BERT's input rows)
        return type(value)((k, _transform(v)) for k, v in value.items())
    if isinstance(value, torch.nn.Module):  # a model built by the answer: constant weights
        with torch.no_grad():
            for _p in value.parameters():
                _p.fill_(0.25)
        return value
    if isinstance(value, bool):
        return True
    if isinstance(value, (int, float)):
        return type(value)(0)
    return value
""" + _TRANSFORM_GRADED


#: Made submissions whose answers are degenerate on purpose; they must score zero.
DEGENERATE = ("constant",)


def _insert_after_first_code(nb, source: str):
    index = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code"), 0)
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))


def make_class(course: Course, spec: AssignmentSpec, *, broken: bool = False) -> dict[str, dict]:
    """``{student_id: {notebook_id: notebook | bytes}}`` for validate (demo: broken=True)."""
    students: dict[str, dict] = {"reference": {}, "stub": {}}
    for nb_id in spec.notebooks:
        released = released_notebook(course, spec, nb_id)
        source = notebook_from_text(spec.source_text(nb_id))
        reference = fill_solutions(released, source)
        students["reference"][nb_id] = reference
        students["stub"][nb_id] = released
        constant = fill_solutions(released, source)
        constant.cells.append(
            nbformat.v4.new_code_cell(CONSTANT_ANSWERS.format(names=solution_defined_names(source)))
        )
        students.setdefault("constant", {})[nb_id] = constant
        for mutant in spec.mutants:
            if mutant.notebook == nb_id:
                mutated = notebook_from_text(apply_mutant(spec, mutant))
                students.setdefault(f"mutant-{mutant.name}", {})[nb_id] = fill_solutions(
                    released, mutated
                )
        if not broken:
            continue
        tamper = fill_solutions(released, source)
        _insert_after_first_code(tamper, TAMPER_PATCH)
        tamper.cells.append(
            nbformat.v4.new_code_cell(TAMPER_CORRUPT.format(names=solution_defined_names(source)))
        )
        students.setdefault("tamper-allclose", {})[nb_id] = tamper
        syntax = fill_solutions(released, source)
        first_solution = next(c for c in syntax.cells if c.cell_type == "code" and _is_solution(c))
        first_solution.source = first_solution.source.replace("def ", "def (", 1)
        students.setdefault("broken-syntax-error", {})[nb_id] = syntax
        loop = fill_solutions(released, source)
        _insert_after_first_code(loop, "# forgot to remove this experiment\nwhile True:\n    pass")
        students.setdefault("broken-infinite-loop", {})[nb_id] = loop
        warns = fill_solutions(released, source)
        _insert_after_first_code(
            warns,
            "import sys, warnings\nwarnings.warn('a harmless warning')\n"
            "print('something on stderr', file=sys.stderr)",
        )
        students.setdefault("warns-on-stderr", {})[nb_id] = warns
        students.setdefault("broken-not-json", {})[nb_id] = b'{"cells": [ this is not json'
    return students


def write_submissions(
    course: Course,
    spec: AssignmentSpec,
    students: dict[str, dict],
    workers: int | None = None,
    progress: bool = True,
    prepare: Collection[str] | None = None,
) -> None:
    """Hand in ``students`` (id -> notebook id -> notebook, or raw bytes for a broken file).

    Every notebook is written first; then, if the assignment names a ``prepare`` script,
    it runs for each submission of ``prepare`` (default: every one that is not
    degenerate), ``workers`` at a time (default: the cores; each run is its own
    process), with a progress bar on stderr. Trained checkpoints are kept in the
    checkpoint cache between calls (:func:`.prepare_checkpoint.checkpoint_cache_dir`).
    """
    for student, notebooks in students.items():
        folder = course.path("submitted", student, spec.name)
        folder.mkdir(parents=True, exist_ok=True)
        for nb_id, nb in notebooks.items():
            target = Path(folder, f"{nb_id}.ipynb")
            if isinstance(nb, bytes):
                target.write_bytes(nb)
            else:
                nbformat.write(nb, target)
    # A degenerate submission hands in nothing besides its notebook.
    if prepare is None:
        prepare = [s for s in students if s not in DEGENERATE]
    to_prepare = [s for s in students if s in prepare] if spec.prepare else []
    if not to_prepare:
        return
    cache = checkpoint_cache_dir()
    # Caching switched off: a folder of this call's runs alone, deleted afterwards.
    folder = nullcontext(cache) if cache else tempfile.TemporaryDirectory(
        prefix="autograder-prepare-")
    with folder as shared, \
            ThreadPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        if progress:
            tqdm.write(f"preparing {spec.name}: checkpoints are cached in {shared}"
                       + ("" if cache else " (for this run only)"), file=sys.stderr)
        runs = [pool.submit(run_prepare, spec, course.path("submitted", s, spec.name), s,
                            Path(shared)) for s in to_prepare]
        bar = tqdm(total=len(runs), desc=f"preparing {spec.name} ({spec.prepare})",
                   unit="submission", disable=not progress, file=sys.stderr)
        with bar:
            for run in as_completed(runs):
                # A failing script was reported and skipped; result() re-raises only what
                # is wrong with this machine (no Python to run it, say).
                run.result()
                bar.update(1)


def run_prepare(spec: AssignmentSpec, folder: Path, student: str, scratch: Path) -> bool:
    """Run the assignment's ``prepare`` script for one made submission.

    Some assignments need more than a notebook from a student, e.g. the trained checkpoint
    of the capstone. ``prepare = "script.py"`` in ``assignment.toml`` names a script in the
    assignment folder; it runs as ``python script.py <student id>`` (with this Python, the
    submission folder as working directory, at most ``submission_timeout`` seconds; forked
    from a process that has imported torch already,
    :func:`~autograder.authoring.warm_script.run_script`) after the submission's notebooks are
    written, and writes what that student would hand in next to them.
    ``AUTOGRADER_PREPARE_SCRATCH`` names a folder the runs share, within one
    :func:`write_submissions` call and across calls: the checkpoint cache
    (:func:`.prepare_checkpoint.checkpoint_cache_dir`), or a folder of this call
    alone when that is off. The runs may overlap, so the script must guard what it shares
    (key its files by all they depend on). A failure is reported on stderr and grading goes
    on: the submission then lacks the file, as a student's would. Returns whether the script
    succeeded.
    """
    script = spec.path / spec.prepare
    env = {**os.environ, "AUTOGRADER_PREPARE_SCRATCH": str(scratch)}
    try:
        done = run_script(script, [student], cwd=folder, env=env,
                          timeout=spec.limits.submission_timeout)
    except subprocess.TimeoutExpired:
        limit = spec.limits.submission_timeout
        tqdm.write(f"prepare {student}: {spec.prepare} stopped after {limit:g}s", file=sys.stderr)
        return False
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        tqdm.write(f"prepare {student}: {spec.prepare} exited with {done.returncode}: "
                   + " | ".join(tail), file=sys.stderr)
        return False
    return True
