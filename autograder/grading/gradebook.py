"""The single writer: record one graded notebook in nbgrader's gradebook and on disk.

Only the process that started ``autograder grade`` calls this, one result at a
time, so SQLite never sees two writers. Recording is idempotent: recording the
same submission again overwrites its scores, it never adds to them.

**A full disk stops grading before it corrupts anything.** Before each record the
writer checks that the workspace's file system keeps :data:`RESERVE_BYTES` free
after what it is about to write, and raises :class:`DiskFull` (with what to do)
if not. Every file is written to a temporary name and renamed, and every gradebook
write is an SQLite transaction, so a write that fails anyway (the disk filled between
the check and the write) leaves each file and row either old or new, never half; the
student's results file, which marks them as done, is written last, so the next run
grades them again and overwrites what the interrupted one had recorded.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import nbformat
from nbformat.corpus.words import generate_corpus_id
from nbgrader import utils as nbutils
from sqlalchemy.exc import OperationalError

from ..jobs import NotebookResult
from ..limits import MiB, format_size
from ..workspace.course import Course, CourseError
from .scoring import cell_report_markdown, score_cells
from .upstream import exercise_uses

#: Free space the grader never writes into: room for SQLite's journal and for the
#: machine's other programs.
RESERVE_BYTES = 64 * MiB
#: Free inodes kept the same way.
RESERVE_FILES = 1000
_DISK_ERRORS = (errno.ENOSPC, errno.EDQUOT)


class DiskFull(CourseError):
    """The file system that holds the course workspace has no room left."""


def ensure_room(course: Course, needed: int = 0) -> None:
    """Raise :class:`DiskFull` unless ``needed`` bytes fit and the reserve stays free."""
    st = os.statvfs(course.root)
    free, files = st.f_bavail * st.f_frsize, st.f_favail
    if free < RESERVE_BYTES + needed or files < RESERVE_FILES:
        raise DiskFull(_disk_full_message(course, free))


def _disk_full_message(course: Course, free: int | None) -> str:
    left = f"{format_size(free)} left" if free is not None else "a write failed"
    return (
        f"the disk that holds the course workspace {course.root} is full ({left}; the "
        f"grader stops while it still has {format_size(RESERVE_BYTES)}, so that the "
        "gradebook is never half-written). Free some space and run the same command "
        "again: what was recorded stays, the rest is graded, nothing is counted twice"
    )


@contextlib.contextmanager
def stop_on_full_disk(course: Course):
    """Turn a write that failed for lack of space into :class:`DiskFull`."""
    try:
        yield
    except OSError as exc:
        if exc.errno in _DISK_ERRORS:
            raise DiskFull(_disk_full_message(course, None)) from None
        raise
    except OperationalError as exc:  # SQLite: "database or disk is full"
        if "full" in str(exc).lower():
            raise DiskFull(_disk_full_message(course, None)) from None
        raise


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _atomic_copy(source: Path, target: Path) -> None:
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
    os.close(fd)
    try:
        shutil.copy2(source, tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def annotate_notebook(nb, table: dict, events: list[str], findings: list[str], isolation: str):
    """Put each test cell's check report in its outputs, and a grading summary at the top."""
    for cell in nb.cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and grade_id in table:
            cell.outputs = [
                nbformat.v4.new_output(
                    "display_data",
                    data={
                        "text/markdown": cell_report_markdown(grade_id, table[grade_id]),
                        "text/plain": f"hidden checks for {grade_id}: "
                        f"{table[grade_id]['score']:g}/{table[grade_id]['max_score']:g}",
                    },
                )
            ]
    notes = [f"- {n}" for n in findings + events] or ["- every cell ran without trouble"]
    summary = "\n".join(["**Autograder notes**", "", f"- isolation: {isolation}", *notes])
    summary_cell = nbformat.v4.new_markdown_cell(summary)
    summary_cell.metadata["autograder_summary"] = True
    nb.cells = [c for c in nb.cells if not c.get("metadata", {}).get("autograder_summary")]
    nb.cells.insert(0, summary_cell)
    return nb


def record(
    course: Course,
    spec,
    gradebook,
    result: NotebookResult,
    auto_points: dict,
    manual_ids: set,
    submission_dir: Path,
) -> dict:
    """Write the autograded notebook and the gradebook rows for one notebook.

    ``gradebook``: the course's nbgrader ``Gradebook``, open. Returns the summary stored
    in our results file. Raises :class:`DiskFull`, having changed nothing, when the
    workspace's disk has no room for it.
    """
    student, notebook_id = result.student, result.notebook_id
    table = score_cells(auto_points, result.checks, result.diagnoses,
                        uses=exercise_uses(result.notebook))
    nb = result.notebook
    autograded = course.path("autograded", student, spec.name)
    extra = [item for item in (submission_dir.iterdir() if submission_dir.is_dir() else [])
             if item.suffix != ".ipynb" and item.is_file() and not item.is_symlink()]
    manual_scores: dict[str, float | None] = {}
    text = None
    if nb is not None:
        nb = nbformat.from_dict(nb)
        annotate_notebook(nb, table, result.events, result.findings, result.isolation)
        if nb.nbformat_minor >= 5:  # cell ids are required from nbformat 4.5 on
            for cell in nb.cells:
                # nbgrader restores a deleted grade cell from the gradebook, without an id
                cell.setdefault("id", generate_corpus_id())
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in manual_ids:
                manual_scores[gid] = nbutils.determine_grade(cell)[0]
        text = nbformat.writes(nb)
    # Room for the notebook, the files beside it, and the gradebook's rows and journal.
    needed = len(text or "") + sum(item.stat().st_size for item in extra) + MiB
    ensure_room(course, needed)
    with stop_on_full_disk(course):
        autograded.mkdir(parents=True, exist_ok=True)
        if text is not None:
            _atomic_write(autograded / f"{notebook_id}.ipynb", text)
            # nbgrader keeps a submission's other files beside the autograded notebook.
            for item in extra:
                _atomic_copy(item, autograded / item.name)
        _write_gradebook(gradebook, spec, student, notebook_id, table, manual_ids,
                         manual_scores, submission_dir, graded=nb is not None)
    return {
        "notebook_id": notebook_id,
        "autograded": text is not None,  # whether autograded/ holds the notebook
        "cells": {gid: {k: v for k, v in e.items() if k != "checks"} for gid, e in table.items()},
        "checks": [check.as_dict() for check in result.checks],
        "diagnoses": result.diagnoses,
        "events": result.events,
        "findings": result.findings,
        "manual_pending": [gid for gid, s in manual_scores.items() if s is None],
        "isolation": result.isolation,
        "seconds": result.seconds,
        # Where those seconds went: warm_up, kernel_start, notebook, checks, diagnosis.
        "timings": result.timings,
    }


def _write_gradebook(gb, spec, student, notebook_id, table, manual_ids, manual_scores,
                     submission_dir, graded: bool) -> None:
    """The gradebook rows of one notebook, in the open gradebook ``gb`` (a failed write is
    rolled back)."""
    with warnings.catch_warnings():
        # nbgrader's own session handling triggers harmless SQLAlchemy autoflush warnings.
        warnings.simplefilter("ignore")
        try:
            gb.update_or_create_student(student)
            stamp_file = submission_dir / "timestamp.txt"
            timestamp = None
            if stamp_file.is_file():
                try:
                    timestamp = nbutils.parse_utc(stamp_file.read_text().strip())
                except Exception:  # a garbled timestamp counts as "no timestamp"
                    timestamp = None
            if timestamp:
                gb.update_or_create_submission(spec.name, student, timestamp=timestamp)
            else:
                gb.update_or_create_submission(spec.name, student)
            for grade_id, entry in table.items():
                grade = gb.find_grade(grade_id, notebook_id, spec.name, student)
                grade.auto_score = entry["score"]
                grade.needs_manual_grade = grade.manual_score is not None
            for grade_id in manual_ids:
                grade = gb.find_grade(grade_id, notebook_id, spec.name, student)
                grade.auto_score = manual_scores.get(grade_id, None if graded else 0.0)
                grade.needs_manual_grade = grade.auto_score is None
                comment = gb.find_comment(grade_id, notebook_id, spec.name, student)
                comment.auto_comment = "No response." if grade.auto_score == 0 else None
            gb.db.commit()
        except BaseException:
            gb.db.rollback()
            raise


def write_result_file(course: Course, assignment: str, student: str, payload: dict) -> None:
    """Our per-student record: written last, so it marks the student as finished."""
    _atomic_write(course.results_dir(assignment) / f"{student}.json", json.dumps(payload, indent=1))


def read_result_file(course: Course, assignment: str, student: str) -> dict | None:
    path = course.results_dir(assignment) / f"{student}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
