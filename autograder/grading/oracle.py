"""The mistake oracle: what would a named mistake have answered to this check?

Every named mutant of an assignment (``[[mutants]]`` in ``assignment.toml``) is a classic
mistake written as a text edit of the instructor's solution. To recognise one in a
student's work (:mod:`autograder.grading.diagnosis`), the grader replays the requests a failing
check sent to the student's kernel against the mutated solution and compares the answers.

The replay runs here, in a helper process of the grader: trusted (it executes instructor
code only, never a student's), but apart from the grader, so whatever an instructor's cells
change (seeds, default dtypes, thread counts, environment variables) never leaks into the
checks of the next submission. It runs each variant of the notebook the way the grading
kernel runs a submission (code cells in order; test cells and cells tagged
``skip-grading`` left out) and answers requests with the very bridge the kernel uses
(:meth:`autograder.protocol.kernel_side._AutograderBridge.respond`), so a replay means exactly what
the original request meant.

Messages are pickled both ways, each in one frame of :mod:`autograder.sandbox.inside.channel`
(the framing of every helper's pipe; pickle, not JSON, because both ends are the grader's
own code and the requests carry tensors), at most :data:`MAX_MESSAGE` bytes:
``{"variant": key, "cells": [code, ...], "folder": assignment folder, "requests":
[(request, tensors), ...]}`` is answered by ``{"replies": [(reply, tensors), ...]}`` or
``{"error": text}``. The grader turns notebook text into cells (:func:`graded_cells`), so
this process imports nothing but what the notebook itself imports.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import functools
import hashlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from ..sandbox.inside import channel

#: Seconds one message may take, notebook execution included (the process is then replaced).
REPLY_TIMEOUT = 180
#: Bytes of answers' tensors a :class:`MistakeOracle` keeps (the least recently used go).
REPLY_CACHE_BYTES = 128 * 2**20
#: The cap on one message either way: a check's requests with their input tensors, or
#: the replies with theirs.
MAX_MESSAGE = 2**30


class _Pickler(pickle.Pickler):
    """Pickles a plain CPU tensor as its bytes, dtype and shape: torch's own reduction goes
    through ``torch.save`` for every tensor, which cost a diagnosis more than the replay
    itself (a check's inputs hold dozens of tensors, a module's weights among them). The
    copy is contiguous, as the kernel's tensors are (they come from safetensors)."""

    def reducer_override(self, obj):
        import torch

        if (type(obj) is not torch.Tensor or obj.device.type != "cpu" or obj.requires_grad
                or obj.is_sparse or obj.is_quantized or obj.is_nested):
            return NotImplemented
        data = obj.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
        return _tensor_from_bytes, (data, str(obj.dtype).removeprefix("torch."),
                                    tuple(obj.shape))


def _tensor_from_bytes(data: bytes, dtype: str, shape: tuple):
    import torch

    if not data:
        return torch.empty(shape, dtype=getattr(torch, dtype))
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).view(
        getattr(torch, dtype)).reshape(shape)


def request_key(variant: str, request: dict, tensors: dict) -> str:
    """A digest of a variant, a request and its input tensors' bytes (what an answer
    depends on)."""
    import torch

    digest = hashlib.sha256(variant.encode())
    digest.update(json.dumps(request, sort_keys=True, default=repr).encode())
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"\0{name}:{tensor.dtype}:{tuple(tensor.shape)}\0".encode())
        if tensor.numel():
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)
    return digest.hexdigest()


def _write(stream, message) -> None:
    buffer = io.BytesIO()
    _Pickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(message)
    channel.send_bytes(stream, buffer.getvalue(), MAX_MESSAGE)


def _read(stream, timeout: float | None = None):
    return pickle.loads(channel.receive_bytes(stream, MAX_MESSAGE, timeout))


# -- the helper process -----------------------------------------------------------------
def graded_cells(source: str) -> list[str]:
    """The code a grading kernel runs for this notebook source, cell by cell."""
    return list(_graded_cells(source))


@functools.lru_cache(maxsize=64)
def _graded_cells(source: str) -> tuple[str, ...]:
    # The same for every student: reading a notebook's text costs a fifth of a second.
    from ..sandbox.kernel import SKIP_TAG  # imported here: the helper process never needs it
    from ..workspace.course import notebook_from_text

    cells = []
    for cell in notebook_from_text(source).cells:
        if cell.cell_type != "code" or SKIP_TAG in cell.metadata.get("tags", []):
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade") and not meta.get("solution"):
            continue  # a visible test cell: the hidden checks replace it
        cells.append(cell.source)
    return tuple(cells)


_SCRATCH_PREFIX = "autograder-oracle-"


def _sweep_stale_scratch() -> None:
    """Remove the scratch folders of helpers that no longer run (one killed with its
    grader never reaches its own clean-up)."""
    from ..sandbox.storage import stale_scratch_folders

    for path in stale_scratch_folders(_SCRATCH_PREFIX):
        shutil.rmtree(path, ignore_errors=True)


class _Variants:
    """Executed notebook variants, by key, each with the bridge that answers for it."""

    def __init__(self):
        self.bridges: dict[str, object] = {}
        _sweep_stale_scratch()
        # Named after this process, so a later helper can tell a leftover from a live one.
        self.scratch = Path(tempfile.mkdtemp(prefix=f"{_SCRATCH_PREFIX}{os.getpid()}-"))

    def bridge(self, key: str, cells: list[str] | None, folder: str):
        if key not in self.bridges:
            if cells is None:
                raise KeyError(f"variant {key!r} was never sent")
            from ..protocol import kernel_side

            workdir = self.scratch / f"variant-{len(self.bridges)}"
            workdir.mkdir()
            for item in Path(folder).iterdir() if folder else []:
                if item.is_file() and item.suffix not in (".py", ".toml"):
                    shutil.copy2(item, workdir / item.name)
            namespace = {"__name__": "__main__"}
            here = os.getcwd()
            os.chdir(workdir)
            try:
                for index, code in enumerate(cells):
                    with contextlib.suppress(Exception):  # as in a kernel: later cells still run
                        exec(compile(code, f"<{key} cell {index}>", "exec"), namespace)
            finally:
                os.chdir(here)
            self.bridges[key] = kernel_side.make_bridge(namespace)
        return self.bridges[key]

    def answer(self, message: dict) -> dict:
        import torch

        bridge = self.bridge(message["variant"], message.get("cells"), message.get("folder", ""))
        replies = []
        for request, tensors in message["requests"]:
            request = {**request, "forbid": []}
            with torch.random.fork_rng(devices=[]):
                replies.append(bridge.respond(request, {k: v.clone() for k, v in tensors.items()}))
        return {"replies": replies}


def serve(stdin=None, stdout=None) -> None:
    """The helper process's loop: one answer per message until the pipe closes."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    # Instructor cells print; keep the message pipe clean.
    sys.stdout = sys.stderr
    # What every answer needs, imported before the first message: a helper started ahead
    # of time (MistakeOracle.start) then answers its first diagnosis without this wait.
    import torch  # noqa: F401

    from ..protocol import kernel_side  # noqa: F401

    variants = _Variants()
    try:
        while True:
            try:
                message = _read(stdin)
            except EOFError:
                return
            try:
                _write(stdout, variants.answer(message))
            except Exception as exc:  # noqa: BLE001 - the grader decides what a failure means
                _write(stdout, {"error": f"{type(exc).__name__}: {exc}"[:2000]})
    finally:
        shutil.rmtree(variants.scratch, ignore_errors=True)


# -- the grader's side ---------------------------------------------------------------------
class OracleError(RuntimeError):
    """The oracle could not answer (it crashed, timed out, or a variant failed to run)."""


class MistakeOracle:
    """A lazily started helper process that replays requests against notebook variants."""

    def __init__(self, uses_gpu: bool = False):
        #: Replay on the GPU, as the kernels of a ``gpu = true`` assignment ran: a check
        #: that computes on the GPU there must compute on it here too, or no answer of a
        #: mistake would match the student's (see :mod:`autograder.sandbox.gpu`).
        self.uses_gpu = uses_gpu
        self._process: subprocess.Popen | None = None
        self._sent: set[str] = set()  # variants the running helper has executed
        #: request_key -> ((reply, tensors), bytes), the most recently used last (replay).
        self._replies: collections.OrderedDict[str, tuple] = collections.OrderedDict()
        self._kept_bytes = 0
        self._lock = threading.Lock()

    def environment(self) -> dict[str, str]:
        """The helper's environment: ours, as a grading kernel would see it."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("JPY_")}
        # What a grading kernel sees: no widgets drawn, no display, one thread, Triton's
        # interpreter unless told otherwise (see autograder.sandbox.isolation.kernel_environment).
        env.update(
            TOOLKIT_HEADLESS="1",
            MPLBACKEND="Agg",
            OMP_NUM_THREADS="1",
            PYTHONDONTWRITEBYTECODE="1",
            TRITON_INTERPRET="0" if self.uses_gpu else os.environ.get("TRITON_INTERPRET", "1"),
            AUTOGRADER_GRADING="1",
        )
        return env

    def _start(self):
        """The helper: forked from this process where that is safe (it has imported
        torch already, so the helper starts at no cost), else a fresh interpreter."""
        if _ForkedHelper.can_fork(self.uses_gpu):
            return _ForkedHelper(self.environment())
        return subprocess.Popen(
            [sys.executable, "-m", "autograder.grading.oracle"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=self.environment(),
        )

    def _ensure_started(self) -> None:
        if self._process is None or self._process.poll() is not None:
            self._process = self._start()
            self._sent = set()

    def start(self) -> None:
        """Start the helper now (it imports torch), so that the first diagnosis is quick."""
        with self._lock:
            self._ensure_started()

    def replay(self, variant: str, source: str, folder: Path | str, requests: list) -> list:
        """``[(reply, tensors), ...]``: the answers of the notebook ``source`` (instructor
        code, one variant of it) to each ``(request, tensors)`` a check sent.

        A variant answers a request the same way every time (instructor code, and the
        helper forks the random state around each request), and the checks send every
        student the same inputs, so answers are kept (:data:`REPLY_CACHE_BYTES` of them,
        by variant, request and the inputs' bytes): only requests not seen before travel
        to the helper, and a class's later diagnoses cost next to nothing."""
        keys = [request_key(variant, request, tensors) for request, tensors in requests]
        with self._lock:
            todo = [i for i, key in enumerate(keys) if key not in self._replies]
            answered = {}
            if todo:
                answer = self._ask(variant, source, folder, [requests[i] for i in todo])
                if "error" in answer:
                    raise OracleError(answer["error"])
                answered = dict(zip((keys[i] for i in todo), answer["replies"]))
            replies = [answered[key] if key in answered else self._replies[key][0]
                       for key in keys]
            for key, reply in zip(keys, replies):
                self._keep(key, reply)
        return replies

    def _keep(self, key: str, reply: tuple) -> None:
        if key in self._replies:
            self._replies.move_to_end(key)
            return
        size = 1024 + sum(t.nbytes for t in reply[1].values() if hasattr(t, "nbytes"))
        self._replies[key] = (reply, size)
        self._kept_bytes += size
        while self._kept_bytes > REPLY_CACHE_BYTES and self._replies:
            _, (_, dropped) = self._replies.popitem(last=False)
            self._kept_bytes -= dropped

    def _ask(self, variant: str, source: str, folder: Path | str, requests: list) -> dict:
        """One message to the helper and its answer (the lock held)."""
        self._ensure_started()
        message = {"variant": variant, "folder": str(folder), "requests": requests}
        if variant not in self._sent:  # the helper keeps what it has executed
            message["cells"] = graded_cells(source)
        try:
            _write(self._process.stdin, message)
            try:
                answer = _read(self._process.stdout, timeout=REPLY_TIMEOUT)
            except channel.ChannelTimeout:
                raise OracleError(f"no answer within {REPLY_TIMEOUT}s") from None
            self._sent.add(variant)
        except (OSError, EOFError, OracleError) as exc:
            self.close()
            raise OracleError(f"the mistake oracle stopped: {exc}") from None
        return answer

    def close(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(OSError):
                process.stdin.close()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


class _ForkedHelper:
    """The helper process as a fork of this one, with what :meth:`MistakeOracle._ask` uses
    of a ``Popen`` (``stdin``, ``stdout``, ``poll``, ``wait``, ``kill``).

    A grading worker imported torch before it took any work (the pool preloads it), so a
    fork starts answering at once, where a fresh interpreter spends over a CPU second on
    its imports. Forking is safe only while this process runs one thread (a lock that
    another thread held would stay locked in the child) and has not touched CUDA
    (:meth:`can_fork`); the child keeps only its two pipes, takes the helper's
    environment and one torch thread, and never returns into the caller's code."""

    def __init__(self, environment: dict[str, str]):
        from_parent, to_child = os.pipe()  # (read end, write end)
        from_child, to_parent = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:  # the helper
            code = 1
            try:
                self._become_helper(environment, from_parent, to_parent)
                code = 0
            finally:
                os._exit(code)
        os.close(from_parent)
        os.close(to_parent)
        self.stdin = os.fdopen(to_child, "wb")
        self.stdout = os.fdopen(from_child, "rb")
        self.returncode: int | None = None

    @staticmethod
    def can_fork(uses_gpu: bool) -> bool:
        return (not uses_gpu and threading.active_count() == 1 and os.path.isdir("/proc/self/fd")
                and "torch" in sys.modules and not sys.modules["torch"].cuda.is_initialized())

    @staticmethod
    def _become_helper(environment: dict[str, str], stdin_fd: int, stdout_fd: int) -> None:
        import signal

        import torch

        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 2)  # as the fresh helper's stderr=DEVNULL
        for name in os.listdir("/proc/self/fd"):  # nothing of the worker's stays open here
            if int(name) > 2 and int(name) not in (stdin_fd, stdout_fd):
                with contextlib.suppress(OSError):  # the listing's own descriptor, gone
                    os.close(int(name))
        os.environ.clear()
        os.environ.update(environment)
        torch.set_num_threads(1)  # what OMP_NUM_THREADS=1 gives the fresh helper
        serve(os.fdopen(stdin_fd, "rb"), os.fdopen(stdout_fd, "wb"))
        sys.stdout.flush()

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:
                self.returncode = -9
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("the mistake oracle", timeout)
            time.sleep(0.01)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, 9)


_shared: dict[bool, MistakeOracle] = {}


def shared_oracle(uses_gpu: bool = False) -> MistakeOracle:
    """This grading process's oracle (one per worker, and one more for the submissions
    graded on the GPU; stopped when the process exits)."""
    if uses_gpu not in _shared:
        _shared[uses_gpu] = MistakeOracle(uses_gpu)
        atexit.register(_shared[uses_gpu].close)
    return _shared[uses_gpu]


if __name__ == "__main__":
    # Through the module's own name, so that what the helper pickles (a tensor's
    # _tensor_from_bytes) names the function the grader can import.
    from autograder.grading import oracle

    oracle.serve()
    # serve() removed its scratch folder; skip the teardown of an interpreter that holds
    # torch (about half a second that the grading worker would wait for at its exit).
    sys.stdout.flush()
    os._exit(0)
