"""The class list: students' names, emails and LMS ids, read from a CSV into the gradebook.

nbgrader learns a student from their first submission and knows only the id, so
formgrader lists "None, None" and the Canvas export has no names to match on. A roster
fills those in, before or after grading (re-importing updates rows, grades are kept).

The file has a header row with ``id`` (the nbgrader student id, as students submit
under it) and any of ``first_name``, ``last_name``, ``email``, ``lms_user_id``: the
columns nbgrader's own ``nbgrader db student import`` reads. A spreadsheet's export is
read as it comes: a byte-order mark, ``;`` or tabs between the columns, and headers such
as ``ID`` or ``First Name`` are all accepted. Every row is checked before the gradebook
is touched, so a bad file changes nothing and the error names the line to fix.
"""

from __future__ import annotations

import csv
import io
import warnings
from pathlib import Path

from .assignment_spec import CourseError

ID = "id"
FIELDS = ("first_name", "last_name", "email", "lms_user_id")


def read_roster(path: Path) -> dict[str, dict[str, str | None]]:
    """``{student id: {field: value or None}}`` from the CSV at ``path``, or a CourseError
    that names the file, the line and what to change."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")  # spreadsheets often write a BOM
    except FileNotFoundError:
        raise CourseError(f"{path}: no such file (a CSV with a header row: id,"
                          f"{','.join(FIELDS)})") from None
    except UnicodeDecodeError:
        raise CourseError(f"{path}: not UTF-8 text; save the roster as CSV UTF-8") from None
    # Spreadsheets set to a decimal-comma locale write ";" between columns, and some
    # exports use tabs: the header line says which (a comma, if it has one, wins).
    first = text.split("\n", 1)[0]
    delimiter = next((d for d in ",;\t" if d in first), ",")
    reader = csv.DictReader(io.StringIO(text, newline=""), delimiter=delimiter)
    # "First Name" and "ID" are what a person types for first_name and id.
    header = [name.strip().lower().replace(" ", "_") for name in reader.fieldnames or []]
    if ID not in header:
        raise CourseError(f"{path}: line 1 must name the columns, with `id` (the nbgrader "
                          f"student id) among them; found {header or 'nothing'}")
    unknown = [name for name in header if name not in (ID, *FIELDS)]
    if unknown:
        raise CourseError(f"{path}: unknown column(s) {unknown}; the roster may have `id` "
                          f"and {', '.join(f'`{f}`' for f in FIELDS)} (rename or remove the rest)")
    reader.fieldnames = header
    students: dict[str, dict[str, str | None]] = {}
    first_line: dict[str, int] = {}
    for row in reader:
        line = reader.line_num  # the file's line (blank lines are skipped, not counted)
        if None in row:  # more cells than the header has names
            raise CourseError(f"{path}: line {line} has more cells than the header; a name "
                              "with a comma needs quotes")
        student = (row.get(ID) or "").strip()
        if not student:
            if any((value or "").strip() for value in row.values()):
                raise CourseError(f"{path}: line {line} has no `id`; every student needs the "
                                  "id they submit under")
            continue  # a blank line
        if student in students:
            raise CourseError(f"{path}: line {line} repeats the id {student!r} of line "
                              f"{first_line[student]}; keep one row per student")
        students[student] = {field: (row.get(field) or "").strip() or None
                             for field in FIELDS if field in header}
        first_line[student] = line
    return students


def import_roster(course, path: Path) -> tuple[int, int]:
    """Write the roster at ``path`` into ``course``'s gradebook; ``(added, updated)``.
    Columns the file does not have leave what the gradebook holds unchanged."""
    students = read_roster(path)
    course.require()
    added = updated = 0
    with course.gradebook() as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbgrader's SQLAlchemy session warnings
        known = {student.id for student in gb.students}
        for student, fields in students.items():
            gb.update_or_create_student(student, **fields)
            if student in known:
                updated += 1
            else:
                added += 1
    return added, updated
