"""Run a Python script in a process forked from a parent that has already imported torch.

A ``prepare`` script (:func:`autograder.authoring.submissions.run_prepare`) trains one made
submission's checkpoint. Started as ``python script.py STUDENT``, each run first spends
about 3.5 s of CPU importing what every run imports: torch, the part of torch that its
optimizers load on first use (``torch._dynamo``, 1.5 s alone), matplotlib, ipywidgets and
the toolkit. ``validate 05-blocks`` trains about twenty checkpoints: a minute of CPU spent
importing the same modules again and again.

:func:`run_script` pays it once per process that calls it. The first call starts a
server (``python -m autograder.authoring.warm_script``) that imports :data:`PRELOAD` and then
forks one child per run, so no run sees anything an earlier run did. The child becomes
what ``python script.py ARGS`` would have been: the script runs as ``__main__`` with that
``sys.argv``, working directory, environment and ``sys.path[0]``, its stdout and stderr
go to files the caller reads back, and its exit status is that of ``sys.exit``. The
caller gets a :class:`subprocess.CompletedProcess`, or :class:`subprocess.TimeoutExpired`,
as from :func:`subprocess.run`. This is the kernels' fork server
(:mod:`autograder.sandbox.inside.zygote`) without the sandbox: prepare scripts are the instructor's.

Protocol, one JSON message per frame each way (:mod:`autograder.sandbox.inside.channel`,
the framing of every helper's pipe): the server first writes
``{"ready": true}`` (or ``false`` with an ``"error"``), then answers
``{"op": "run", "script", "args", "cwd", "env", "stdout", "stderr"}`` with ``{"pid"}``
and ``{"op": "wait", "pid"}`` with ``{"exit": null | code}`` (the caller kills a run
itself: each leads a process group). It stops, killing its runs, when its stdin closes.

When the server cannot start or stops answering, or with ``AUTOGRADER_WARM_SCRIPTS=0``,
each run is a fresh interpreter instead (``subprocess.run``).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

from ..sandbox.inside import channel

#: What a prepare run imports before it does anything of its own (seconds of CPU each,
#: on one core): torch (1), what torch imports on the first call of an optimizer (1.5),
#: matplotlib, ipywidgets and the toolkit with its widgets (1). A module that fails to
#: import is skipped; a script that needs it imports it itself.
PRELOAD = ("torch", "torch._dynamo", "numpy", "matplotlib.figure", "ipywidgets",
           "IPython.display", "toolkit", "autograder.authoring.prepare_checkpoint")
#: How often a waiting caller asks whether its run has ended (seconds).
POLL_INTERVAL = 0.1


# -- the server: preload, then fork one child per run ----------------------------------
def _threads_as_fresh() -> None:
    """Give torch the threads a fresh interpreter would have: what ``OMP_NUM_THREADS``
    says, else one per CPU this process may use. (The server imports torch with one
    thread: a second one would make forking unsafe.)"""
    torch = sys.modules.get("torch")
    if torch is None:
        return
    try:
        threads = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    torch.set_num_threads(max(1, threads))


def _become_script(request: dict) -> None:
    """In the forked child: run ``python script ARGS`` in ``cwd``; never returns."""
    code = 1
    try:
        os.setsid()  # its own process group: a kill reaches what it started
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        # The server's pipes stay with the server: a run that outlives it must not keep
        # the caller waiting for an answer.
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
            target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            os.dup2(target, fd)
            os.close(target)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        _threads_as_fresh()
        script = request["script"]
        sys.argv = [script, *request["args"]]
        sys.path[0] = str(Path(script).resolve().parent)  # as for `python script.py`
        runpy.run_path(script, run_name="__main__")
        code = 0
    except SystemExit as stop:  # sys.exit(...): its code, as the interpreter would use it
        if stop.code is None or isinstance(stop.code, int):
            code = stop.code or 0
        else:
            print(stop.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)


def serve() -> None:
    """The server's main loop (``python -m autograder.authoring.warm_script``)."""
    # The protocol keeps the original stdout; whatever an import prints goes to stderr.
    out = os.dup(1)
    os.dup2(2, 1)

    def reply(message: dict) -> None:
        channel.send(out, message)

    for name in PRELOAD:
        with contextlib.suppress(Exception):
            importlib.import_module(name)
    threads = len(os.listdir("/proc/self/task")) if Path("/proc/self/task").is_dir() else 1
    if threads != 1:
        # Forking a process with other threads can copy a lock held by one of them.
        reply({"ready": False, "error": f"{threads} threads after the imports; need one"})
        return
    reply({"ready": True})
    children: set[int] = set()
    try:
        while True:
            try:
                request = channel.receive(0)
            except channel.ChannelClosed:
                break
            op = request.get("op")
            if op == "run":
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    _become_script(request)
                children.add(pid)
                reply({"pid": pid})
            elif op == "wait":
                pid = int(request["pid"])
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    children.discard(pid)
                reply({"exit": os.waitstatus_to_exitcode(status) if done else None})
            else:
                reply({"error": f"unknown op {op!r}"})
    finally:  # the caller has gone: so do the runs it started
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


# -- the caller's side -------------------------------------------------------------------
class _Server:
    """The running server of this process, with a lock: one request at a time."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.owner = os.getpid()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "autograder.authoring.warm_script"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env={**os.environ,
                 # One OpenMP thread while importing torch: forking copies no other thread.
                 "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                 # Finds autograder where this process found it (a checkout, a wheel).
                 "PYTHONPATH": os.pathsep.join(filter(None, [
                     str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH")]))},
        )
        try:
            ready = channel.receive(self.proc.stdout)
        except channel.ChannelClosed:
            ready = {}
        except channel.ChannelError:
            self.close()
            raise
        if not ready.get("ready"):
            self.close()
            raise OSError(ready.get("error", "the warm script server did not start"))

    def ask(self, request: dict) -> dict:
        with self.lock:
            try:
                channel.send(self.proc.stdin, request)
                return channel.receive(self.proc.stdout)
            except channel.ChannelError as exc:  # an OSError: the caller's fall-back
                raise OSError(f"the warm script server stopped: {exc}") from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()


_server: _Server | None = None
_server_failed = False
_starting = threading.Lock()


def _the_server() -> _Server | None:
    """This process's server, started on first use; ``None`` if it cannot run here."""
    global _server, _server_failed
    if os.environ.get("AUTOGRADER_WARM_SCRIPTS", "1") == "0" or not hasattr(os, "fork"):
        return None
    with _starting:
        if _server is not None and _server.owner != os.getpid():
            _server = None  # a forked copy of the caller: start one of its own
        if _server is None and not _server_failed:
            try:
                _server = _Server()
                atexit.register(_server.close)
            except (OSError, ValueError):
                _server_failed = True  # scripts run as fresh interpreters from now on
        return _server


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # each run leads a process group of its own


def _run_warm(server: _Server, request: dict, timeout: float, command: list[str]) -> int:
    """The run's exit status; raises OSError (or KeyError, ValueError) if the server fails."""
    pid = server.ask({"op": "run", **request})["pid"]
    deadline = time.monotonic() + timeout
    try:
        while (code := server.ask({"op": "wait", "pid": pid})["exit"]) is None:
            if time.monotonic() > deadline:
                _kill_group(pid)
                while server.ask({"op": "wait", "pid": pid})["exit"] is None:
                    time.sleep(POLL_INTERVAL)
                raise subprocess.TimeoutExpired(command, timeout)
            time.sleep(POLL_INTERVAL)
    except (OSError, KeyError, ValueError):
        _kill_group(pid)  # the server has gone: this run goes too, and starts again afresh
        raise
    return code


def _forget(server: _Server) -> None:
    global _server, _server_failed
    with _starting:
        if _server is server:
            _server, _server_failed = None, True
    server.close()


def run_script(script: str | Path, args: list[str], *, cwd: str | Path,
               env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``python script ARGS`` in ``cwd`` with ``env``, at most ``timeout`` seconds.

    Returns a :class:`subprocess.CompletedProcess` with the text of stdout and stderr;
    raises :class:`subprocess.TimeoutExpired` after killing a run that took too long.
    """
    command = [sys.executable, str(script), *args]
    server = _the_server()
    if server is not None:
        with tempfile.TemporaryDirectory(prefix="autograder-script-") as scratch:
            stdout, stderr = Path(scratch, "stdout"), Path(scratch, "stderr")
            # As given: a relative path is found from cwd, as `python script.py` finds it.
            request = {"script": str(script), "args": list(args),
                       "cwd": str(cwd), "env": dict(env), "stdout": str(stdout),
                       "stderr": str(stderr)}
            try:
                code = _run_warm(server, request, timeout, command)
            except (OSError, KeyError, ValueError):
                _forget(server)  # fresh interpreters from now on, starting with this run
            else:
                return subprocess.CompletedProcess(
                    command, code, stdout.read_text(errors="replace") if stdout.exists() else "",
                    stderr.read_text(errors="replace") if stderr.exists() else "")
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


if __name__ == "__main__":
    serve()
