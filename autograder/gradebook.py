"""The single writer: record one graded notebook in nbgrader's gradebook and on disk.

Only the process that started ``autograder grade`` calls this, one result at a
time, so SQLite never sees two writers. Recording is idempotent: recording the
same submission again overwrites its scores, it never adds to them.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import nbformat
from nbgrader import utils as nbutils

from .course import Course
from .scoring import cell_report_markdown, score_cells


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


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
    student: str,
    notebook_id: str,
    outcome: dict,
    auto_points: dict,
    manual_ids: set,
    submission_dir: Path,
) -> dict:
    """Write the autograded notebook and the gradebook rows for one notebook.

    ``outcome`` is the runner's result, or for a notebook that could not be run
    ``{"notebook": sanitised-or-None, "checks": [], "events": [reason], ...}``.
    Returns the summary stored in our results file.
    """
    table = score_cells(auto_points, outcome.get("checks", []), outcome.get("diagnoses", []))
    nb = outcome.get("notebook")
    autograded = course.path("autograded", student, spec.name)
    autograded.mkdir(parents=True, exist_ok=True)
    manual_scores: dict[str, float | None] = {}
    if nb is not None:
        nb = nbformat.from_dict(nb)
        annotate_notebook(
            nb,
            table,
            outcome.get("events", []),
            outcome.get("findings", []),
            outcome.get("isolation", ""),
        )
        for cell in nb.cells:
            gid = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
            if gid in manual_ids:
                manual_scores[gid] = nbutils.determine_grade(cell)[0]
        _atomic_write(autograded / f"{notebook_id}.ipynb", nbformat.writes(nb))
        # nbgrader keeps a submission's other files beside the autograded notebook.
        for item in submission_dir.iterdir() if submission_dir.is_dir() else []:
            if item.suffix != ".ipynb" and item.is_file() and not item.is_symlink():
                shutil.copy2(item, autograded / item.name)
    with course.gradebook() as gb, warnings.catch_warnings():
        # nbgrader's own session handling triggers harmless SQLAlchemy autoflush warnings.
        warnings.simplefilter("ignore")
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
            grade.auto_score = manual_scores.get(grade_id, 0.0 if nb is None else None)
            grade.needs_manual_grade = grade.auto_score is None
            comment = gb.find_comment(grade_id, notebook_id, spec.name, student)
            comment.auto_comment = "No response." if grade.auto_score == 0 else None
        gb.db.commit()
    return {
        "notebook_id": notebook_id,
        "cells": {gid: {k: v for k, v in e.items() if k != "checks"} for gid, e in table.items()},
        "checks": outcome.get("checks", []),
        "diagnoses": outcome.get("diagnoses", []),
        "events": outcome.get("events", []),
        "findings": outcome.get("findings", []),
        "manual_pending": [gid for gid, s in manual_scores.items() if s is None],
        "isolation": outcome.get("isolation", ""),
        "seconds": outcome.get("seconds", 0.0),
    }


def write_result_file(course: Course, assignment: str, student: str, payload: dict) -> None:
    """Our per-student record: written last, so it marks the student as finished."""
    _atomic_write(course.results_dir(assignment) / f"{student}.json", json.dumps(payload, indent=1))


def read_result_file(course: Course, assignment: str, student: str) -> dict | None:
    path = course.results_dir(assignment) / f"{student}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None
