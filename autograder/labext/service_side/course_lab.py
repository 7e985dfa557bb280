"""The server side of the Course panel: one object per Jupyter server, configured with
traitlets (``c.CourseLab.cooldown_seconds = 60`` in ``jupyter_server_config.py``).

It finds the course workspace, answers what the panel shows, and runs checks:

* one check per user at a time (a second request gets "already checking");
* at most ``check_workers`` checks at once, each in a worker process
  (:func:`.check_my_work.check_notebook`), replaced if it stops answering;
* results cached by content hash (:func:`.check_my_work.content_hash`), so
  checking the same work twice costs nothing and never counts against the cool-down;
* a per-user cool-down between checks that do run;
* each user's latest result per assignment kept on disk (``<workspace>/check-my-work/``),
  as the student saw it (already cut to the visibility setting).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import datetime as dt
import json
import os
import re
import shutil
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path, PurePosixPath

from traitlets import Bool, Float, Int, Unicode
from traitlets.config import LoggingConfigurable

from ...grading.sanitize import NotGradable
from ...grading.workers import worker_pool
from ...workspace.course import SETTINGS_FILE, Course, CourseError
from ...workspace.outline import load_outline
from ..handin import CheckRefused, notebook_under, stage_submission, unpack
from . import catalog
from .check_my_work import check_notebook, content_hash, read_notebook, warm_up
from .locate import NotAnAssignment, locate, released_cells
from .visibility import student_view

#: When to suggest trying again after "already checking" or a check that failed (seconds).
BUSY_RETRY_SECONDS = 15


class CourseLab(LoggingConfigurable):
    course_dir = Unicode(
        "", config=True,
        help="The course workspace (made by `autograder init`). Default: the server's root "
             "folder or the first of its parents that is one, else course-workspace/ in "
             "the checkout.")
    cooldown_seconds = Float(10.0, config=True,
                             help="Seconds a user waits between two checks that run.")
    check_workers = Int(1, config=True, help="Checks that may run at once (one per user).")
    check_timeout = Float(0.0, config=True,
                          help="Give up on a check after this many seconds (0: the "
                               "assignment's own submission time limit plus ten minutes).")
    cache_size = Int(256, config=True, help="Results kept in memory, by content hash.")
    warm_start = Bool(True, config=True,
                      help="Start the checking sandbox's fork server and the mistake oracle "
                           "when the Course panel first opens, so that the first check does "
                           "not wait for them (about 5 s). They hold about 0.5 GB per check "
                           "worker until the server stops; False starts them at the first "
                           "check.")

    def __init__(self, root_dir: str, **kwargs):
        super().__init__(**kwargs)
        self.root_dir = Path(root_dir).resolve()
        self._busy: dict[str, str] = {}
        self._last_run: dict[str, float] = {}
        self._cache: collections.OrderedDict[str, dict] = collections.OrderedDict()

    # -- the workspace ----------------------------------------------------------------
    def course(self) -> Course | None:
        """The course workspace, or None when there is none to be found."""
        candidates = [Path(self.course_dir).expanduser()] if self.course_dir else [
            self.root_dir, *self.root_dir.parents, Course().root]
        for folder in candidates:
            if (folder / "nbgrader_config.py").is_file() and (folder / SETTINGS_FILE).is_file():
                return Course(folder)
        return None

    def describe(self) -> str:
        """For the server's log: where checks run."""
        course = self.course()
        return (f"course workspace {course.root}" if course else
                "no course workspace found (the panel says how to make one)")

    def _require_course(self) -> Course:
        course = self.course()
        if course is None:
            raise CheckRefused(503, "no course workspace found: run `make lab`, or "
                                    "`autograder init` and `autograder release --all`")
        return course

    # -- GET /autograder/api/course ------------------------------------------------------
    async def course_view(self, user: str) -> dict:
        course = self.course()
        if course is None:
            return catalog.no_workspace(self.root_dir)
        self._start_pool(course)
        return await asyncio.to_thread(catalog.course_view, course, self.root_dir,
                                       self._latest(course, user))

    # -- POST /autograder/api/check -------------------------------------------------------
    async def check(self, user: str, raw_path) -> dict:
        path = notebook_under(self.root_dir, raw_path)
        rel = PurePosixPath(path.relative_to(self.root_dir).as_posix())
        with self._one_at_a_time(user, rel):
            return await self._check(user, path, rel, saved_at=path.stat().st_mtime)

    async def check_upload(self, user: str, raw_rel, upload: bytes) -> dict:
        """``POST /check`` of ``autograder serve-checks``: a notebook packed by the student's
        own Jupyter server (:func:`..student_side.shared_server.pack`), ``raw_rel`` its path
        there."""
        rel = PurePosixPath(raw_rel.strip()) if isinstance(raw_rel, str) else None
        if rel is None or rel.suffix != ".ipynb" or rel.is_absolute() or ".." in rel.parts:
            raise CheckRefused(400, "send ?path=<the notebook's path under your server root>")
        with self._one_at_a_time(user, rel):
            staging = Path(tempfile.mkdtemp(prefix="check-upload-"))
            try:
                await asyncio.to_thread(unpack, upload, staging)
                if not (staging / rel.name).is_file():
                    raise CheckRefused(400, f"the hand-in does not hold {rel.name}")
                return await self._check(user, staging / rel.name, rel)
            finally:
                shutil.rmtree(staging, ignore_errors=True)

    @contextlib.contextmanager
    def _one_at_a_time(self, user: str, what: PurePosixPath):
        if user in self._busy:
            raise CheckRefused(409, f"already checking {self._busy[user]}: wait for that "
                                    "result, then check again", BUSY_RETRY_SECONDS)
        self._busy[user] = str(what)
        try:
            yield
        finally:
            self._busy.pop(user, None)

    async def _check(self, user: str, path: Path, rel: PurePosixPath,
                     saved_at: float | None = None) -> dict:
        course = self._require_course()
        try:
            nb = await asyncio.to_thread(read_notebook, path)
        except NotGradable as exc:
            raise CheckRefused(400, f"{exc}; fix the file (or restore it from release/) "
                                    "and save it again") from None
        try:
            outline = load_outline(course.outline_file, course.assignments_dir)
        except CourseError as exc:
            raise CheckRefused(500, f"the course outline is broken: {exc}") from None
        try:
            released = await asyncio.to_thread(released_cells, course, outline.names())
            found = locate(nb, rel, released, outline.names())
        except NotAnAssignment as exc:
            raise CheckRefused(exc.status, str(exc)) from None
        entry = outline.assignment(found.assignment)
        if entry.visibility == "off":
            raise CheckRefused(403, f"checking is switched off for {found.assignment}: your "
                                    "instructor grades it after the deadline")
        spec = course.spec(found.assignment)
        staging = Path(tempfile.mkdtemp(prefix="check-my-work-"))
        try:
            notes = stage_submission(path, staging / "submission", found.notebook_id)
            key = content_hash(nb, staging / "submission", spec.checks_dir(),
                               spec.path / "assignment.toml")
            trusted, cached = self._cache.get(key), True
            if trusted is None:
                trusted, cached = await self._run(user, course, found, staging, spec), False
                self._remember(key, trusted)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        view = student_view(trusted, entry.visibility, catalog.exercise_order(course, found))
        view["notes"] = [*found.notes, *notes, *view["notes"]]
        view.update(
            assignment=found.assignment,
            notebook=found.notebook_id,
            path=str(rel),
            cached=cached,
            checked_at=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            seconds=trusted.get("seconds"),
            isolation=trusted.get("isolation"),
            saved_at=saved_at,  # when the checked file was saved (POSIX time; local checks)
        )
        await asyncio.to_thread(self._save_latest, course, user, view)
        return view

    async def _run(self, user, course, found, staging: Path, spec) -> dict:
        wait = self._last_run.get(user, -1e9) + self.cooldown_seconds - time.monotonic()
        if wait > 0:
            raise CheckRefused(429, f"you checked a moment ago: wait {max(1, round(wait))} s "
                                    "and check again (unchanged work is answered at once)",
                               wait)
        self._last_run[user] = time.monotonic()
        pool = self._start_pool(course)
        future = pool.submit(check_notebook, str(course.root), str(course.assignments_dir),
                             found.assignment, found.notebook_id,
                             str(staging / "submission"), user)
        limit = self.check_timeout or spec.limits.submission_timeout + 600
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), timeout=limit)
        except TimeoutError:
            self._stop_pool()
            raise CheckRefused(504, f"the check did not finish within {limit:.0f} s; try "
                                    "again, and tell your instructor if it happens again",
                               BUSY_RETRY_SECONDS) from None
        except Exception as exc:  # the worker died, or the pipeline itself failed
            self.log.error("check of %s for %s failed: %s", found.assignment, user, exc)
            if type(exc).__name__ == "BrokenProcessPool":
                self._stop_pool()
            raise CheckRefused(500, "the check could not run (the grader failed, not your "
                                    "notebook); try again, and tell your instructor if it "
                                    "happens again", BUSY_RETRY_SECONDS) from None

    async def last_checked(self, user: str, assignment: str) -> dict:
        """``{notebook id: {"path", "saved_at"}}``: what ``user`` checked last of
        ``assignment`` (the Assignment List's Submit compares it with the fetched copy)."""
        course = self.course()
        if course is None:
            return {}
        mine = (await asyncio.to_thread(self._latest, course, user)).get(assignment)
        if not isinstance(mine, dict):
            return {}
        return {nb: {"path": v.get("path"), "saved_at": v.get("saved_at")}
                for nb, v in mine.items() if isinstance(v, dict)}

    # -- worker processes -----------------------------------------------------------------
    def start_workers(self, course: Course) -> None:
        """Start the check workers now (and, with ``warm_start``, their sandboxes)."""
        self._start_pool(course)

    def _start_pool(self, course: Course) -> ProcessPoolExecutor:
        return _worker_pool(self.check_workers, course if self.warm_start else None)

    def _stop_pool(self) -> None:
        _stop_worker_pool()

    # -- results ----------------------------------------------------------------------------
    def _remember(self, key: str, trusted: dict) -> None:
        self._cache[key] = trusted
        self._cache.move_to_end(key)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    @staticmethod
    def _results_file(course: Course, user: str) -> Path:
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", user) or "user"
        return course.root / "check-my-work" / f"{safe}.json"

    def _latest(self, course: Course, user: str) -> dict:
        try:
            data = json.loads(self._results_file(course, user).read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _save_latest(self, course: Course, user: str, view: dict) -> None:
        path = self._results_file(course, user)
        data = self._latest(course, user)
        data.setdefault(view["assignment"], {})[view["notebook"]] = view
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f, indent=1)
        os.replace(tmp, path)


# One pool per process, started on first use: its workers keep their fork servers warm
# from one check to the next, and exit with the process.
_POOL: ProcessPoolExecutor | None = None


def _worker_pool(workers: int, warm_for: Course | None) -> ProcessPoolExecutor:
    """The pool, started on first use; ``warm_for``: start a check's sandbox for that
    course right away (:func:`.check_my_work.warm_up`), once per worker as the pool hands them out
    (a worker that gets a second one finds its sandbox started and returns at once)."""
    global _POOL
    if _POOL is None:
        workers = max(1, workers)
        _POOL = worker_pool(workers)  # workers stop when the server does
        for _ in range(workers if warm_for is not None else 0):
            _POOL.submit(warm_up, str(warm_for.root), str(warm_for.assignments_dir))
    return _POOL


def _stop_worker_pool() -> None:
    """Drop the pool and kill its workers (processes this module started) if they hang."""
    global _POOL
    pool, _POOL = _POOL, None
    if pool is None:
        return
    for process in list(getattr(pool, "_processes", {}).values()):
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)
