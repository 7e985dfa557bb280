"""What the Course panel lists: ``GET /autograder/api/course``.

The course outline (``course/course.toml``) gives the order, titles, dates and
visibility; the workspace gives what has been released, where the notebooks are, and
their exercises (nbgrader grade cells) with points; the user's saved check results give
each exercise's status: ``unchecked``, ``failing``, ``passing`` or ``waiting`` (a written
answer that a person grades).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from ...workspace.course import Course, CourseError
from ...workspace.outline import iso, load_outline
from ...workspace.visibility_calendar import next_visibility
from .visibility import restrict

HELP = "run `make lab` (or `autograder init` and `autograder release --all`)"


def no_workspace(root_dir: Path) -> dict:
    return {"title": "Course", "problem": f"No course workspace found from {root_dir}: {HELP}.",
            "lectures": [], "assignments": []}


def _under(path: Path, root_dir: Path) -> str | None:
    """``path`` as the server's contents API names it, or None if outside its root."""
    path = path.resolve()
    return path.relative_to(root_dir).as_posix() if path.is_relative_to(root_dir) else None


def _material(path: Path, root_dir: Path, folder: str = "") -> str | None:
    """A lecture or the README: the workspace's copy when the server's root holds it (the
    instructor's lab), else the one copied into the root (a student's lab,
    :func:`autograder.student.lab_wheel.prepare_student_folder`), else None."""
    if path.is_file() and _under(path, root_dir):
        return _under(path, root_dir)
    copy = root_dir / folder / path.name
    return _under(copy, root_dir) if copy.is_file() else None


def released_exercises(course: Course, assignment: str, notebook_id: str) -> list[dict] | None:
    """Grade cells of the released notebook, in order: name, title (the heading above),
    kind (``auto`` or ``manual``), points. None when it has not been released."""
    path = course.path("release", assignment, f"{notebook_id}.ipynb")
    try:
        nb = nbformat.read(path, as_version=4)
    except (OSError, ValueError):
        return None
    exercises, heading, since = [], None, []  # the last heading; those since the last grade
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        # A student's own answer cell may hold headings: they title nothing.
        if cell.cell_type == "markdown" and not meta.get("solution"):
            for line in cell.source.splitlines():
                if line.startswith("##"):
                    heading = line.lstrip("#").strip().replace("`", "")
                    since.append(heading)
        if meta.get("grade") and meta.get("grade_id"):
            exercises.append({
                "name": meta["grade_id"],
                "title": exercise_title(since) or heading or meta["grade_id"],
                "notebook": notebook_id,
                "kind": "manual" if meta.get("solution") else "auto",
                "max_score": float(meta.get("points", 0)),
            })
            since = []
    return exercises


_EXERCISE = re.compile(r"Exercises?\s+(\w+)\s*:\s*(.+)")


def exercise_title(headings: list[str]) -> str | None:
    """The title of a grade cell from the headings since the previous one: its exercise
    ("Exercise 2: three mask builders"), all of them in one line when one test cell
    checks several ("Exercises 1a-1b: attention weights, scaled dot-product attention"),
    its question, else the section it opens ("7. Pre-train a tiny BERT and hand it in", not the
    "Training" below it)."""
    parts = [m for m in map(_EXERCISE.match, headings) if m]
    if len(parts) > 1:
        return (f"Exercises {parts[0][1]}-{parts[-1][1]}: "
                + ", ".join(m[2].strip() for m in parts))
    if parts:
        return parts[0][0]
    questions = [h for h in headings if h.startswith("Question")]
    return questions[-1] if questions else headings[0] if headings else None


def exercise_order(course: Course, found) -> list[str] | None:
    exercises = released_exercises(course, found.assignment, found.notebook_id)
    return [e["name"] for e in exercises] if exercises else None


def course_view(course: Course, root_dir: Path, latest: dict) -> dict:
    """The whole panel for one user (``latest``: their saved results by assignment)."""
    try:
        outline = load_outline(course.outline_file, course.assignments_dir)
    except CourseError as exc:
        return {**no_workspace(root_dir), "problem": f"The course outline is broken: {exc}"}
    lectures = []
    for lecture in outline.lectures:
        built = course.root / "lectures" / f"{lecture.stem}.ipynb"
        lectures.append({"title": lecture.title, "assignment": lecture.assignment,
                         "path": _material(built, root_dir, "lectures")})
    view = {
        "title": outline.title,
        "problem": None,
        "readme": _material(course.root / "README.md", root_dir),
        "lectures": lectures,
        "assignments": [],
    }
    for entry in outline.assignments:
        spec = course.spec(entry.name)
        mine = latest.get(entry.name, {}) if isinstance(latest.get(entry.name), dict) else {}
        item = {
            "name": entry.name,
            "title": entry.title,
            "release": iso(entry.release),
            "due": iso(entry.due),
            "visibility": entry.visibility,
            # When "Check my work" will show more (or less): {"at", "visibility"} or None.
            "visibility_next": next_visibility(entry),
            "released": False,
            "notebooks": [],
            "exercises": [],
            "checked_at": None,
        }
        for notebook_id in spec.notebooks:
            exercises = released_exercises(course, entry.name, notebook_id)
            if exercises is None:
                continue
            item["released"] = True
            nb_path = course.path("release", entry.name, f"{notebook_id}.ipynb")
            item["notebooks"].append({"id": notebook_id, "path": _under(nb_path, root_dir)})
            result = mine.get(notebook_id) if isinstance(mine.get(notebook_id), dict) else None
            checked = {e.get("name"): e for e in (result or {}).get("exercises", [])}
            for exercise in exercises:
                seen = checked.get(exercise["name"])
                exercise["status"] = seen.get("status", "unchecked") if seen else "unchecked"
                exercise["score"] = seen.get("score") if seen else None
                exercise["checks"] = restrict(seen.get("checks", []) if seen else [],
                                              entry.visibility)
                # What to fix first (an earlier exercise, a named mistake), as checked.
                exercise["diagnoses"] = (seen.get("diagnoses", []) if seen and
                                         entry.visibility == "full" else [])
                exercise["shared_reason"] = (seen.get("shared_reason") if seen and
                                             entry.visibility == "full" else None)
                exercise["waiting_on_values"] = (seen.get("waiting_on_values", 0) if seen and
                                                 exercise["checks"] else 0)
                item["exercises"].append(exercise)
            if result and (item["checked_at"] or "") < (result.get("checked_at") or ""):
                item["checked_at"] = result.get("checked_at")
        auto = [e for e in item["exercises"] if e["kind"] == "auto"]
        item["max_score"] = sum(e["max_score"] for e in auto)
        item["score"] = (sum(e["score"] or 0 for e in auto)
                         if any(e["score"] is not None for e in auto) else None)
        view["assignments"].append(item)
    return view
