"""The course outline: ``course/course.toml``, the course as students meet it.

The outline names the course, lists its lectures and assignments in teaching order, and
says what "Check my work" may show for each assignment. ``autograder init`` builds the
lectures into the workspace, ``autograder release --all`` releases the listed
assignments in order, and the JupyterLab extension's Course panel shows them. Every entry
is one line, so adding a lecture or an assignment is adding a line::

    title = "Transformers, built by hand"
    visibility = "full"
    lectures = [
      { notebook = "01-attention.py", title = "Attention, step by step" },
    ]
    assignments = [
      { name = "01-attention", release = 2026-01-12, due = 2026-01-26T23:59:00 },
      { name = "07-capstone", visibility = "score" },
    ]

What "Check my work" shows can follow the calendar (``visibility_after_due``, ``grades``,
``visibility_after_grades``): see :mod:`autograder.workspace.visibility_calendar`.

Without a ``course.toml`` (a course of one's own assignments folder) the outline is every
assignment of the assignments folder, in name order, with full visibility.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import tomllib
from pathlib import Path

import nbformat

from .assignment_spec import (
    ASSIGNMENTS_DIR,
    PROJECT_ROOT,
    AssignmentSpec,
    CourseError,
    available_assignments,
    notebook_from_text,
)
from .assistant_rules import DEFAULT_RULES, rules_from_setting
from .release_steps import CONTINUE_TAG
from .visibility_calendar import as_datetime, next_change, visibility_at
from .visibility_calendar import check as check_calendar

#: The project's own outline. A workspace reads ``course/course.toml`` beside its
#: assignments folder, or ``AUTOGRADER_COURSE_FILE`` (see ``Course.outline_file``).
COURSE_FILE = PROJECT_ROOT / "course" / "course.toml"

#: What "Check my work" shows a student, from most to least:
#: ``full``: each check's name, pass/fail, a cleaned message, hint and pitfall;
#: ``names``: each check's name and pass/fail; ``score``: points per exercise only;
#: ``off``: the button is switched off for the assignment.
VISIBILITIES = ("full", "names", "score", "off")

_LECTURE_KEYS = {"notebook", "title", "assignment"}
_ASSIGNMENT_KEYS = {"name", "title", "release", "due", "visibility", "visibility_after_due",
                    "grades", "visibility_after_grades"}


@dataclasses.dataclass(frozen=True)
class Lecture:
    """An ungraded notebook: ``course/<notebook>`` (jupytext percent ``.py`` or ``.ipynb``)."""

    notebook: str
    title: str
    assignment: str | None = None  # the assignment it prepares, if any

    @property
    def stem(self) -> str:
        return Path(self.notebook).stem


@dataclasses.dataclass(frozen=True)
class AssignmentEntry:
    name: str
    title: str
    release: dt.date | dt.datetime | None = None
    due: dt.date | dt.datetime | None = None
    #: What "Check my work" shows before the due date (all term without one), after it,
    #: and after ``grades`` (the date grades are released): see
    #: :mod:`autograder.workspace.visibility_calendar`.
    visibility_before_due: str = "full"
    visibility_after_due: str | None = None
    grades: dt.date | dt.datetime | None = None
    visibility_after_grades: str | None = None

    @property
    def visibility(self) -> str:
        """The visibility in force now (see :meth:`visibility_at`)."""
        return self.visibility_at(dt.datetime.now().astimezone())

    def visibility_at(self, now: dt.datetime) -> str:

        return visibility_at(self, now)

    def next_visibility(self, now: dt.datetime) -> tuple[dt.datetime, str] | None:
        """When what "Check my work" shows changes next, and to what (``None``: never)."""

        return next_change(self, now)

    def released_by(self, now: dt.datetime) -> bool:
        """Whether its release date (if any) has come. A date means its first minute."""
        return self.release is None or now >= as_datetime(self.release, now.tzinfo)


@dataclasses.dataclass(frozen=True)
class CourseOutline:
    title: str
    path: Path | None  # the course.toml it came from (None: the default outline)
    lectures: tuple[Lecture, ...]
    assignments: tuple[AssignmentEntry, ...]
    readme: Path | None = None
    # What coding assistants are asked in releases and the student toolkit (None: no
    # such files); see autograder.workspace.assistant_rules.
    assistant_rules: str | None = DEFAULT_RULES

    def assignment(self, name: str) -> AssignmentEntry | None:
        return next((a for a in self.assignments if a.name == name), None)

    def names(self) -> list[str]:
        return [a.name for a in self.assignments]

    def lecture_source(self, lecture: Lecture) -> Path:
        return (self.path.parent if self.path else PROJECT_ROOT / "course") / lecture.notebook


def lecture_notebook(source: Path) -> nbformat.NotebookNode:
    """A lecture as students get it, from ``course/<notebook>`` (``.py`` or ``.ipynb``).

    Every code cell after the first (the imports) is tagged ``raises-exception``, so Run
    All reaches the end even where a cell fails. With the full toolkit none does; with the
    student toolkit, a lecture run before its assignment is unlocked meets that
    assignment's exercises as stubs, and each cell that needs one says so in one line
    (``toolkit.notebook.friendly_errors``) while the rest of the lecture still runs.
    """
    source = Path(source)
    if source.suffix == ".py":
        nb = notebook_from_text(source.read_text())
    else:
        nb = nbformat.read(source, as_version=4)
    code = [cell for cell in nb.cells if cell.cell_type == "code"]
    for cell in code[1:]:
        tags = cell.metadata.setdefault("tags", [])
        if CONTINUE_TAG not in tags:
            tags.append(CONTINUE_TAG)
    return nb


def load_outline(path: Path | None = None, assignments_dir: Path | None = None) -> CourseOutline:
    """Read and check ``course.toml``; errors name the file, the entry and the fix."""
    path = Path(path or COURSE_FILE)
    assignments_dir = Path(assignments_dir or ASSIGNMENTS_DIR)
    if not path.is_file():
        return _default_outline(assignments_dir)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise CourseError(f"{path}: invalid TOML ({exc}); fix the file") from None
    unknown = set(data) - {"title", "visibility", "readme", "lectures", "assignments",
                           "assistant_rules", "visibility_after_due", "visibility_after_grades"}
    if unknown:
        raise CourseError(f"{path}: unknown setting(s) {sorted(unknown)}; see the comments there")
    default_visibility = _visibility(data.get("visibility", "full"), f"{path}: visibility")
    later_defaults = {key: _visibility(data[key], f"{path}: {key}")
                      for key in ("visibility_after_due", "visibility_after_grades")
                      if key in data}
    known = available_assignments(assignments_dir)
    assignments, seen = [], set()
    for i, entry in enumerate(_entries(data, "assignments", path)):
        where = f"{path}: assignments[{i}]"
        _check_keys(entry, _ASSIGNMENT_KEYS, "name", where)
        name = entry["name"]
        if name not in known:
            raise CourseError(
                f"{where}: no assignment '{name}' in {assignments_dir} (known: "
                f"{', '.join(known) or 'none'}); fix the name or remove the line"
            )
        if name in seen:
            raise CourseError(f"{where}: '{name}' is listed twice; keep one line")
        seen.add(name)
        release, due, grades = (_date(entry.get(k), f"{where} ({name}): {k}")
                                for k in ("release", "due", "grades"))
        if release and due and as_datetime(due) < as_datetime(release):
            raise CourseError(f"{where} ({name}): due {due} comes before release {release}")
        # A course-wide later setting applies where its date exists; an assignment's own
        # must have its date (visibility_calendar.check says so).
        later = {key: (_visibility(entry[key], f"{where} ({name}): {key}") if key in entry
                       else later_defaults.get(key) if date is not None else None)
                 for key, date in (("visibility_after_due", due),
                                   ("visibility_after_grades", grades))}
        assignments.append(AssignmentEntry(
            name=name,
            title=entry.get("title") or AssignmentSpec.load(name, assignments_dir).title,
            release=release,
            due=due,
            visibility_before_due=_visibility(entry.get("visibility", default_visibility),
                                              f"{where} ({name}): visibility"),
            grades=grades,
            **later,
        ))
        check_calendar(assignments[-1], f"{where} ({name})")
    lectures = []
    for i, entry in enumerate(_entries(data, "lectures", path)):
        where = f"{path}: lectures[{i}]"
        _check_keys(entry, _LECTURE_KEYS, "notebook", where)
        source = path.parent / entry["notebook"]
        if Path(entry["notebook"]).suffix not in (".py", ".ipynb") or not source.is_file():
            raise CourseError(f"{where}: no lecture notebook {source} (a .py or .ipynb file "
                              f"beside course.toml); add the file or remove the line")
        if entry.get("assignment") and entry["assignment"] not in seen:
            raise CourseError(f"{where}: assignment '{entry['assignment']}' is not listed "
                              "under assignments")
        lectures.append(Lecture(entry["notebook"], entry.get("title") or Path(source).stem,
                                entry.get("assignment")))
    readme = path.parent / data.get("readme", "README.md")
    return CourseOutline(
        title=str(data.get("title") or "Course"),
        path=path,
        lectures=tuple(lectures),
        assignments=tuple(assignments),
        readme=readme if readme.is_file() else None,
        assistant_rules=rules_from_setting(data.get("assistant_rules"), path),
    )


def _default_outline(assignments_dir: Path) -> CourseOutline:
    entries = tuple(
        AssignmentEntry(name, AssignmentSpec.load(name, assignments_dir).title)
        for name in available_assignments(assignments_dir)
    )
    return CourseOutline(title="Course", path=None, lectures=(), assignments=entries)


def _entries(data: dict, key: str, path: Path) -> list[dict]:
    entries = data.get(key, [])
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise CourseError(f"{path}: {key} must be a list of {{ ... }} entries, one per line")
    return entries


def _check_keys(entry: dict, allowed: set[str], required: str, where: str) -> None:
    if not isinstance(entry.get(required), str) or not entry[required]:
        raise CourseError(f"{where}: every entry needs {required} = \"...\"")
    unknown = set(entry) - allowed
    if unknown:
        raise CourseError(f"{where}: unknown key(s) {sorted(unknown)} (known: {sorted(allowed)})")


def _visibility(value, where: str) -> str:
    if value not in VISIBILITIES:
        raise CourseError(f"{where} is {value!r}; use one of {', '.join(VISIBILITIES)}")
    return value


def _date(value, where: str):
    if value is None or isinstance(value, (dt.date, dt.datetime)):
        return value
    raise CourseError(f"{where} must be a TOML date (2026-01-12) or date-time "
                      f"(2026-01-12T09:00:00), not {value!r} (no quotes)")


def iso(value: dt.date | dt.datetime | None) -> str | None:
    """A date for JSON: ``2026-01-26`` or ``2026-01-26T23:59:00+01:00`` (local if naive)."""
    if value is None:
        return None
    if isinstance(value, dt.datetime):
        return as_datetime(value).isoformat()
    return value.isoformat()
