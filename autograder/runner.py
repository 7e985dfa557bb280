"""Grade one notebook of one submission: execute it sandboxed, then run the hidden checks.

This is the unit of work that runs in parallel (a local process pool or a Dask
worker). It takes a plain dict (the *job*) and returns a plain dict (the
*result*), touches nothing but a private temporary directory, and never writes
the gradebook: the single writer in :mod:`autograder.gradebook` does that.
"""

from __future__ import annotations

import contextlib
import io
import shutil
import tempfile
import time
from pathlib import Path

import nbformat
import pytest

from . import forkserver, kernel_side
from .execute import KernelSession, prepare_workdir
from .protocol import Submission
from .sandbox import Limits, isolation_level, sandbox_slot


class _CheckPlugin:
    """pytest plugin: provides the ``submission`` fixture and records every check."""

    def __init__(self, submission: Submission):
        self._submission = submission
        self.records: list[dict] = []
        #: ``module::test id`` -> the requests that check sent (for the diagnosis).
        self.transcripts: dict[str, list] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item):
        self._submission.transcript = []
        try:
            yield
        finally:
            key = f"{Path(str(item.fspath)).stem}::{item.nodeid.split('::', 1)[-1]}"
            self.transcripts[key] = self._submission.transcript
            self._submission.transcript = None

    def pytest_configure(self, config):
        for marker in ("grade_cell(id)", "weight(w)", "pitfall(text)", "structural", "property"):
            config.addinivalue_line("markers", marker)

    @pytest.fixture
    def submission(self):
        return self._submission

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            cell = item.get_closest_marker("grade_cell")
            weight = item.get_closest_marker("weight")
            pitfall = item.get_closest_marker("pitfall")
            doc = (item.function.__doc__ or item.name).strip().splitlines()[0]
            message = ""
            if call.excinfo is not None:
                exc = call.excinfo.value
                message = (
                    str(exc)
                    if isinstance(exc, AssertionError) and str(exc)
                    else (f"{type(exc).__name__}: {exc}")
                )
            self.records.append(
                {
                    "id": item.nodeid.split("::", 1)[-1],
                    "module": Path(str(item.fspath)).stem,
                    "description": doc
                    + (f" [{item.callspec.id}]" if hasattr(item, "callspec") else ""),
                    "grade_cell": cell.args[0] if cell else None,
                    "weight": float(weight.args[0]) if weight else 1.0,
                    "pitfall": pitfall.args[0] if pitfall else None,
                    "structural": item.get_closest_marker("structural") is not None,
                    "property": item.get_closest_marker("property") is not None,
                    "passed": report.outcome == "passed",
                    "message": message.split("\nassert ")[0][:1500],
                }
            )


def run_checks(checks_dir: Path, submission: Submission) -> tuple[list[dict], dict]:
    """Run the hidden pytest checks in this process against ``submission``.

    Returns the check records and, per check, the requests it made (its transcript)."""
    plugin = _CheckPlugin(submission)
    args = [
        str(checks_dir),
        "-p",
        "no:cacheprovider",
        "-p",
        "no:terminal",
        # Its clean-up runs gc.collect() over and over: half a second per submission.
        "-p",
        "no:unraisableexception",
        "--import-mode=importlib",
        "--rootdir",
        str(checks_dir),
        "-W",
        "ignore",
        "-o",
        "python_files=test_*.py",
        "-o",
        "addopts=",
        "-o",
        "testpaths=",
    ]
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        code = pytest.main(args, plugins=[plugin])
    if code not in (0, 1) or not plugin.records:
        raise RuntimeError(
            f"the hidden checks could not run (pytest exit {code}): {out.getvalue()[-2000:]}"
        )
    return plugin.records, plugin.transcripts


def _diagnose(job: dict, records: list[dict], transcripts: dict) -> list[dict]:
    """Name the classic mistakes behind failing checks (see :mod:`autograder.diagnosis`)."""
    if not job.get("assignment_dir") or all(r["passed"] for r in records):
        return []
    from .course import AssignmentSpec
    from .diagnosis import annotate, diagnose
    from .oracle import shared_oracle

    folder = Path(job["assignment_dir"])
    spec = AssignmentSpec.load(folder.name, folder.parent)
    diagnoses = diagnose(spec, job["notebook_id"], records, transcripts, shared_oracle())
    annotate(records, diagnoses)
    return [d.as_dict() for d in diagnoses]


def grade_notebook(job: dict) -> dict:
    """Execute and check one notebook. ``job`` keys: student, assignment, notebook_id,
    notebook (nbformat dict, already sanitised), submission_dir, test_cell_ids,
    checks_dir (the hidden checks), cell_timeout, submission_timeout,
    forbid, hidden (paths to keep out of the sandbox), memory_bytes."""
    with sandbox_slot() as slot:
        return _grade_notebook(job, slot)


def _grade_notebook(job: dict, slot: int) -> dict:
    started = time.monotonic()
    nb = nbformat.from_dict(job["notebook"])
    test_ids = set(job.get("test_cell_ids", []))
    # Inside this worker's scratch root, where its fork server can reach it.
    scratch = Path(tempfile.mkdtemp(prefix="submission-", dir=forkserver.scratch_root()))
    workdir = scratch / "work"
    prepare_workdir(Path(job["submission_dir"]), workdir, job["notebook_id"] + ".ipynb")
    limits = Limits(address_space=int(job.get("memory_bytes", Limits.address_space)))
    session = KernelSession(
        workdir,
        cell_timeout=job.get("cell_timeout", 60),
        submission_timeout=job.get("submission_timeout", 600),
        limits=limits,
        slot=slot,
        hidden=tuple(Path(p) for p in job.get("hidden", [])),
    )
    records: list[dict] = []
    diagnoses: list[dict] = []
    error = None
    timings: dict[str, float] = {}
    mark = time.monotonic()

    def lap(name):
        nonlocal mark
        now = time.monotonic()
        timings[name] = round(now - mark, 3)
        mark = now

    try:
        session.start(nb)
        lap("kernel_start")
        session.run_notebook(
            nb, skip=lambda cell: cell.metadata.get("nbgrader", {}).get("grade_id") in test_ids
        )
        lap("notebook")
        if session.alive():
            session.install_bridge(Path(kernel_side.__file__).read_text())
        submission = Submission(
            session,
            nb,
            workdir / ".autograder",
            forbid=tuple(job.get("forbid", [])),
            call_timeout=job.get("call_timeout", 60),
        )
        records, transcripts = run_checks(Path(job["checks_dir"]), submission)
        lap("checks")
        try:
            diagnoses = _diagnose(job, records, transcripts)
        except Exception as exc:  # a diagnosis is a courtesy: never let it cost a grade
            session.events.append(f"no diagnosis: {type(exc).__name__}: {exc}"[:300])
        lap("diagnosis")
    except Exception as exc:  # the grader must survive any submission
        error = f"{type(exc).__name__}: {exc}"[:1000]
    finally:
        session.shutdown()
        shutil.rmtree(scratch, ignore_errors=True)
    if error:
        session.events.append(f"grading error: {error}")
    return {
        "student": job["student"],
        "assignment": job["assignment"],
        "notebook_id": job["notebook_id"],
        "notebook": nb,
        "checks": records,
        "diagnoses": diagnoses,
        "events": session.events,
        "isolation": isolation_level(),
        "seconds": round(time.monotonic() - started, 2),
        "timings": timings,
    }
