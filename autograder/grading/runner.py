"""Grade one notebook of one submission: execute it sandboxed, then run the hidden checks.

This is the unit of work that runs in parallel (a local process pool or a Dask
worker). It takes a :class:`~autograder.jobs.Job` and returns a
:class:`~autograder.jobs.NotebookResult`, touches nothing but the submission's own
capped storage, and never writes the gradebook: the single writer in
:mod:`autograder.grading.gradebook` does that.
"""

from __future__ import annotations

import contextlib
import socket
import time
from pathlib import Path

import nbformat

from ..jobs import Job, NotebookResult, WorkerSetupError
from ..protocol import kernel_side
from ..protocol.trusted import Submission
from ..sandbox.kernel import SandboxedKernel, describe_isolation
from .check_session import run_checks

__all__ = ["WorkerSetupError", "describe_isolation", "grade_notebook", "run_checks"]


def _diagnose(job: Job, result: NotebookResult, transcripts: dict, uses_gpu: bool) -> None:
    """Name the classic mistakes behind failing checks (see :mod:`autograder.grading.diagnosis`)."""
    if job.assignment_dir is None or all(c.passed for c in result.checks):
        return
    from ..workspace.course import AssignmentSpec
    from .diagnosis import annotate, diagnose
    from .oracle import shared_oracle

    folder = Path(job.assignment_dir)
    spec = AssignmentSpec.load(folder.name, folder.parent)
    oracle = shared_oracle(uses_gpu=uses_gpu)
    diagnoses = diagnose(spec, job.notebook_id, result.checks, transcripts, oracle,
                         graded_cells=job.grade_cells)
    annotate(result.checks, diagnoses)
    result.diagnoses = [d.as_dict() for d in diagnoses]


def _check_paths(job: Job) -> None:
    """Raise :class:`WorkerSetupError` unless this machine sees the job's folders."""
    folders = (job.checks_dir, job.submission_dir, job.assignment_dir)
    missing = [str(p) for p in folders if p is not None and not Path(p).is_dir()]
    if missing:
        raise WorkerSetupError(
            f"the grading worker on {socket.gethostname()} cannot see {', '.join(missing)}. "
            "Jobs name files by path: every Dask worker needs this project and the course "
            "workspace at the same paths as the grader (a shared file system)")


def _warm_oracle(job: Job, uses_gpu: bool) -> None:
    """Start this process's mistake oracle (a helper that imports torch) while the kernel
    starts, where the assignment has named mistakes: the first diagnosis then finds it
    ready. Once per process; later calls cost nothing."""
    if job.assignment_dir is None:
        return
    from ..workspace.course import AssignmentSpec
    from .oracle import shared_oracle

    folder = Path(job.assignment_dir)
    with contextlib.suppress(Exception):  # a head start only: it never costs a grade
        if AssignmentSpec.load(folder.name, folder.parent).mutants:
            shared_oracle(uses_gpu=uses_gpu).start()


def grade_notebook(job: Job) -> NotebookResult:
    """Execute and check one notebook of one submission.

    The job talks to one object, its :class:`~autograder.sandbox.kernel.SandboxedKernel`:
    made (a slot, the capped storage with the handed-in files, the start strategy),
    started, asked to run the notebook, handed to the checks as their transport, and
    closed, whatever happened."""
    _check_paths(job)
    started = time.monotonic()
    nb = nbformat.from_dict(job.notebook)
    result = NotebookResult(job.student, job.assignment, job.notebook_id, nb,
                            findings=list(job.findings), isolation=describe_isolation(job.limits))
    mark = time.monotonic()

    def lap(name):
        nonlocal mark
        now = time.monotonic()
        result.timings[name] = round(now - mark, 3)
        mark = now

    kernel = None
    try:
        kernel = SandboxedKernel(job.limits, hidden=job.hidden, preload=job.kernel_preload,
                                 submission_dir=job.submission_dir,
                                 notebook_name=f"{job.notebook_id}.ipynb")
        _warm_oracle(job, kernel.uses_gpu)
        kernel.start(nb)
        lap("kernel_start")
        # The first kernel of a grading worker also waits for the worker's fork server to
        # load the libraries: a one-off, kept apart so it is not read as a slow start.
        warm_up = round(kernel.warm_up_seconds, 3)
        if warm_up:
            start_alone = max(result.timings["kernel_start"] - warm_up, 0)
            result.timings = {"warm_up": warm_up, "kernel_start": round(start_alone, 3)}
        kernel.run_notebook(nb, skip_grade_ids=job.test_cell_ids)
        lap("notebook")
        if kernel.alive():
            kernel.install_bridge(kernel_side.kernel_source())
        submission = Submission(kernel, nb, kernel.exchange_dir, forbid=job.forbid,
                                call_timeout=job.limits.call_timeout)
        result.checks, transcripts = run_checks(Path(job.checks_dir), submission,
                                                job.grade_cells)
        lap("checks")
        try:
            _diagnose(job, result, transcripts, kernel.uses_gpu)
        except Exception as exc:  # a diagnosis is a courtesy: it never costs a grade
            result.events.append(f"no diagnosis: {type(exc).__name__}: {exc}"[:300])
        lap("diagnosis")
    except Exception as exc:  # the grader must survive any submission
        result.events.append(f"grading error: {type(exc).__name__}: {exc}"[:1000])
    finally:
        if kernel is not None:
            kernel.close()
            result.events[:0] = kernel.events
    result.seconds = round(time.monotonic() - started, 2)
    return result
