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
    lectures/<lecture>.ipynb   README.md      from course/ (the outline, course/course.toml)
    check-my-work/<user>.json                 each user's latest "Check my work" results
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import nbformat

from . import gradebook_url

# An assignment as its author wrote it; re-exported here, where most callers look.
from .assignment_spec import (  # noqa: F401
    ASSIGNMENTS_DIR,
    KERNELSPEC,
    PROJECT_ROOT,
    AssignmentSpec,
    CourseError,
    Mutant,
    available_assignments,
    notebook_from_text,
)
from .feedback import FEEDBACK_EXPORTER, GENERATE_FEEDBACK_PREPROCESSORS
from .formgrader_bridge import AUTOGRADE_PREPROCESSORS
from .release_steps import GENERATE_ASSIGNMENT_PREPROCESSORS

DEFAULT_COURSE_DIR = PROJECT_ROOT / "course-workspace"
COURSE_ID = "transformers-course"
SETTINGS_FILE = "autograder.json"

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
# Stubs that name their exercise, and Run All that reaches the end (autograder.release_steps).
c.GenerateAssignment.preprocessors = {release_steps!r}
c.Exchange.root = {exchange!r}
# What this workspace's students submitted (the Assignments tab's "Submitted" list) is
# remembered here, not in ~/.local/share/jupyter, which every course would share.
c.Exchange.cache = {exchange_cache!r}
# Formgrader's "Autograde" and `nbgrader autograde` grade with `autograder grade`
# (sandbox, hidden checks), never with plain nbgrader (autograder.formgrader_bridge).
c.Autograde.autograde_preprocessors = {autograde!r}
# Feedback pages name each exercise, show automatic and written points apart, draw maths
# offline (autograder.feedback).
c.GenerateFeedback.exporter_class = {feedback_exporter!r}
c.GenerateFeedback.preprocessors = {feedback_steps!r}
"""




def _venv_on_path() -> None:
    """nbgrader runs the ``alembic`` command to create the gradebook: it must be on PATH
    even when this environment was not activated (``.venv/bin/autograder ...``)."""
    bin_dir = str(Path(sys.executable).parent)
    if bin_dir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")


class Course:
    """A course workspace on disk (see the module docstring for the layout)."""

    def __init__(
        self,
        root: Path | str | None = None,
        assignments_dir: Path | None = None,
        course_file: Path | None = None,
    ):
        self.root = Path(root or DEFAULT_COURSE_DIR).resolve()
        # A workspace remembers the assignments folder and outline it was created from,
        # and where its gradebook lives when that is not the default SQLite file.
        settings = self.root / SETTINGS_FILE
        saved = json.loads(settings.read_text()) if settings.is_file() else {}
        assignments_dir = assignments_dir or saved.get("assignments_dir")
        self.assignments_dir = Path(assignments_dir or ASSIGNMENTS_DIR).resolve()
        course_file = course_file or saved.get("course_file")
        self.outline_file = Path(course_file).resolve() if course_file else self._outline_file()
        self._db_url: str | None = saved.get("db_url")

    def _outline_file(self) -> Path:
        """``course/course.toml`` beside the assignments folder (or AUTOGRADER_COURSE_FILE)."""
        if os.environ.get("AUTOGRADER_COURSE_FILE"):
            return Path(os.environ["AUTOGRADER_COURSE_FILE"]).resolve()
        return self.assignments_dir.parent / "course" / "course.toml"

    def outline(self):
        """The course outline (:mod:`autograder.outline`): what to teach, in which order."""
        from .outline import load_outline

        return load_outline(self.outline_file, self.assignments_dir)

    # -- layout ------------------------------------------------------------------
    @property
    def db_url(self) -> str:
        """The gradebook's SQLAlchemy URL (see :mod:`autograder.gradebook_url`)."""
        return self._db_url or gradebook_url.sqlite_url(self.root)

    @property
    def exchange(self) -> Path:
        """nbgrader's exchange directory (fetch, submit, collect), inside the workspace."""
        return self.root / "exchange"

    @property
    def exchange_cache(self) -> Path:
        """nbgrader's record of what students of this workspace submitted."""
        return self.root / "exchange-cache"

    def path(self, kind: str, *parts: str) -> Path:
        return self.root.joinpath(kind, *parts)

    def results_dir(self, assignment: str) -> Path:
        return self.root / "autograder" / assignment

    def spec(self, assignment: str) -> AssignmentSpec:
        return AssignmentSpec.load(assignment, self.assignments_dir)

    def require(self) -> None:
        if not (self.root / "nbgrader_config.py").is_file():
            raise CourseError(f"{self.root} is not a course workspace: run "
                              f"`autograder init --course {self.root}`")

    def command(self, words: str) -> str:
        """``autograder <words>`` as the user should type it for this workspace."""
        default = self.root == Path(DEFAULT_COURSE_DIR).resolve()
        return f"autograder {words}" + ("" if default else f" --course {self.root}")

    def require_released(self, name: str) -> AssignmentSpec:
        """The spec of a released assignment; refuses, with what to run, one the gradebook
        does not know yet (collect, grade, report and feedback read what release wrote)."""
        self.require()
        spec = self.spec(name)  # an unknown name is told apart from one not yet released
        with self.gradebook() as gb:
            if not any(a.name == name for a in gb.assignments):
                raise CourseError(f"'{name}' has not been released: run "
                                  f"`{self.command(f'release {name}')}` first")
        return spec

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
        # nbgrader's exchange: students fetch from and submit to it, `collect` reads it.
        # Every student account must be able to write here (as nbgrader asks).
        self.exchange.mkdir(exist_ok=True)
        os.chmod(self.exchange, 0o777)
        config = NBGRADER_CONFIG.format(
            root=str(self.root),
            course_id=COURSE_ID,
            db_url=self.db_url,
            exchange=str(self.exchange),
            exchange_cache=str(self.exchange_cache),
            release_steps=GENERATE_ASSIGNMENT_PREPROCESSORS,
            autograde=AUTOGRADE_PREPROCESSORS,
            feedback_exporter=FEEDBACK_EXPORTER,
            feedback_steps=GENERATE_FEEDBACK_PREPROCESSORS,
        )
        (self.root / "nbgrader_config.py").write_text(config)
        settings = {
            "assignments_dir": str(self.assignments_dir),
            "course_file": str(self.outline_file),
        }
        if self._db_url:
            settings["db_url"] = self._db_url
        settings_path = self.root / SETTINGS_FILE
        settings_path.write_text(json.dumps(settings, indent=1) + "\n")
        gradebook_url.protect(self.db_url, [self.root / "nbgrader_config.py", settings_path])
        for name in available_assignments(self.assignments_dir):
            self.build_source(self.spec(name))
        self.build_lectures()

    def build_lectures(self) -> list[Path]:
        """The outline's lectures as notebooks in ``lectures/`` (see
        :func:`autograder.outline.lecture_notebook`), and its README as the workspace's
        ``README.md``. A lecture notebook edited after it was built (newer than its
        source) is kept as it is."""
        from .outline import lecture_notebook

        outline = self.outline()
        built = []
        for lecture in outline.lectures:
            source = outline.lecture_source(lecture)
            target = self.path("lectures", f"{lecture.stem}.ipynb")
            if target.is_file() and target.stat().st_mtime >= source.stat().st_mtime:
                built.append(target)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(lecture_notebook(source), target)
            built.append(target)
        if outline.readme is not None:
            shutil.copyfile(outline.readme, self.root / "README.md")
        return built

    def build_source(self, spec: AssignmentSpec) -> Path:
        """``assignments/<name>/*.py`` -> ``source/<name>/*.ipynb`` (+ the other files).

        The hidden checks never go along, even when an assignment keeps them in its
        own folder (``checks = "./checks"``): a release is built from ``source/``."""
        target = self.path("source", spec.name)
        target.mkdir(parents=True, exist_ok=True)
        checks = spec.checks_dir()
        for item in spec.path.iterdir():
            if item.name in ("assignment.toml", "__pycache__") or item.suffix == ".py":
                continue
            if item.resolve() == checks:
                continue
            dest = target / item.name
            if item.is_dir():
                def hide_checks(folder, names):
                    return [n for n in names if (Path(folder) / n).resolve() == checks]

                shutil.copytree(item, dest, dirs_exist_ok=True, ignore=hide_checks)
            else:
                shutil.copy2(item, dest)
        for nb_name in spec.notebooks:
            nb = notebook_from_text(spec.source_text(nb_name))
            # Carried into the release: tells "Check my work" which notebook this is.
            nb.metadata["autograder"] = {"assignment": spec.name, "notebook": nb_name}
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
        config.Exchange.root = str(self.exchange)
        config.Exchange.cache = str(self.exchange_cache)
        config.GenerateAssignment.preprocessors = GENERATE_ASSIGNMENT_PREPROCESSORS
        config.GenerateFeedback.exporter_class = FEEDBACK_EXPORTER
        config.GenerateFeedback.preprocessors = GENERATE_FEEDBACK_PREPROCESSORS
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir=coursedir, config=config)

    def release(self, name: str, exchange: bool = True) -> Path:
        """Build the source notebooks, run nbgrader's generate_assignment and, unless
        ``exchange`` is false, publish the release to the exchange for students to fetch."""
        self.require()
        spec = self.spec(name)
        self.build_source(spec)
        api = self.nbgrader_api()
        result = api.generate_assignment(name, force=True, create=True)
        if not result.get("success"):
            raise CourseError(
                f"nbgrader could not generate '{name}':\n{result.get('error') or result.get('log')}"
            )
        if exchange:
            self._nbgrader_exchange(api, "ReleaseAssignment", name, force=True)
        return self.path("release", name)

    def collect(self, name: str) -> list[str]:
        """Copy what students submitted through the exchange into ``submitted/`` (newest
        submission of each student); returns the students collected."""
        self.require_released(name)
        api = self.nbgrader_api()
        self._nbgrader_exchange(api, "Collect", name, update=True)
        return self.students_with_submissions(name)

    def _nbgrader_exchange(self, api, action: str, name: str, **options) -> None:
        from nbgrader.utils import capture_log, temp_attrs

        with temp_attrs(api.coursedir, assignment_id=name):
            app = getattr(api.exchange, action)(
                coursedir=api.coursedir, authenticator=api.authenticator, parent=api)
            for key, value in options.items():
                setattr(app, key, value)
            result = capture_log(app)
        if not result.get("success"):
            raise CourseError(
                f"nbgrader's exchange could not {action} '{name}' in {self.exchange}:\n"
                f"{result.get('error') or result.get('log')}")

    def edited_release(self, name: str) -> list[str]:
        """Released notebooks of ``name`` whose answer cells were changed since release.

        nbgrader stores a checksum of every answer cell when it releases a notebook; a
        cell that no longer matches holds someone's work (a self-learner works right in
        ``release/``), which releasing again would overwrite."""
        from nbgrader.utils import compute_checksum

        edited = []
        for path in sorted(self.path("release", name).glob("*.ipynb")):
            try:
                nb = nbformat.read(path, as_version=4)
            except Exception:  # unreadable: whatever it is, it is not a fresh release
                edited.append(path.name)
                continue
            for cell in nb.cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("solution") and meta.get("checksum") not in (
                    None, compute_checksum(cell)
                ):
                    edited.append(path.name)
                    break
        return edited

    def gradebook(self):
        _venv_on_path()
        from nbgrader.api import Gradebook

        return Gradebook(self.db_url, COURSE_ID)

    def students_with_submissions(self, assignment: str) -> list[str]:
        base = self.path("submitted")
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir())
