"""``autograder new NAME``: a new assignment that works before you change a line.

It copies the project's minimal example (``autograder/templates/``: one exercise, one
written question, two hidden checks, one named mistake) under the new name:

* ``<assignments>/NAME/assignment.toml``: title, notebook, limits, forbidden shortcuts,
  the mutant;
* ``<assignments>/NAME/<notebook>.py``: the instructor notebook (jupytext percent);
* ``<assignments>/NAME/checks/test_softmax.py``: the hidden checks, which stay with the
  assignment and are never released (:meth:`Course.build_source` leaves them out).

``autograder validate NAME`` then passes at once (the reference scores full marks, the
stub zero, the mutant loses points), and stays the test to run after every edit.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

from ..workspace.course import ASSIGNMENTS_DIR, CourseError

TEMPLATES = Path(__file__).resolve().parent / "templates"
_NAME = re.compile(r"[a-z0-9][a-z0-9-]*[a-z0-9]")


def notebook_name(name: str) -> str:
    """``"05-blocks"`` -> ``"blocks"``, ``"demo-topic"`` -> ``"demo_topic"``."""
    return re.sub(r"^[0-9]+-", "", name).replace("-", "_")


def new_assignment(name: str, assignments_dir: Path = ASSIGNMENTS_DIR, title: str | None = None,
                   notebook: str | None = None) -> list[Path]:
    """Write a working assignment called ``name``; returns the files written."""
    if not _NAME.fullmatch(name):
        raise CourseError(
            f"'{name}' cannot name an assignment: use lower-case letters, digits and dashes "
            "(e.g. 05-blocks or demo-topic)"
        )
    assignments_dir = Path(assignments_dir)
    folder = assignments_dir / name
    checks_dir = folder / "checks"
    notebook = notebook or notebook_name(name)
    if not notebook.isidentifier():
        raise CourseError(f"--notebook {notebook!r}: use letters, digits and underscores")
    if folder.exists():
        raise CourseError(f"{folder} already exists: choose another name or remove it")
    values = {
        "name": name,
        "title": title or name.replace("-", " ").capitalize(),
        "notebook": notebook,
    }
    files = {
        folder / "assignment.toml": "assignment.toml.template",
        folder / f"{notebook}.py": "notebook.py.template",
        checks_dir / "test_softmax.py": "test_softmax.py.template",
    }
    for target, template in files.items():
        text = string.Template((TEMPLATES / template).read_text()).substitute(values)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    return list(files)


def next_steps(name: str, files: list[Path]) -> str:
    """What ``autograder new`` prints: the files, and what to do next."""
    shown = [_shown(f) for f in files]
    width = max(len(s) for s in shown)
    what = ["settings: title, notebooks, limits, forbidden shortcuts, mutants",
            "the instructor notebook (jupytext percent): exercise, solution, checks",
            "the hidden checks (run by the grader, never released)"]
    lines = [f"Created the assignment {name}:"]
    lines += [f"  {s:<{width}}  {w}" for s, w in zip(shown, what)]
    lines += [
        "",
        "Next:",
        f"  1. autograder validate {name}   the example already passes: reference full "
        "marks, stub zero, the mutant caught",
        "  2. write your exercise, its hidden checks and its mutants; validate after each "
        "change",
        f"  3. autograder release {name}    the student version, in the course workspace",
        "The guide: docs/adding-an-assignment.md",
    ]
    return "\n".join(lines)


def _shown(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)
