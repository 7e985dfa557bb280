"""``autograder grade``: grade every submission of an assignment, in parallel, resumably.

The main process prepares jobs (reading and sanitising notebooks needs the
gradebook), hands them to workers (a local process pool by default, or a Dask
cluster with ``--scheduler``), and records each result as it arrives: it is the
gradebook's only writer. A student's results file is written last, so a run that
is interrupted (Ctrl-C, a killed process) and started again grades only the
submissions that had not finished, unless ``force`` is given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import multiprocessing
import os
import sys
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import nbformat
from tqdm import tqdm

from . import forkserver
from . import gradebook as writer
from .course import AssignmentSpec, Course
from .runner import grade_notebook
from .sandbox import isolation_level
from .sanitize import NotGradable, grade_cell_ids, read_submission, sanitize


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
) -> tuple:
    """(job for a worker, or None with the outcome of a notebook that cannot run)."""
    submission_dir = course.path("submitted", student, spec.name)
    try:
        nb = read_submission(submission_dir / f"{notebook_id}.ipynb")
        nb, findings = sanitize(
            nb,
            db_url=course.db_url,
            assignment=spec.name,
            notebook_id=notebook_id,
            student=student,
            gradebook=gb,
        )
    except NotGradable as exc:
        outcome = {
            "notebook": None,
            "checks": [],
            "events": [f"not graded: {exc}"],
            "findings": [],
            "isolation": isolation_level(),
            "seconds": 0.0,
        }
        return None, outcome
    job = {
        "student": student,
        "assignment": spec.name,
        "notebook_id": notebook_id,
        "notebook": nb,
        "submission_dir": str(submission_dir),
        "test_cell_ids": sorted(auto_points),
        "checks_dir": str(spec.checks_dir()),
        "assignment_dir": str(spec.path),
        "cell_timeout": spec.cell_timeout,
        "submission_timeout": spec.submission_timeout,
        "call_timeout": spec.call_timeout,
        "memory_bytes": spec.memory_bytes,
        "forbid": spec.forbid,
        "hidden": [str(course.root), str(course.assignments_dir), str(spec.checks_dir())],
        "findings": findings,
    }
    return job, None


def _run_job(job: dict) -> dict:
    result = grade_notebook(job)
    result["findings"] = job.get("findings", [])
    result["notebook"] = nbformat.from_dict(result["notebook"])
    return result


def pending_students(course: Course, spec: AssignmentSpec, students, force: bool) -> dict[str, str]:
    """``{student: submission digest}`` for the submissions that still need grading."""
    chosen = students or course.students_with_submissions(spec.name)
    missing = [s for s in chosen if not course.path("submitted", s, spec.name).is_dir()]
    if missing:
        from .course import CourseError

        raise CourseError(
            f"no submission of '{spec.name}' for: {', '.join(missing)} "
            f"(expected {course.path('submitted', missing[0], spec.name)})"
        )
    todo = {}
    for student in chosen:
        done = writer.read_result_file(course, spec.name, student)
        digest = submission_digest(course.path("submitted", student, spec.name))
        if force or not done or done.get("digest") != digest:
            todo[student] = digest
    return todo


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
) -> dict:
    """Grade an assignment. Returns ``{"graded": [...], "skipped": [...], "isolation": ...}``."""
    course.require()
    spec = course.spec(name)
    if cell_timeout:
        spec = dataclasses.replace(spec, cell_timeout=cell_timeout)
    with course.gradebook() as gb:
        try:
            gb.find_assignment(spec.name)
        except Exception:
            from .course import CourseError

            raise CourseError(
                f"'{name}' has not been released: run `autograder release {name}`"
            ) from None
    all_students = students or course.students_with_submissions(spec.name)
    if not all_students:
        log(
            f"No submissions of {spec.name} yet: put each student's files in "
            f"{course.path('submitted')}/<student>/{spec.name}/"
        )
    todo = pending_students(course, spec, students, force)
    skipped = [s for s in all_students if s not in todo]
    isolation = isolation_level()
    log(
        f"Grading {spec.name}: {len(todo)} submission(s) to grade, {len(skipped)} already graded; "
        f"isolation: {isolation}; kernels: {forkserver.kernel_start_mode()}"
    )
    if not todo:
        return {"graded": [], "skipped": skipped, "isolation": isolation}

    jobs, pending = [], {}
    with course.gradebook() as gb:
        cells = {nb_id: grade_cell_ids(gb, nb_id, spec.name) for nb_id in spec.notebooks}
        for student in todo:
            pending[student] = {
                "digest": todo[student],
                "notebooks": {},
                "left": len(spec.notebooks),
            }
            for notebook_id in spec.notebooks:
                points, manual = cells[notebook_id]
                job, outcome = _job(course, spec, student, notebook_id, gb, points)
                pending[student]["notebooks"][notebook_id] = (points, manual)
                if job is None:
                    _finish(course, spec, student, notebook_id, outcome, pending)
                else:
                    jobs.append(job)

    bar = tqdm(
        total=len(jobs),
        desc=f"grading {spec.name}",
        unit="nb",
        disable=not progress,
        file=sys.stderr,
    )
    try:
        for job, result in _execute(jobs, workers, scheduler):
            if isinstance(result, BaseException):
                result = {
                    "notebook": job["notebook"],
                    "checks": [],
                    "findings": job["findings"],
                    "events": [f"grading error: {type(result).__name__}: {result}"[:500]],
                    "isolation": isolation,
                    "seconds": 0.0,
                }
            _finish(course, spec, job["student"], job["notebook_id"], result, pending)
            bar.update(1)
    finally:
        bar.close()
    return {"graded": list(todo), "skipped": skipped, "isolation": isolation}


def _finish(course, spec, student, notebook_id, outcome, pending) -> None:
    points, manual = pending[student]["notebooks"][notebook_id]
    summary = writer.record(
        course,
        spec,
        student,
        notebook_id,
        outcome,
        points,
        manual,
        course.path("submitted", student, spec.name),
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


def _execute(jobs: list[dict], workers: int | None, scheduler: str | None):
    """Yield ``(job, result or exception)`` as results arrive, from a local pool or Dask."""
    if not jobs:
        return
    if scheduler:
        from distributed import Client
        from distributed import as_completed as dask_completed

        with Client(scheduler, timeout="30s") as client:
            futures = {
                client.submit(
                    _run_job,
                    job,
                    pure=False,
                    key=f"grade-{job['student']}-{job['notebook_id']}-{os.urandom(4).hex()}",
                ): job
                for job in jobs
            }
            for future in dask_completed(futures):
                try:
                    yield futures[future], future.result()
                except Exception as exc:
                    yield futures[future], exc
        return
    workers = max(1, workers or min(len(jobs), os.cpu_count() or 1))
    if workers == 1:
        for job in jobs:
            try:
                yield job, _run_job(job)
            except Exception as exc:
                yield job, exc
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        futures = {pool.submit(_run_job, job): job for job in jobs}
        try:
            for future in as_completed(futures):
                try:
                    yield futures[future], future.result()
                except Exception as exc:
                    yield futures[future], exc
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
