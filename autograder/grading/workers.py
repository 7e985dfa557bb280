"""Worker processes that stop with the grader that started them.

``autograder grade`` and the "Check my work" service grade in a pool of worker processes
(each keeps a fork server warm). However the grader stops, its workers must stop too, and
clean up on the way out: the kernel shut down, the submission's tmpfs areas unmounted (as
root they hold memory), the scratch folders removed. Three ways a grader stops:

* **Ctrl-C** reaches every process of the terminal's process group, the workers too.
* **SIGTERM or SIGHUP to the grader alone** (``kill PID``, a batch scheduler's time limit,
  a service manager): :func:`stop_on_termination` turns it into :class:`Terminated`, an
  interruption like Ctrl-C.
* **The grader killed outright** (SIGKILL, the out-of-memory killer): the workers' parent,
  multiprocessing's fork server (see :func:`worker_pool`), exits with it, and Linux then
  sends each worker SIGTERM (``prctl(PR_SET_PDEATHSIG)``, asked for in :func:`_started`).

An interrupted grader calls :func:`stop_workers`, which passes SIGTERM on and waits for
the workers. A worker's answer to SIGINT, SIGTERM or SIGHUP is the same in every case: the
submission it is grading is abandoned (its ``finally`` clauses run), then the process runs
its exit handlers and exits, without taking the work already queued for it. Further
signals during that clean-up are ignored, so a second one cannot cut it short.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import functools
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import threading
from concurrent.futures import CancelledError, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..sandbox.slots import process_running

#: prctl option (sys/prctl.h): the signal this process gets when its parent dies.
PR_SET_PDEATHSIG = 1
#: Seconds a stopped worker gets to clean up before it is killed.
STOP_GRACE_SECONDS = 20

_stopping = False  # set in a worker by its first SIGINT, SIGTERM or SIGHUP
_requested: int | None = None  # in the grader: the stop signal received, if any


class Terminated(KeyboardInterrupt):
    """The grader was asked to stop by a signal other than Ctrl-C (SIGTERM, SIGHUP)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


@contextlib.contextmanager
def stop_on_termination():
    """In the grader (main thread): SIGTERM and SIGHUP raise :class:`Terminated` while the
    block runs, so they stop the grader the way Ctrl-C does (workers included).

    Each stop signal is also remembered: Python drops an exception raised while it runs a
    finaliser (a weak reference's callback, a ``__del__``), so the grading loop asks
    :func:`raise_if_stop_requested` after every result as well."""
    global _requested

    def interrupt(signum, frame):
        global _requested
        _requested = signum
        raise _interruption(signum)

    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers (a test calling main() in a thread)
        return
    _requested = None
    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {sig: signal.signal(sig, interrupt) for sig in stops}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        _requested = None


def _interruption(signum: int) -> KeyboardInterrupt:
    """What a stop signal raises in the grader: Ctrl-C's own exception, or Terminated."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)


def raise_if_stop_requested() -> None:
    """Raise the interruption a stop signal asked for, if an earlier raise was lost."""
    if _requested is not None:
        raise _interruption(_requested)


def worker_stopped(error: BaseException) -> bool:
    """Whether a job failed because its worker process stopped (a signal, the out-of-memory
    killer; the pool then reports BrokenProcessPool, Dask KilledWorker), not because of the
    submission: such a job is graded again by the next run, never recorded."""
    if isinstance(error, (KeyboardInterrupt, SystemExit, BrokenProcessPool, CancelledError)):
        return True
    return type(error).__name__ == "KilledWorker"  # distributed's, without importing it


#: What every grading worker imports (torch among it): once, in multiprocessing's fork
#: server, from which each worker is forked. Spawned workers imported it once each, about
#: 1.5 CPU seconds apiece at every ``autograder grade``.
WORKER_PRELOAD = ["autograder.grading.runner"]


def local_workers(workers: int | None, jobs: int) -> int:
    """How many local worker processes grade ``jobs`` jobs when ``workers`` were asked for
    (None: one per core, no more than there are jobs). One means no pool."""
    return max(1, workers or min(jobs, os.cpu_count() or 1))


def start_fork_server() -> None:
    """Start multiprocessing's fork server now, importing :data:`WORKER_PRELOAD`, without
    waiting for it. The first worker of :func:`worker_pool` waits until those imports are
    done (about a second of CPU): started first thing, they run while the grader imports
    its own libraries and reads the submissions. Idempotent."""
    multiprocessing.get_context("forkserver").set_forkserver_preload(WORKER_PRELOAD)
    multiprocessing.forkserver.ensure_running()


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """A pool of ``workers`` processes that stop when the grader does.

    The workers are forked from multiprocessing's fork server, a fresh interpreter that
    the grader starts once (it lives as long as the grader) and that imports
    :data:`WORKER_PRELOAD` before it forks anyone; never from the grader itself, which
    holds threads and a gradebook connection. A worker takes the grader's environment as
    it is when the pool starts, as a spawned process would."""
    start_fork_server()  # already running if the grader started it early
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("forkserver"),
        initializer=_started,
        initargs=(os.getpid(), dict(os.environ)),
    )


def stop_workers(pool: ProcessPoolExecutor) -> None:
    """Ask every live worker of ``pool`` to stop (SIGTERM), wait for their clean-up, kill
    those still running after :data:`STOP_GRACE_SECONDS`, and drop the queued work."""
    # The executor keeps its processes in ``_processes`` (CPython 3.2 onwards; no public
    # accessor). Without it the workers still stop, when the grader's exit closes the pool.
    processes = [p for p in (getattr(pool, "_processes", None) or {}).values() if p.is_alive()]
    for process in processes:
        with contextlib.suppress(OSError):
            process.terminate()
    for process in processes:
        process.join(STOP_GRACE_SECONDS)
        if process.is_alive():
            process.kill()
    pool.shutdown(wait=False, cancel_futures=True)


def stops_cleanly(task):
    """Decorate a function the pool runs: if a stop signal interrupted it, the worker exits
    once the task's own clean-up is done (the pool would otherwise take the next task)."""

    @functools.wraps(task)
    def run(*args, **kwargs):
        try:
            return task(*args, **kwargs)
        finally:
            if _stopping:
                _exit_worker()

    return run


# -- inside a worker -------------------------------------------------------------------
def _started(grader_pid: int, environ: dict[str, str]) -> None:
    """Pool initializer: take the grader's environment, stop on SIGINT/SIGTERM/SIGHUP, and
    get SIGTERM when the grader dies.

    The worker's parent is multiprocessing's fork server, which exits when the grader does
    (it reads EOF on a pipe only the grader holds): SIGTERM on the parent's death then
    reaches the worker."""
    os.environ.clear()
    os.environ.update(environ)
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    parent = os.getppid()
    with contextlib.suppress(AttributeError, OSError):  # prctl is Linux's
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM))
    _drop_fork_server_pipe()
    if os.getppid() != parent or not process_running(grader_pid):  # gone before prctl took effect
        _stop(signal.SIGTERM, None)


def _drop_fork_server_pipe() -> None:
    """Close this worker's copy of the fork server's "alive" pipe. CPython hands one to
    every process the fork server makes (``multiprocessing.forkserver._serve_one``; there is
    no public switch), and the fork server exits only when every copy is closed: kept open
    here, a grader killed outright would leave its fork server, and so its workers, running."""
    state = getattr(multiprocessing.forkserver, "_forkserver", None)
    alive = getattr(state, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        state._forkserver_alive_fd = None


def _stop(signum, frame):
    global _stopping
    if _stopping:
        return  # already stopping: let the clean-up finish
    _stopping = True
    raise SystemExit(128 + signum)


def _exit_worker() -> None:
    # SystemExit from inside a task is caught by the pool's worker loop, so leave here:
    # the exit handlers (scratch folders, the mistake oracle) first, then the process.
    atexit._run_exitfuncs()
    os._exit(128 + signal.SIGTERM)
