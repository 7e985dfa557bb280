"""The grader's side of the fork server (:mod:`.inside.zygote` is the other side).

Each grading worker keeps one zygote per sandbox layout: a process inside the same
bubblewrap sandbox a kernel would get, with torch, IPython and matplotlib already
imported. :class:`ForkedKernelProvisioner` plugs it into ``jupyter_client``: where
the usual provisioner runs ``Popen(kernel_cmd)``, this one asks the zygote for a
child, and polls, signals and kills that child through the zygote.

The fork server is used when it can give the same isolation as the plain sandbox:
as root with bubblewrap (the child binds its submission's own ``/tmp`` and ``/dev/shm``
before dropping to the slot's uid), or without bubblewrap (limits only, as before).
Only :mod:`autograder.sandbox.launcher`'s :class:`~autograder.sandbox.launcher.ForkedStart`
uses it. A grader with bubblewrap that cannot mount
(not root, or ``AUTOGRADER_NO_MOUNTS=1``), ``AUTOGRADER_FORKSERVER=0``, or a zygote
that fails to start all fall back to starting each kernel from scratch; grading is
slower, nothing else changes.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from jupyter_client.provisioning import LocalProvisioner

from ..limits import COVER_BYTES
from .inside import channel
from .inside.confine import INSIDE_DIR
from .isolation import bwrap_arguments, bwrap_path, kernel_environment, paths_to_cover
from .storage import can_mount, scratch_root

#: Imported once by each zygote: what every kernel would otherwise import itself.
#: An assignment adds its own (``kernel_preload`` in its ``assignment.toml``): 07's checks
#: train, and an optimizer's first step imports ``torch._dynamo`` (about 1.2 CPU seconds,
#: paid once by the zygote instead of by every kernel; every other kernel never needs it).
PRELOAD = (
    "torch",
    "numpy",
    "matplotlib.figure",
    "ipykernel.kernelapp",
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "ipywidgets",
    "toolkit",
)
_ZYGOTE_FILE = Path(__file__).resolve().parent / "inside" / "zygote.py"
log = logging.getLogger(__name__)


class ForkServerError(RuntimeError):
    """The zygote could not start, or stopped answering."""


def enabled() -> bool:
    if os.environ.get("AUTOGRADER_FORKSERVER", "1") == "0":
        return False
    # In bubblewrap, a forked kernel needs root's right to mount for its private /tmp
    # and /dev/shm; without it, it would share one with earlier submissions.
    return bwrap_path() is None or can_mount()


class ForkServer:
    """One zygote process: start it, then ask it for kernels."""

    def __init__(self, slot: int, scratch_root: Path, hidden: tuple[Path, ...],
                 preload: tuple[str, ...] = ()):
        self.slot, self.scratch_root, self.hidden = slot, Path(scratch_root), tuple(hidden)
        #: What the zygote imports: :data:`PRELOAD`, then ``preload`` (an assignment's own).
        self.modules = tuple(dict.fromkeys((*PRELOAD, *preload)))
        self.started_at = time.monotonic()
        self._lock = threading.Lock()
        self._log = tempfile.TemporaryFile()
        env = kernel_environment(self.scratch_root)
        # matplotlib's font cache is built once, here, for every child.
        env["MPLCONFIGDIR"] = str(self.scratch_root / ".zygote-mpl")
        env["HOME"] = str(self.scratch_root)
        self.process = subprocess.Popen(
            self._command(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=str(self.scratch_root),
        )
        try:
            ready = self._read_reply(timeout=180)
        except ForkServerError:
            self.close()
            raise
        if not ready.get("ready"):
            self.close()
            raise ForkServerError(f"the fork server did not start: {ready.get('error')}")
        self.preloaded = ready.get("preloaded", [])

    def _command(self) -> list[str]:
        zygote = [sys.executable, str(_ZYGOTE_FILE), *self.modules]
        bwrap = bwrap_path()
        if bwrap is None:
            return zygote
        # The zygote's own /tmp holds only mount points: each child binds its own.
        args = bwrap_arguments(bwrap, writable=self.scratch_root, hidden=self.hidden,
                               tmp=COVER_BYTES, shm=None)
        args += ["--chdir", "/"]
        return [*args, "--", sys.executable, f"{INSIDE_DIR}/zygote.py", *self.modules]

    # -- talking to the zygote (framed JSON, :mod:`.inside.channel`) ------------------
    def _read_reply(self, timeout: float) -> dict:
        try:
            return channel.receive(self.process.stdout, timeout=timeout)
        except channel.ChannelError as exc:
            self._log.seek(0)
            tail = self._log.read()[-2000:].decode(errors="replace")
            state = ("timed out" if isinstance(exc, channel.ChannelTimeout)
                     and self.process.poll() is None else "no answer")
            raise ForkServerError(f"fork server: {state}; its log ends: {tail.strip()}") from None

    def request(self, message: dict, timeout: float = 60) -> dict:
        with self._lock:
            if self.process.poll() is not None:
                raise ForkServerError("the fork server has exited")
            try:
                channel.send(self.process.stdin, message)
            except OSError as exc:
                raise ForkServerError(f"the fork server stopped listening: {exc}") from None
            return self._read_reply(timeout)

    def alive(self) -> bool:
        return self.process.poll() is None

    def spawn(self, connection_file: Path, workdir: Path, env: dict, settings: dict):
        """Fork a kernel for ``workdir`` (which must lie inside ``scratch_root``);
        ``settings`` are what :mod:`.inside.confine` applies: limits, uid, storage."""
        workdir = Path(workdir).resolve()
        if not workdir.is_relative_to(self.scratch_root.resolve()):
            raise ValueError(f"{workdir} is not inside the fork server's {self.scratch_root}")
        reply = self.request({
            "op": "spawn",
            "connection_file": str(connection_file),
            "workdir": str(workdir),
            "env": env,
            "limits": settings["limits"],
            "uid": settings["uid"],
            "storage": settings["storage"],
        })
        if "pid" not in reply:
            raise ForkServerError(f"the fork server could not start a kernel: {reply.get('error')}")
        return ForkedKernelProcess(self, reply["pid"])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                channel.send(self.process.stdin, {"op": "quit"})
                self.process.stdin.close()
                self.process.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self._log.close()


class ForkedKernelProcess:
    """What ``LocalProvisioner`` expects of a ``Popen``, for a child of the zygote.

    ``pid`` is the child's pid inside the sandbox's PID namespace: only meaningful to
    the zygote, which is why every operation goes through it.
    """

    stdin = stdout = stderr = None

    def __init__(self, server: ForkServer, pid: int):
        self.server, self.pid = server, pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.server.request({"op": "poll", "pid": self.pid})["exit"]
            except ForkServerError:
                self.returncode = -9  # the zygote is gone, and its children with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked kernel", timeout)
            time.sleep(0.02)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            self.server.request({"op": "signal", "pid": self.pid, "signum": int(signum)})

    def kill(self) -> None:
        self.send_signal(9)

    def terminate(self) -> None:
        self.send_signal(15)


class ForkedKernelProvisioner(LocalProvisioner):
    """``LocalProvisioner`` whose kernels come from a zygote instead of ``Popen``."""

    fork_server: ForkServer | None = None
    #: What :mod:`.inside.confine` applies in the child: ``limits``, ``uid``, ``storage``.
    settings: dict | None = None

    async def launch_kernel(self, cmd: list[str], **kwargs) -> dict:
        km = self.parent
        env = {k: v for k, v in kwargs["env"].items() if k != "JPY_PARENT_PID"}
        # What bubblewrap's --chdir and --setenv give a kernel started from scratch.
        env.update(PWD=str(kwargs["cwd"]), TMPDIR="/tmp")
        self.process = self.fork_server.spawn(
            Path(km.connection_file), Path(kwargs["cwd"]), env, self.settings
        )
        self.pid, self.pgid = self.process.pid, None  # signals go through the zygote
        self.cwd = kwargs.get("cwd")
        return self.connection_info

    async def wait(self) -> int | None:
        """As LocalProvisioner's, polling every 10 ms instead of every 100 ms."""
        if self.process is None:
            return 0
        while await self.poll() is None:
            await asyncio.sleep(0.01)
        code, self.process = self.process.returncode, None
        return code


# -- one set of zygotes per grading process ------------------------------------------
_servers: dict[tuple, ForkServer] = {}
_failures: set[tuple] = set()


def get(slot: int, hidden: tuple[Path, ...], preload: tuple[str, ...] = ()) -> ForkServer | None:
    """The zygote for this slot and sandbox layout that has imported ``preload`` (besides
    :data:`PRELOAD`), started on first use; None if off.

    A running zygote that imported more serves too, so a process that grades several
    assignments (the Check my work service) keeps one zygote where it asks for the most
    first. A zygote that failed to start is not tried again by this process (the reason is
    logged); one that died is replaced.
    """
    if not enabled():
        return None
    root = scratch_root()
    sandboxed = bwrap_path() is not None
    # Hidden paths the project's cover already hides change nothing in the layout: every
    # built-in assignment shares one zygote per slot.
    hidden = paths_to_cover(hidden, root) if sandboxed else ()
    layout = (slot, str(root), sandboxed, tuple(map(str, hidden)))
    if layout in _failures:
        return None
    wanted = set(preload)
    for key, server in list(_servers.items()):
        if key[0] == layout and wanted <= set(server.modules):
            if server.alive():
                return server
            server.close()
            del _servers[key]
    try:
        server = ForkServer(slot, root, hidden, tuple(preload))
    except (ForkServerError, OSError) as exc:
        log.warning("no fork server, kernels start from scratch: %s", exc)
        _failures.add(layout)
        return None
    _servers[(layout, server.modules)] = server
    return server


@atexit.register
def close_all() -> None:
    for server in _servers.values():
        server.close()
    _servers.clear()
