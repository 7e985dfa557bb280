""""Check my work": one saved notebook through the grading pipeline, recording nothing.

:func:`check_notebook` is the only place the extension touches the grader. It runs the
four steps of ``autograder grade`` on one notebook (sanitise against the gradebook,
execute in a sandboxed kernel, hidden checks in this trusted process, score per grade
cell) and returns the trusted result. It never writes the gradebook, the autograded
folder or the grader's results files: a check is a rehearsal, not a submission.

It runs in a worker process of the Jupyter server (:mod:`.course_lab`),
never in the server itself: the hidden checks import torch and run pytest, and a worker
that misbehaves can be replaced without touching the server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from pathlib import Path

import nbformat
from nbgrader import utils as nbutils

from ...grading.oracle import shared_oracle
from ...grading.runner import grade_notebook
from ...grading.sanitize import grade_cell_ids, read_submission, sanitized_job
from ...grading.scoring import score_cells
from ...grading.upstream import exercise_uses
from ...grading.workers import stops_cleanly
from ...sandbox import forkserver
from ...sandbox.isolation import hidden_from_kernels
from ...sandbox.slots import sandbox_slot
from ...workspace.course import Course, CourseError, available_assignments


@stops_cleanly
def check_notebook(
    course_root: str, assignments_dir: str, assignment: str, notebook_id: str,
    submission_dir: str, user: str,
) -> dict:
    """Grade ``<submission_dir>/<notebook_id>.ipynb`` as ``autograder grade`` would.

    Returns ``{"cells": {grade_id: {"score", "max_score", "passed", "total", "checks"}},
    "manual": {grade_id: {"max_score", "answered"}}, "events", "findings", "isolation",
    "seconds"}``. ``checks`` are the trusted per-check records: they may hold reference
    values, so they never leave the server as they are (see :mod:`.visibility`).
    """
    course = Course(course_root, assignments_dir)
    spec = course.spec(assignment)
    with course.gradebook() as gb:
        auto_points, manual_ids = grade_cell_ids(gb, notebook_id, spec.name)
        job = sanitized_job(course, spec, user, notebook_id, Path(submission_dir), gb,
                            auto_points)
    manual = {}
    for cell in job.notebook.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in manual_ids:
            score, max_score = nbutils.determine_grade(cell)
            manual[grade_id] = {"max_score": max_score, "answered": score is None}
    result = grade_notebook(job)
    cells = score_cells(auto_points, result.checks, result.diagnoses,
                        uses=exercise_uses(result.notebook))
    for entry in cells.values():
        entry["checks"] = [check.as_dict() for check in entry["checks"]]
    return {
        "cells": cells,
        "manual": manual,
        "events": result.events,
        "findings": job.findings,
        "isolation": result.isolation,
        "seconds": result.seconds,
    }


@stops_cleanly
def warm_up(course_root: str, assignments_dir: str) -> bool:
    """Start what a check needs before the student asks for one: the sandboxed fork
    server (about 4 s) and the mistake oracle (about 2 s), in this worker process.

    The fork server is the one every assignment of the course shares (see
    :func:`autograder.sandbox.isolation.paths_to_cover`); an assignment whose hidden checks lie
    outside the project and the workspace starts its own at its first check, as before.
    Returns True when the fork server is ready (False: kernels will start from scratch).
    """
    course = Course(course_root, assignments_dir)
    shared_oracle().start()
    with sandbox_slot() as slot:
        # The slot is searched from this process's id, so the first check gets it again.
        return forkserver.get(slot, hidden_from_kernels(course), _any_preload(course)) is not None


def _any_preload(course: Course) -> tuple[str, ...]:
    """What the kernels of any of the course's assignments preload, so that one zygote
    serves them all (an assignment whose file does not load is left to its check)."""
    modules = {}
    for name in available_assignments(course.assignments_dir):
        with contextlib.suppress(CourseError):
            modules.update(dict.fromkeys(course.spec(name).kernel_preload))
    return tuple(modules)


# -- what is checked: the notebook and the files beside it (:mod:`..handin`) --------------
def content_hash(notebook: nbformat.NotebookNode, folder: Path, checks_dir: Path,
                 assignment_toml: Path) -> str:
    """What decides a check's result, hashed: the notebook's cells without their outputs
    (running a cell changes nothing), the files handed in beside it, and the hidden checks
    and limits (an instructor's fix to a check gives a fresh result)."""
    digest = hashlib.sha256()
    cells = [
        [c.get("cell_type"), _source(c), c.get("metadata", {}).get("nbgrader"),
         c.get("metadata", {}).get("tags")]
        for c in notebook.get("cells", [])
    ]
    digest.update(json.dumps(cells, sort_keys=True, default=str).encode())
    for item in sorted(folder.iterdir()):
        if item.suffix != ".ipynb" and item.is_file():
            digest.update(item.name.encode() + b"\0" + _file_digest(item))
    for item in sorted(checks_dir.rglob("*.py")):
        digest.update(str(item.relative_to(checks_dir)).encode() + b"\0" + _file_digest(item))
    if assignment_toml.is_file():
        digest.update(_file_digest(assignment_toml))
    return digest.hexdigest()


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def _file_digest(path: Path) -> bytes:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.digest()


def read_notebook(path: Path) -> nbformat.NotebookNode:
    """The saved notebook, or :class:`~autograder.grading.sanitize.NotGradable`
    saying what is wrong."""
    return read_submission(path)
