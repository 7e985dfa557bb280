"""The hidden checks of one assignment, collected once per grading process and run per submission.

``pytest.main`` per submission configures pytest, loads its plugins and collects the check
files again every time, and formats a long traceback (with the source of every frame) for
each failing check that nobody reads: the grader keeps only the check's message. A
:class:`CheckSession` does the configuration and the collection once per process and checks
folder, then runs the collected items against one submission after another through pytest's
own per-item protocol (``pytest_runtest_protocol``: fixtures, markers, parametrisation,
``record_property`` and the reports are pytest's), so a check means what it meant under
``pytest.main``. Failures are formatted in the cheap ``native`` style.

Nothing of a submission outlives its run: after the last item every fixture is torn down
(pytest's ``nextitem=None``), and what pytest keeps on an item between runs (the recorded
properties, captured output sections) is cleared before the next submission. A run that
raises leaves the session unusable, so it is dropped and the next submission gets a fresh one;
a change to the check files (added, removed, edited) also starts a fresh one.

The session runs in the grading process only, on trusted check code: the student's code is
reached through the ``submission`` fixture (:class:`autograder.protocol.trusted.Submission`)
alone.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
from pathlib import Path

import pytest
import torch
from _pytest.config import _prepareconfig
from _pytest.main import Session

from ..jobs import CheckRecord

#: pytest's command line for the hidden checks of ``checks_dir`` (see :class:`CheckSession`).
PYTEST_OPTIONS = [
    "-p", "no:cacheprovider",
    "-p", "no:terminal",
    # Its clean-up runs gc.collect() over and over: half a second per submission.
    "-p", "no:unraisableexception",
    # It captures log records around every phase of every check; no check reads them.
    "-p", "no:logging",
    "--import-mode=importlib",
    "-W", "ignore",
    "-o", "python_files=test_*.py",
    "-o", "addopts=",
    "-o", "testpaths=",
]


class _CheckPlugin:
    """pytest plugin: provides the ``submission`` fixture and records every check."""

    def __init__(self):
        self._submission = None
        self.records: list[CheckRecord] = []
        #: ``module::test id`` -> the requests that check sent (for the diagnosis).
        self.transcripts: dict[str, list] = {}
        #: What failed to collect (a check file that does not import), for the error.
        self.collect_errors: list[str] = []

    def begin(self, submission) -> None:
        self._submission = submission
        self.records, self.transcripts = [], {}

    def end(self) -> tuple[list[CheckRecord], dict]:
        records, transcripts = self.records, self.transcripts
        self._submission, self.records, self.transcripts = None, [], {}
        return records, transcripts

    def pytest_collectreport(self, report):
        if report.failed:
            self.collect_errors.append(f"{report.nodeid}: {report.longreprtext}"[-2000:])

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
            self.records.append(CheckRecord(
                id=item.nodeid.split("::", 1)[-1],
                module=Path(str(item.fspath)).stem,
                description=doc + (f" [{item.callspec.id}]" if hasattr(item, "callspec") else ""),
                grade_cell=cell.args[0] if cell else None,
                weight=float(weight.args[0]) if weight else 1.0,
                pitfall=pitfall.args[0] if pitfall else None,
                structural=item.get_closest_marker("structural") is not None,
                property=item.get_closest_marker("property") is not None,
                passed=report.outcome == "passed",
                message=message.split("\nassert ")[0][:1500],
                measured=next((str(value)[:300] for key, value in report.user_properties
                               if key == "measured"), ""),
            ))


def check_files(checks_dir: Path) -> tuple:
    """What a session's collection depends on: each check file's name, size and time of
    change (a file added, removed or edited means collecting again)."""
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                        for p in Path(checks_dir).glob("test_*.py")))


class CheckSession:
    """pytest configured, and the checks of ``checks_dir`` collected, once (see the module)."""

    def __init__(self, checks_dir: Path):
        self.checks_dir = Path(checks_dir)
        self.files = check_files(self.checks_dir)
        self.plugin = _CheckPlugin()
        self._configured = False
        _forget_other_checks(self.checks_dir)
        out = io.StringIO()
        with _pytest_running(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            self.config = _prepareconfig(
                [str(self.checks_dir), "--rootdir", str(self.checks_dir), *PYTEST_OPTIONS],
                [self.plugin])
            # The grader keeps a failing check's message, never pytest's traceback: the
            # "native" style costs a traceback.format_exception, the default one reads and
            # parses the source file of every frame. (``--tb`` is the terminal plugin's
            # option, and that plugin is off.)
            self.config.option.tbstyle = "native"
            try:
                self.config._do_configure()
                self._configured = True
                self.session = Session.from_config(self.config)
                self.config.hook.pytest_sessionstart(session=self.session)
                self.config.hook.pytest_collection(session=self.session)
            except BaseException:
                self.close()
                raise
        self.items = list(self.session.items)
        if self.plugin.collect_errors or not self.items:
            self.close()
            problem = "; ".join(self.plugin.collect_errors) or "no checks were collected"
            raise RuntimeError(f"the hidden checks could not run: {problem}"
                               f"{out.getvalue()[-1000:]}")

    def run(self, submission, grade_cells=None) -> tuple[list[CheckRecord], dict]:
        """Run every check against ``submission``, or those of ``grade_cells`` only:
        ``(check records, transcripts)``."""
        items = self.items if grade_cells is None else [
            item for item in self.items if _grade_cell(item) in grade_cells]
        self.plugin.begin(submission)
        here = os.getcwd()
        out = io.StringIO()
        try:
            with _pytest_running(), _one_torch_thread(), contextlib.redirect_stdout(out), \
                    contextlib.redirect_stderr(out):
                hook = self.config.hook
                for index, item in enumerate(items):
                    # What pytest keeps on an item from its last run (a previous submission's).
                    item.user_properties.clear()
                    item._report_sections.clear()
                    nextitem = items[index + 1] if index + 1 < len(items) else None
                    hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
        finally:
            os.chdir(here)
            records, transcripts = self.plugin.end()
        if items and not records:
            raise RuntimeError(f"the hidden checks could not run: {out.getvalue()[-2000:]}")
        return records, transcripts

    def close(self) -> None:
        """Finish the pytest session (its clean-up hooks) and unconfigure pytest."""
        with contextlib.suppress(Exception), _pytest_running(), \
                contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            if self._configured:
                self._configured = False
                with contextlib.suppress(Exception):
                    self.config.hook.pytest_sessionfinish(session=self.session, exitstatus=0)
                self.config._ensure_unconfigure()


def _grade_cell(item) -> str | None:
    marker = item.get_closest_marker("grade_cell")
    return marker.args[0] if marker else None


def _forget_other_checks(checks_dir: Path) -> None:
    """Drop from ``sys.modules`` a module named like one of these check files but loaded
    from another folder. pytest's importlib mode names a check module after its file
    (``test_attention``) and reuses a module of that name if one is imported already: in a
    process that grades two assignments with a ``test_attention.py`` each (Check my work,
    a test run), the second assignment would be checked by the first one's checks.
    (Sessions already collected keep their own modules.)"""
    for path in checks_dir.rglob("test_*.py"):
        name = ".".join(path.relative_to(checks_dir).with_suffix("").parts)
        module = sys.modules.get(name)
        loaded_from = getattr(module, "__file__", None)
        if module is not None and (not loaded_from or Path(loaded_from).resolve() != path):
            del sys.modules[name]


@contextlib.contextmanager
def _pytest_running():
    """``PYTEST_VERSION`` set while pytest runs, as ``pytest.main`` does."""
    old = os.environ.get("PYTEST_VERSION")
    os.environ["PYTEST_VERSION"] = pytest.__version__
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("PYTEST_VERSION", None)
        else:
            os.environ["PYTEST_VERSION"] = old


@contextlib.contextmanager
def _one_torch_thread():
    """The checks' reference computations on one thread. They are small (a few thousand
    numbers), so a second thread only waits on the first, and grading runs one worker per
    core already: with several threads each of those small operations cost the grading
    process many times the CPU, the more the busier the machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


_sessions: dict[Path, CheckSession] = {}
_lock = threading.Lock()


def run_checks(checks_dir: Path, submission, grade_cells=None
               ) -> tuple[list[CheckRecord], dict]:
    """Run the hidden checks of ``checks_dir`` (those of ``grade_cells`` only, when given)
    in this process against ``submission``, in this process's session for that folder
    (made on first use, made again when the check files change or a run failed). Returns
    the check records and, per check, the requests it made (its transcript)."""
    folder = Path(checks_dir).resolve()
    with _lock:  # pytest is not thread-safe: one run at a time per process
        session = _sessions.get(folder)
        if session is not None and session.files != check_files(folder):
            _sessions.pop(folder).close()
            session = None
        if session is None:
            session = _sessions[folder] = CheckSession(folder)
        try:
            return session.run(submission, grade_cells)
        except BaseException:
            # A run that raised may leave fixtures set up or the plugin half-way: never reuse.
            _sessions.pop(folder, None)
            session.close()
            raise
