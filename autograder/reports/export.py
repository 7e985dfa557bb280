"""``autograder export``: an assignment's grades out of nbgrader's gradebook.

The gradebook is the system of record, so the export reads it, and nothing else:
the autograder's scores, the points graders gave in formgrader, and extra credit.
One record per student in the gradebook (a student with no submission gets
empty points). For each exercise (nbgrader grade cell) and for the whole
assignment it gives:

``auto_points``
    what the autograder gave (empty for a written answer: a human grades it);
``manual_points``
    what a human gave in formgrader (empty until someone does);
``total_points``
    what counts: the human's points where there are any, else the autograder's,
    plus extra credit (nbgrader's own rule for a grade's score);
``max_points``
    the most the exercise is worth.

Formats: ``csv`` (one row per student, columns below), ``json`` (the same
records, nested per exercise) and ``canvas`` (a file Canvas's gradebook import
reads, one column for the assignment's total). Column names never depend on the
data except for the exercise ids, which are the grade cell ids of the notebook.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path

from ..workspace.course import Course, CourseError

#: Per-student columns of the CSV, in order, before the per-exercise columns.
STUDENT_COLUMNS = [
    "assignment",
    "student_id",
    "last_name",
    "first_name",
    "email",
    "lms_user_id",
    "submitted",
    "timestamp",
    "auto_points",
    "manual_points",
    "extra_credit",
    "total_points",
    "max_points",
    "needs_manual_grade",
]
#: For each exercise ``E``, the CSV has ``E.auto_points`` ... ``E.max_points``.
EXERCISE_FIELDS = ["auto_points", "manual_points", "total_points", "max_points"]
#: The columns Canvas's gradebook importer reads to find a student.
CANVAS_STUDENT_COLUMNS = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
CANVAS_KEYS = {"sis_login_id": "SIS Login ID", "sis_user_id": "SIS User ID", "id": "ID"}


def _exercises(gb, course: Course, name: str) -> list[dict]:
    """The assignment's grade cells in notebook order: id, notebook, kind, max points."""
    from nbgrader.api import MissingEntry

    try:
        assignment = gb.find_assignment(name)
    except MissingEntry:
        raise CourseError(
            f"the gradebook has no assignment '{name}': run "
            f"`{course.command(f'release {name}')}` and `{course.command(f'grade {name}')}` "
            "first"
        ) from None
    exercises = []
    for notebook in sorted(assignment.notebooks, key=lambda nb: nb.name):
        written = {cell.name for cell in notebook.solution_cells}
        order = _cell_order(course, name, notebook.name)
        for cell in sorted(notebook.grade_cells, key=lambda c: (order.get(c.name, 1e9), c.name)):
            exercises.append(
                {
                    "id": cell.name,
                    "notebook": notebook.name,
                    "kind": "manual" if cell.name in written else "autograded",
                    "max_points": cell.max_score,
                }
            )
    return exercises


def _cell_order(course: Course, name: str, notebook: str) -> dict[str, int]:
    """grade_id -> position in the source notebook (the order students see)."""
    path = course.path("source", name, f"{notebook}.ipynb")
    try:
        cells = json.loads(path.read_text())["cells"]
    except (OSError, ValueError, KeyError):
        return {}
    ids = [c.get("metadata", {}).get("nbgrader", {}).get("grade_id") for c in cells]
    return {gid: i for i, gid in enumerate(ids) if gid}


def _grades(gb, name: str) -> dict[tuple[str, str, str], tuple]:
    """``{(student, notebook, cell): (auto, manual, extra, score, needs_manual)}`` in one query."""
    from nbgrader.api import (
        Assignment,
        BaseCell,
        Grade,
        Notebook,
        SubmittedAssignment,
        SubmittedNotebook,
    )

    query = (
        gb.db.query(
            SubmittedAssignment.student_id,
            Notebook.name,
            BaseCell.name,
            Grade.auto_score,
            Grade.manual_score,
            Grade.extra_credit,
            Grade.score,
            Grade.needs_manual_grade,
        )
        .select_from(Grade)
        .join(SubmittedNotebook, Grade.notebook_id == SubmittedNotebook.id)
        .join(SubmittedAssignment, SubmittedNotebook.assignment_id == SubmittedAssignment.id)
        .join(Assignment, SubmittedAssignment.assignment_id == Assignment.id)
        .join(BaseCell, Grade.cell_id == BaseCell.id)
        .join(Notebook, BaseCell.notebook_id == Notebook.id)
        .filter(Assignment.name == name)
    )
    return {(row[0], row[1], row[2]): tuple(row[3:]) for row in query}


def _add(total: float | None, value: float | None) -> float | None:
    if value is None:
        return total
    return round((total or 0.0) + value, 6)


def collect(course: Course, name: str) -> dict:
    """``{"assignment", "max_points", "exercises": [...], "students": [...]}`` (see module doc)."""
    course.require()
    with course.gradebook() as gb:
        exercises = _exercises(gb, course, name)
        grades = _grades(gb, name)
        submissions = {sub.student_id: sub for sub in gb.find_assignment(name).submissions}
        students = []
        for student in sorted(gb.students, key=lambda s: s.id):
            sub = submissions.get(student.id)
            record = {
                "student_id": student.id,
                "last_name": student.last_name,
                "first_name": student.first_name,
                "email": student.email,
                "lms_user_id": student.lms_user_id,
                "submitted": sub is not None,
                "timestamp": sub.timestamp.isoformat() if sub and sub.timestamp else None,
                "auto_points": None,
                "manual_points": None,
                "extra_credit": None,
                "total_points": None,
                "max_points": round(sum(e["max_points"] for e in exercises), 6),
                "needs_manual_grade": False,
                "exercises": {},
            }
            for ex in exercises:
                row = grades.get((student.id, ex["notebook"], ex["id"]))
                auto, manual, extra, score, pending = row if row else (None,) * 5
                record["exercises"][ex["id"]] = {
                    "auto_points": auto,
                    "manual_points": manual,
                    "total_points": score if row else None,
                    "max_points": ex["max_points"],
                }
                record["auto_points"] = _add(record["auto_points"], auto)
                record["manual_points"] = _add(record["manual_points"], manual)
                record["extra_credit"] = _add(record["extra_credit"], extra)
                record["total_points"] = _add(record["total_points"], score if row else None)
                record["needs_manual_grade"] |= bool(pending)
            students.append(record)
    return {
        "assignment": name,
        "max_points": round(sum(e["max_points"] for e in exercises), 6),
        "exercises": exercises,
        "students": students,
    }


def _cell(value) -> str:
    """CSV cell text: empty for "no value", numbers without a trailing ``.0``."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else repr(value)
    return str(value)


def as_csv(data: dict) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    ids = [e["id"] for e in data["exercises"]]
    per_exercise = [f"{gid}.{field}" for gid in ids for field in EXERCISE_FIELDS]
    writer.writerow(STUDENT_COLUMNS + per_exercise)
    for rec in data["students"]:
        row = [data["assignment"]] + [rec[c] for c in STUDENT_COLUMNS[1:]]
        row += [rec["exercises"][gid][field] for gid in ids for field in EXERCISE_FIELDS]
        writer.writerow([_cell(v) for v in row])
    return out.getvalue()


def as_json(data: dict) -> str:
    return json.dumps(data, indent=2, sort_keys=True)


def as_canvas(data: dict, column: str | None = None, key: str = "sis_login_id") -> str:
    """A CSV for Canvas's gradebook import (Grades > Import).

    Canvas finds each student by ``ID`` (its numeric user id), then ``SIS User ID``,
    then ``SIS Login ID``, then the name in ``Student``; ``key`` says which of those
    columns receives nbgrader's student id. ``ID`` also gets a numeric ``lms_user_id``
    from the gradebook (nbgrader's LTI integration fills it). The one grade column is
    headed ``column`` (default: the assignment name): a title Canvas does not know
    creates a new assignment, ``"Title (12345)"`` updates Canvas assignment 12345.
    The ``Points Possible`` row gives the assignment's maximum. A student with no
    submission gets an empty cell, which Canvas's import leaves unchanged.
    """
    if key not in CANVAS_KEYS:
        raise CourseError(f"--canvas-key must be one of {', '.join(CANVAS_KEYS)}, not {key!r}")
    column = column or data["assignment"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CANVAS_STUDENT_COLUMNS + [column])
    writer.writerow(["Points Possible", "", "", "", "", _cell(data["max_points"])])
    for rec in data["students"]:
        cells = dict.fromkeys(CANVAS_STUDENT_COLUMNS, "")
        if rec["last_name"] and rec["first_name"]:
            cells["Student"] = f"{rec['last_name']}, {rec['first_name']}"
        else:
            cells["Student"] = rec["student_id"]
        if (rec["lms_user_id"] or "").isdigit():
            cells["ID"] = rec["lms_user_id"]
        cells[CANVAS_KEYS[key]] = rec["student_id"]
        total = rec["total_points"] if rec["submitted"] else None
        writer.writerow([cells[c] for c in CANVAS_STUDENT_COLUMNS] + [_cell(total)])
    return out.getvalue()


def main(course: Course, args) -> int:
    """``autograder export NAME --format csv|canvas|json [--output FILE]``."""
    data = collect(course, args.name)
    if args.format == "json":
        text = as_json(data) + "\n"
    elif args.format == "canvas":
        text = as_canvas(data, column=args.canvas_column, key=args.canvas_key)
    else:
        text = as_csv(data)
    if args.output:
        Path(args.output).write_text(text)
        print(f"Exported {len(data['students'])} students to {args.output}", file=sys.stderr)
    else:
        print(text, end="")
    return 0
