"""The course workspace: nbgrader's directory layout, configuration and gradebook.

``autograder init`` creates a workspace (by default ``course-workspace/`` in the
checkout, which git ignores, so student data never lands in the repository)::

    nbgrader_config.py   gradebook.db
    source/<assignment>/<notebook>.ipynb      built from assignments/<assignment>/*.py
    release/<assignment>/...                  student versions (nbgrader generate_assignment)
    submitted/<student>/<assignment>/...      what students handed in
    autograded/<student>/<assignment>/...     executed notebooks with the check reports
    feedback/<student>/<assignment>/...       HTML feedback (nbgrader generate_feedback)
    autograder/<assignment>/<student>.json    our per-check results (resume + reports)
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

import jupytext
import nbformat
import tomllib

from . import gradebook_url

PROJECT_ROOT = Path(__file__).resolve().parent.parent
# Instructors keep assignments elsewhere with AUTOGRADER_ASSIGNMENTS=/path (read at `init`).
ASSIGNMENTS_DIR = Path(os.environ.get("AUTOGRADER_ASSIGNMENTS", PROJECT_ROOT / "assignments"))
DEFAULT_COURSE_DIR = PROJECT_ROOT / "course-workspace"
COURSE_ID = "transformers-course"
SETTINGS_FILE = "autograder.json"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}

NBGRADER_CONFIG = """\
# nbgrader configuration for this course workspace (written by `autograder init`).
c = get_config()  # noqa: F821
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
c.CourseDirectory.db_url = {db_url!r}
c.ClearSolutions.code_stub = {{"python": "# YOUR CODE HERE\\nraise NotImplementedError()"}}
c.ClearSolutions.text_stub = "YOUR ANSWER HERE"
# Hidden checks live in the autograder, not in notebooks: nothing to strip or restore.
c.GenerateAssignment.preprocessors_exclude = []
c.Exchange.root = {exchange!r}
"""


class CourseError(Exception):
    """A problem an instructor can fix; the message says what to do."""


@dataclasses.dataclass
class Mutant:
    name: str
    pitfall: str
    notebook: str
    find: str
    replace: str
    breaks: list[str]


@dataclasses.dataclass
class AssignmentSpec:
    """An assignment as described by ``assignments/<name>/assignment.toml``."""

    name: str
    path: Path
    title: str
    notebooks: list[str]
    checks: str
    cell_timeout: float = 60
    submission_timeout: float = 600
    call_timeout: float = 60
    memory_bytes: int = 6 * 2**30
    forbid: list[str] = dataclasses.field(default_factory=list)
    mutants: list[Mutant] = dataclasses.field(default_factory=list)
    #: Optional script in the assignment folder, run after each *made* submission
    #: (validate, demo) is written: ``python <script> <student id>`` with the submission
    #: folder as working directory, e.g. to train and save the checkpoint a student would
    #: hand in next to the notebook. See :func:`autograder.submissions.run_prepare`.
    prepare: str | None = None

    @classmethod
    def load(cls, name: str, assignments_dir: Path = ASSIGNMENTS_DIR) -> AssignmentSpec:
        path = assignments_dir / name
        toml_path = path / "assignment.toml"
        if not toml_path.is_file():
            known = ", ".join(available_assignments(assignments_dir)) or "none"
            raise CourseError(f"no assignment '{name}' (looked for {toml_path}); known: {known}")
        try:
            data = tomllib.loads(toml_path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise CourseError(f"{toml_path}: invalid TOML ({exc}); fix the file") from None
        mutants = [Mutant(**m) for m in data.pop("mutants", [])]
        spec = cls(name=name, path=path, mutants=mutants, **data)
        for nb in spec.notebooks:
            if not (path / f"{nb}.py").is_file():
                raise CourseError(f"{toml_path}: notebook '{nb}' has no source file {nb}.py")
        if spec.prepare is not None and not (path / spec.prepare).is_file():
            raise CourseError(f"{toml_path}: prepare script {spec.prepare} not found in {path}")
        return spec

    def source_text(self, notebook: str) -> str:
        return (self.path / f"{notebook}.py").read_text()

    def checks_dir(self) -> Path:
        """Where the hidden checks are: ``autograder/checks/<checks>``, or relative to
        the assignment folder when ``checks`` starts with ``./`` or ``../``."""
        if self.checks.startswith(("./", "../")):
            return (self.path / self.checks).resolve()
        return Path(__file__).resolve().parent / "checks" / self.checks


def available_assignments(assignments_dir: Path = ASSIGNMENTS_DIR) -> list[str]:
    return sorted(p.parent.name for p in assignments_dir.glob("*/assignment.toml"))


def notebook_from_text(text: str) -> nbformat.NotebookNode:
    """A jupytext percent script to an nbformat v4 notebook with our kernelspec."""
    nb = jupytext.reads(text, fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.nbformat, nb.nbformat_minor = 4, 5
    for cell in nb.cells:
        cell.metadata.pop("lines_to_next_cell", None)
    return nb


def _venv_on_path() -> None:
    """nbgrader runs the ``alembic`` command to create the gradebook: it must be on PATH
    even when this environment was not activated (``.venv/bin/autograder ...``)."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


class Course:
    """A course workspace on disk (see the module docstring for the layout)."""

    def __init__(self, root: Path | str | None = None, assignments_dir: Path | None = None):
        self.root = Path(root or DEFAULT_COURSE_DIR).resolve()
        # A workspace remembers the assignments folder it was created from, and where
        # its gradebook lives when that is not the default SQLite file.
        settings_file = self.root / SETTINGS_FILE
        settings = json.loads(settings_file.read_text()) if settings_file.is_file() else {}
        if assignments_dir is None:
            assignments_dir = settings.get("assignments_dir")
        self.assignments_dir = Path(assignments_dir or ASSIGNMENTS_DIR).resolve()
        self._db_url: str | None = settings.get("db_url")

    # -- layout ------------------------------------------------------------------
    @property
    def db_url(self) -> str:
        """The gradebook's SQLAlchemy URL (see :mod:`autograder.gradebook_url`)."""
        return self._db_url or gradebook_url.sqlite_url(self.root)

    def path(self, kind: str, *parts: str) -> Path:
        return self.root.joinpath(kind, *parts)

    def results_dir(self, assignment: str) -> Path:
        return self.root / "autograder" / assignment

    def spec(self, assignment: str) -> AssignmentSpec:
        return AssignmentSpec.load(assignment, self.assignments_dir)

    def require(self) -> None:
        if not (self.root / "nbgrader_config.py").is_file():
            raise CourseError(
                f"{self.root} is not a course workspace: run `autograder init --course {self.root}`"
            )

    # -- set-up --------------------------------------------------------------------
    def init(self, db_url: str | None = None) -> None:
        """Create the workspace (idempotent) and build every assignment's source notebooks.

        ``db_url`` puts the gradebook in another database (PostgreSQL, say); without it
        a workspace keeps the database it was created with (by default SQLite)."""
        if db_url is not None:
            try:
                self._db_url = gradebook_url.check(db_url)
            except gradebook_url.GradebookUrlError as exc:
                raise CourseError(str(exc)) from None
        for kind in ("source", "release", "submitted", "autograded", "feedback", "autograder"):
            self.path(kind).mkdir(parents=True, exist_ok=True)
        config = NBGRADER_CONFIG.format(
            root=str(self.root),
            course_id=COURSE_ID,
            db_url=self.db_url,
            exchange=str(self.root / "exchange"),
        )
        (self.root / "nbgrader_config.py").write_text(config)
        settings = {"assignments_dir": str(self.assignments_dir)}
        if self._db_url:
            settings["db_url"] = self._db_url
        settings_path = self.root / SETTINGS_FILE
        settings_path.write_text(json.dumps(settings, indent=1) + "\n")
        gradebook_url.protect(self.db_url, [self.root / "nbgrader_config.py", settings_path])
        for name in available_assignments(self.assignments_dir):
            self.build_source(self.spec(name))

    def build_source(self, spec: AssignmentSpec) -> Path:
        """``assignments/<name>/*.py`` -> ``source/<name>/*.ipynb`` (+ the other files)."""
        target = self.path("source", spec.name)
        target.mkdir(parents=True, exist_ok=True)
        for item in spec.path.iterdir():
            if item.name in ("assignment.toml", "__pycache__") or item.suffix == ".py":
                continue
            dest = target / item.name
            if item.is_dir():
                shutil.copytree(item, dest, dirs_exist_ok=True)
            else:
                shutil.copy2(item, dest)
        for nb_name in spec.notebooks:
            nb = notebook_from_text(spec.source_text(nb_name))
            nbformat.write(nb, target / f"{nb_name}.ipynb")
        return target

    # -- nbgrader --------------------------------------------------------------------
    def nbgrader_api(self):
        _venv_on_path()
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from traitlets.config import Config

        config = Config()
        config.CourseDirectory.root = str(self.root)
        config.CourseDirectory.course_id = COURSE_ID
        config.CourseDirectory.db_url = self.db_url
        config.ClearSolutions.code_stub = {
            "python": "# YOUR CODE HERE\nraise NotImplementedError()"
        }
        config.ClearSolutions.text_stub = "YOUR ANSWER HERE"
        config.Exchange.root = str(self.root / "exchange")
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir=coursedir, config=config)

    def release(self, name: str) -> Path:
        """Build the source notebooks and run nbgrader's generate_assignment."""
        self.require()
        spec = self.spec(name)
        self.build_source(spec)
        result = self.nbgrader_api().generate_assignment(name, force=True, create=True)
        if not result.get("success"):
            raise CourseError(
                f"nbgrader could not generate '{name}':\n{result.get('error') or result.get('log')}"
            )
        return self.path("release", name)

    def gradebook(self):
        _venv_on_path()
        from nbgrader.api import Gradebook

        return Gradebook(self.db_url, COURSE_ID)

    def students_with_submissions(self, assignment: str) -> list[str]:
        base = self.path("submitted")
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir())
