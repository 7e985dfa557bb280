"""``autograder grade``: grade every submission of an assignment, in parallel, resumably.

The main process prepares jobs (:class:`~autograder.jobs.Job`; reading and
sanitising notebooks needs the gradebook), hands them to workers (a local process
pool by default, or a Dask cluster with ``--scheduler``), and records each
:class:`~autograder.jobs.NotebookResult` as it arrives: it is the gradebook's only
writer. A student's results file is written last, so a run that is interrupted
(Ctrl-C, a killed process, a full disk) and started again grades only the
submissions that had not finished, unless ``force`` is given.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import os
import socket
import sys
import time
from collections.abc import Iterable
from concurrent.futures import as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from tqdm import tqdm

from ..jobs import Job, NotebookResult, WorkerSetupError
from ..sandbox import gpu
from ..sandbox.kernel import describe_isolation, kernel_start_mode
from ..workspace.course import AssignmentSpec, Course, CourseError
from . import gradebook as writer
from .sanitize import NotGradable, grade_cell_ids, sanitized_job
from .workers import (
    local_workers,
    raise_if_stop_requested,
    stop_workers,
    stops_cleanly,
    worker_pool,
    worker_stopped,
)


def submission_digest(submission_dir: Path) -> str:
    """A hash of every file a student handed in (what 'already graded' refers to)."""
    digest = hashlib.sha256()
    for path in sorted(p for p in submission_dir.rglob("*") if p.is_file() and not p.is_symlink()):
        digest.update(str(path.relative_to(submission_dir)).encode("utf-8", "surrogateescape"))
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def _job(
    course: Course, spec: AssignmentSpec, student: str, notebook_id: str, gb, auto_points: dict
) -> Job | NotebookResult:
    """The job for a worker, or the result of a notebook that cannot run at all."""
    try:
        return sanitized_job(course, spec, student, notebook_id,
                             course.path("submitted", student, spec.name), gb, auto_points)
    except NotGradable as exc:
        return NotebookResult.not_run(exc.job, f"not graded: {exc}",
                                      describe_isolation(exc.job.limits))


@stops_cleanly
def _run_job(job: Job) -> NotebookResult:
    """A worker's task. The runner (and with it torch) is imported in the worker only:
    the grader's own process never grades, and starts its workers a second sooner."""
    from .runner import grade_notebook

    return grade_notebook(job)


def pending_students(course: Course, spec: AssignmentSpec, students, force: bool) -> dict[str, str]:
    """``{student: submission digest}`` for the submissions that still need grading."""
    chosen = students or course.students_with_submissions(spec.name)
    missing = [s for s in chosen if not course.path("submitted", s, spec.name).is_dir()]
    if missing:
        raise CourseError(
            f"no submission of '{spec.name}' for: {', '.join(missing)} "
            f"(expected {course.path('submitted', missing[0], spec.name)})"
        )
    todo = {}
    for student in chosen:
        done = writer.read_result_file(course, spec.name, student)
        digest = submission_digest(course.path("submitted", student, spec.name))
        if force or not done or done.get("digest") != digest or _lost(course, spec, done):
            todo[student] = digest
    return todo


def _lost(course: Course, spec: AssignmentSpec, done: dict) -> bool:
    """Whether an autograded notebook this student's results file vouches for is gone:
    formgrader deletes a student's autograded folder when its Autograde fails (the
    assignment busy, say), and feedback and manual grading need the notebook back."""
    folder = course.path("autograded", done.get("student", ""), spec.name)
    # (A results file older than the "autograded" key: a notebook that ran has checks.)
    return any(summary.get("autograded", bool(summary.get("checks")))
               and not (folder / f"{nb_id}.ipynb").is_file()
               for nb_id, summary in done.get("notebooks", {}).items())


def grade(
    course: Course,
    name: str,
    students=None,
    workers: int | None = None,
    scheduler: str | None = None,
    force: bool = False,
    progress: bool = True,
    log=print,
    cell_timeout: float | None = None,
    focus: dict[str, tuple[str, ...]] | None = None,
) -> dict:
    """Grade an assignment. Returns ``{"graded": [...], "skipped": [...], "isolation": ...}``.

    ``focus``: ``{student: grade cells}``, for which students only the hidden checks of
    those cells run (the others score nothing): ``autograder validate`` grades each named
    mutant on the cells it breaks. Never used for a class."""
    spec = course.require_released(name)
    with _one_grader(course, name):
        return _grade(course, spec, students, workers, scheduler, force, progress, log,
                      cell_timeout, focus or {})


@contextlib.contextmanager
def _one_grader(course: Course, name: str):
    """Hold the assignment's grading lock, or refuse: two runs at once (a second terminal,
    formgrader's Autograde button) would each pick the same pending submissions. The
    lock goes with the process, however it ends, even by ``kill -9``."""
    folder = course.results_dir(name)
    with writer.stop_on_full_disk(course):  # the lock file is the run's first write
        folder.mkdir(parents=True, exist_ok=True)
        # Unbuffered: a note that finds no room is not written again when the file closes.
        lock = open(folder / ".grading.lock", "a+b", buffering=0)
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().decode(errors="replace").strip() or "another process"
            raise CourseError(f"{name} is being graded already ({holder}): wait for that run "
                              "to finish, or stop it, then run this command again") from None
        try:  # who holds it, for the message a second run prints
            lock.seek(0)
            lock.truncate()
            lock.write(f"process {os.getpid()} on {socket.gethostname()}, since "
                       f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
        except OSError:
            pass  # no room for the note: the lock holds all the same
        yield


def _grade(course, spec, students, workers, scheduler, force, progress, log, cell_timeout,
           focus):
    if cell_timeout:
        limits = dataclasses.replace(spec.limits, cell_timeout=cell_timeout)
        spec = dataclasses.replace(spec, limits=limits)
    all_students = students or course.students_with_submissions(spec.name)
    if not all_students:
        log(
            f"No submissions of {spec.name} yet: put each student's files in "
            f"{course.path('submitted')}/<student>/{spec.name}/"
        )
    todo = pending_students(course, spec, students, force)
    skipped = [s for s in all_students if s not in todo]
    isolation = describe_isolation(spec.limits)
    log(
        f"Grading {spec.name}: {len(todo)} submission(s) to grade, {len(skipped)} already graded; "
        f"isolation: {isolation}; "
        f"kernels: {kernel_start_mode(gpu.in_use(spec.limits))}"
    )
    if not todo:
        return {"graded": [], "skipped": skipped, "isolation": isolation}
    writer.ensure_room(course)  # a full disk stops us here, before anything is written

    pending = {student: {"digest": digest, "notebooks": {}, "left": len(spec.notebooks)}
               for student, digest in todo.items()}
    bar = tqdm(
        total=len(todo) * len(spec.notebooks),
        desc=f"grading {spec.name}",
        unit="nb",
        disable=not progress,
        file=sys.stderr,
    )

    def jobs(gb):
        """Each notebook's job, read and sanitised against the gradebook ``gb``. A local pool
        takes them as they come, so its workers start while the rest are prepared."""
        cells = {nb_id: grade_cell_ids(gb, nb_id, spec.name) for nb_id in spec.notebooks}
        for student in todo:
            for notebook_id in spec.notebooks:
                points, manual = cells[notebook_id]
                pending[student]["notebooks"][notebook_id] = (points, manual)
                job = _job(course, spec, student, notebook_id, gb, points)
                if isinstance(job, NotebookResult):
                    _finish(course, spec, gb, job, pending)
                    bar.update(1)
                elif student in focus:
                    yield dataclasses.replace(job, grade_cells=tuple(focus[student]))
                else:
                    yield job

    unfinished = []  # jobs whose worker stopped: not the submission's fault, not recorded
    misplaced = []  # jobs a worker could not see the files of: not recorded either
    # One gradebook for the whole run: each opening makes a new database engine.
    with course.gradebook() as gb:
        try:
            for job, result in _execute(jobs(gb), len(todo) * len(spec.notebooks), workers,
                                        scheduler):
                raise_if_stop_requested()  # a Ctrl-C the interpreter swallowed stops us here
                if isinstance(result, BaseException) and worker_stopped(result):
                    unfinished.append(job)
                    continue
                if isinstance(result, WorkerSetupError):
                    misplaced.append((job, result))
                    continue
                if isinstance(result, BaseException):
                    error = f"grading error: {type(result).__name__}: {result}"
                    result = NotebookResult.not_run(job, error, isolation)
                _finish(course, spec, gb, result, pending)
                bar.update(1)
        except writer.DiskFull as exc:
            done = sum(1 for state in pending.values() if state.get("recorded"))
            raise writer.DiskFull(f"{exc} ({done} of {len(todo)} submissions were recorded "
                                  "in this run)") from None
        finally:
            bar.close()
    if misplaced:
        students = sorted({job.student for job, _ in misplaced})
        raise CourseError(
            f"{len(students)} submission(s) were not graded: {misplaced[0][1]}. Nothing was "
            f"recorded for {', '.join(students[:10])}{' ...' if len(students) > 10 else ''}; "
            "run the same command again once every worker sees those folders")
    if unfinished:
        students = sorted({job.student for job in unfinished})
        raise CourseError(
            f"{len(students)} submission(s) were not graded because a grading worker stopped "
            f"(killed, or out of memory): {', '.join(students[:10])}"
            f"{' ...' if len(students) > 10 else ''}. Nothing was recorded for them; run the "
            "same command again to grade them")
    graded = [s for s in todo if pending[s].get("recorded")]
    return {"graded": graded, "skipped": skipped, "isolation": isolation}


def _finish(course, spec, gb, result: NotebookResult, pending) -> None:
    """Record one notebook (in the open gradebook ``gb``); once a student's last notebook
    is in, their results file."""
    student, notebook_id = result.student, result.notebook_id
    points, manual = pending[student]["notebooks"][notebook_id]
    summary = writer.record(
        course, spec, gb, result, points, manual, course.path("submitted", student, spec.name)
    )
    state = pending[student]
    state.setdefault("done", {})[notebook_id] = summary
    state["left"] -= 1
    if state["left"] == 0:
        writer.write_result_file(
            course,
            spec.name,
            student,
            {
                "student": student,
                "assignment": spec.name,
                "digest": state["digest"],
                "notebooks": state["done"],
            },
        )
        state["recorded"] = True


def _execute(jobs: Iterable[Job], count: int, workers: int | None, scheduler: str | None):
    """Yield ``(job, result or exception)`` as results arrive, from a local pool or Dask.

    ``count``: at most how many jobs ``jobs`` yields (it sizes the pool). A local pool of
    two or more workers submits each job as ``jobs`` yields it; Dask and a single worker
    take the whole list first."""
    workers = local_workers(workers, count)
    if scheduler or workers == 1:
        jobs = list(jobs)
        if not jobs:
            return
    if scheduler:
        from distributed import Client
        from distributed import as_completed as dask_completed

        try:
            client = Client(scheduler, timeout="30s")
        except (OSError, ValueError) as exc:  # nobody answers; not an address
            raise CourseError(
                f"--scheduler {scheduler}: no Dask scheduler reached ({exc}); start one "
                "(`dask scheduler`, then `dask worker ADDRESS` on each machine) or leave "
                "--scheduler out to grade on this machine; what is left is graded when the "
                "command runs again."
            ) from None
        with client:
            futures = {
                client.submit(
                    _run_job,
                    job,
                    pure=False,
                    key=f"grade-{job.student}-{job.notebook_id}-{os.urandom(4).hex()}",
                ): job
                for job in jobs
            }
            for future in dask_completed(futures):
                try:
                    yield futures[future], future.result()
                except Exception as exc:
                    yield futures[future], exc
        return
    if workers == 1:
        for job in jobs:
            try:
                yield job, _run_job(job)
            except Exception as exc:
                yield job, exc
        return
    with worker_pool(workers) as pool:
        try:
            futures = {}
            for job in jobs:
                try:
                    futures[pool.submit(_run_job, job)] = job
                except BrokenProcessPool as exc:  # a worker died: this one is not graded now
                    yield job, exc
            for future in as_completed(futures):
                try:
                    yield futures[future], future.result()
                except Exception as exc:
                    yield futures[future], exc
        except BaseException:  # Ctrl-C, SIGTERM (Terminated), a full disk: stop them all
            stop_workers(pool)
            raise
