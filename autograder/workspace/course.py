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

from . import gradebook_url, nbgrader_settings

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
from .nbgrader_settings import COURSE_ID

DEFAULT_COURSE_DIR = PROJECT_ROOT / "course-workspace"
SETTINGS_FILE = "autograder.json"

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
        self._exchange: str | None = saved.get("exchange")

    def _outline_file(self) -> Path:
        """``course/course.toml`` beside the assignments folder (or AUTOGRADER_COURSE_FILE)."""
        if os.environ.get("AUTOGRADER_COURSE_FILE"):
            return Path(os.environ["AUTOGRADER_COURSE_FILE"]).resolve()
        return self.assignments_dir.parent / "course" / "course.toml"

    def outline(self):
        """The course outline (:mod:`.outline`): what to teach, in which order."""
        from .outline import load_outline

        return load_outline(self.outline_file, self.assignments_dir)

    # -- layout ------------------------------------------------------------------
    @property
    def db_url(self) -> str:
        """The gradebook's SQLAlchemy URL (see :mod:`autograder.workspace.gradebook_url`)."""
        return self._db_url or gradebook_url.sqlite_url(self.root)

    @property
    def exchange(self) -> Path:
        """nbgrader's exchange directory (fetch, submit, collect): inside the workspace,
        unless ``init(exchange=...)`` put it elsewhere (a private workspace on a server
        that students share keeps the exchange outside, where they can reach it)."""
        return Path(self._exchange) if self._exchange else self.root / "exchange"

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
    def init(self, db_url: str | None = None, exchange: Path | str | None = None) -> None:
        """Create the workspace (idempotent) and build every assignment's source notebooks.

        ``db_url`` puts the gradebook in another database (PostgreSQL, say), ``exchange``
        nbgrader's exchange in another folder; without them a workspace keeps those it
        was created with (by default SQLite and ``exchange/`` inside it)."""
        if exchange is not None:
            self._exchange = str(Path(exchange).expanduser().resolve())
        if db_url is not None:
            try:
                self._db_url = gradebook_url.check(db_url)
            except gradebook_url.GradebookUrlError as exc:
                raise CourseError(str(exc)) from None
        for kind in ("source", "release", "submitted", "autograded", "feedback", "autograder"):
            self.path(kind).mkdir(parents=True, exist_ok=True)
        # nbgrader's exchange: students fetch from and submit to it, `collect` reads it.
        # Every student account must be able to write here (as nbgrader asks).
        try:
            self.exchange.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CourseError(f"cannot create the exchange {self.exchange} ({exc.strerror}): "
                              f"make it as its parent's owner (`mkdir -p {self.exchange} && "
                              f"chmod 777 {self.exchange}`), then run init again") from None
        try:
            os.chmod(self.exchange, 0o777)
        except PermissionError:  # another owner's folder: fine if it is open already
            if self.exchange.stat().st_mode & 0o777 != 0o777:
                raise CourseError(f"every student must be able to write to the exchange "
                                  f"{self.exchange}: run `chmod 777 {self.exchange}` as its "
                                  "owner") from None
        (self.root / "nbgrader_config.py").write_text(nbgrader_settings.config_file(self))
        settings = {
            "assignments_dir": str(self.assignments_dir),
            "course_file": str(self.outline_file),
        }
        if self._db_url:
            settings["db_url"] = self._db_url
        if self._exchange:
            settings["exchange"] = self._exchange
        settings_path = self.root / SETTINGS_FILE
        settings_path.write_text(json.dumps(settings, indent=1) + "\n")
        gradebook_url.protect(self.db_url, [self.root / "nbgrader_config.py", settings_path])
        for name in available_assignments(self.assignments_dir):
            self.build_source(self.spec(name))
        self.build_lectures()

    def build_lectures(self) -> list[Path]:
        """The outline's lectures as notebooks in ``lectures/`` (see
        :func:`autograder.workspace.outline.lecture_notebook`), and its README as the workspace's
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

        The hidden checks (``<name>/checks/``) never go along: a release is built from
        ``source/``."""
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

        config = nbgrader_settings.config(self)
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
        from .assistant_rules import write_rules

        # Rules for students' coding assistants, beside the notebooks (course.toml).
        write_rules(self.path("release", name), self.outline().assistant_rules)
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

    def release_feedback(self, name: str) -> list[str]:
        """Hand the feedback written under ``feedback/`` to the exchange, where each student's
        "Fetch Feedback" (``nbgrader fetch_feedback``) finds the pages of their own
        submission; returns the students whose feedback was released."""
        self.require_released(name)
        written = sorted(p.parent.name for p in self.path("feedback").glob(f"*/{name}")
                         if p.is_dir())
        # nbgrader files feedback under a secret its Submit wrote beside the submission:
        # work placed in submitted/ by hand (not through the exchange) has none to match.
        by_exchange = [s for s in written
                       if (self.path("feedback", s, name) / "submission_secret.txt").is_file()]
        if by_exchange:
            from nbgrader.utils import temp_attrs

            api = self.nbgrader_api()
            others = ",".join(s for s in written if s not in by_exchange)
            with temp_attrs(api.coursedir, student_id_exclude=others):
                self._nbgrader_exchange(api, "ReleaseFeedback", name)
        return by_exchange

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
