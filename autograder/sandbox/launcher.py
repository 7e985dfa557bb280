"""How a grading kernel's process comes to be: the start strategies, chosen once per kernel.

A :class:`~autograder.sandbox.kernel.SandboxedKernel` picks its strategy once, when it is
made (:func:`choose`), and from then on only calls it:

* :class:`ForkedStart`: a child of this worker's fork server
  (:mod:`autograder.sandbox.forkserver`, a template that imported torch and IPython once,
  inside the same sandbox). If the fork server cannot give a kernel, that one start
  falls back to a fresh interpreter: slower, same isolation.
* :class:`FreshStart`: a fresh interpreter, ``python -m ipykernel_launcher``, run by the
  limits launcher (:mod:`.inside.limits_launcher`) inside bubblewrap where it is installed
  (:func:`autograder.sandbox.isolation.wrap_command`), with the GPU's devices for a kernel
  that uses one (:mod:`autograder.sandbox.gpu`).

Both are told everything in one :class:`Launch` (working directory, environment, what
:mod:`.inside.confine` applies, what the sandbox shows at ``/tmp`` and ``/dev/shm``), made
by the kernel before it starts: a strategy never asks the kernel, or its storage, for
anything, and both kernels look the same from inside (``tests/autograder/test_forkserver.py``).
Nothing else in the grader talks to the fork server.

It also takes out jupyter_client's fixed pauses. jupyter_client is written for
notebooks that live for hours, where a few hundred milliseconds at start and stop go
unnoticed; a grader starts and stops one kernel per submission, and a forked kernel is
ready in about a tenth of a second, so those pauses would be most of the cost. Nothing
here changes what is said to the kernel, only how long we wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import subprocess
import time
import uuid
from pathlib import Path
from queue import Empty

import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from traitlets import default

from . import forkserver
from .isolation import wrap_command

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Launch:
    """Everything a strategy needs to start one kernel, fixed before it starts."""

    workdir: Path
    #: The kernel's environment (:func:`autograder.sandbox.isolation.kernel_environment`).
    env: dict
    #: What :mod:`.inside.confine` applies: ``limits``, ``uid``, ``storage``.
    settings: dict
    #: What bubblewrap shows at ``/tmp`` and ``/dev/shm``: a host folder, or a tmpfs size.
    tmp: str | int
    shm: str | int
    hidden: tuple[Path, ...]
    #: The bubblewrap binary, or None: resource limits only.
    bwrap: str | None
    uses_gpu: bool


def start_mode(uses_gpu: bool = False) -> str:
    """What ``autograder grade`` prints about how kernels start."""
    if not forkserver.enabled():
        return "started from scratch (fork server off)"
    if uses_gpu:
        return "started from scratch (the fork server's template has no GPU)"
    return "forked from a preloaded template (fork server)"


class FreshStart:
    """A fresh interpreter, confined by the limits launcher, in bubblewrap if installed."""

    #: Seconds this strategy spent starting a fork server (none).
    warm_up_seconds = 0.0

    def start(self, launch: Launch) -> SandboxedKernelManager:
        return _start_kernel(launch, fork_server=None)


#: Starts a fresh interpreter (no state: one for every kernel).
FRESH = FreshStart()


class ForkedStart:
    """A child of the worker's fork server for this slot and sandbox layout.

    Without a fork server (off here, or it failed to start) each start is a fresh
    interpreter. Where the fork server fails to give a child, :meth:`start` returns
    None: the kernel then clears its slot and starts from scratch (:data:`FRESH`),
    slower, with the same isolation."""

    def __init__(self, slot: int, hidden: tuple[Path, ...], preload: tuple[str, ...] = ()):
        self.slot, self.hidden, self.preload = slot, hidden, tuple(preload)
        #: Seconds spent starting this slot's fork server (once per grading worker).
        self.warm_up_seconds = 0.0

    def _server(self):
        started = time.monotonic()
        server = forkserver.get(self.slot, self.hidden, self.preload)
        if server is not None and server.started_at >= started:  # this call started it
            self.warm_up_seconds += time.monotonic() - started
        return server

    def start(self, launch: Launch) -> SandboxedKernelManager | None:
        server = self._server()
        if server is None:
            return FRESH.start(launch)
        try:
            return _start_kernel(launch, fork_server=server)
        except forkserver.ForkServerError as exc:
            log.warning("fork server failed (%s); starting the kernel from scratch", exc)
            return None


def choose(uses_gpu: bool, slot: int, hidden: tuple[Path, ...],
           use_fork_server: bool = True, preload: tuple[str, ...] = ()) -> ForkedStart | FreshStart:
    """The start strategy of one kernel: the fork server where it is on and can serve this
    kernel (its template has no GPU), else a fresh interpreter."""
    if use_fork_server and not uses_gpu and forkserver.enabled():
        return ForkedStart(slot, hidden, preload)
    return FRESH


def _start_kernel(launch: Launch, fork_server) -> SandboxedKernelManager:
    """A started kernel manager; on failure nothing of it is left running."""
    km = SandboxedKernelManager(
        kernel_name="python3",
        launch=launch,
        fork_server=fork_server,
        client_class="autograder.sandbox.launcher.FastStartKernelClient",
        # Ours, not the manager's: it would destroy it waiting 100 ms for messages
        # that a killed kernel will never read.
        context=zmq.asyncio.Context(),
        transport="ipc",
        ip=str(launch.workdir / ".kernel-ipc"),
    )
    km.connection_file = str(launch.workdir / ".kernel-connection.json")
    # Signals cannot cross into the sandbox's PID namespace: interrupt through
    # the control channel instead, and ipykernel signals itself.
    km.kernel_spec.interrupt_mode = "message"
    try:
        # The kernel's own console chatter is of no use to anyone grading.
        run_sync(km.start_kernel)(
            env=launch.env,
            cwd=str(launch.workdir),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except BaseException:
        stop_kernel(km)
        raise
    return km


def kernel_process(km: AsyncKernelManager | None):
    """The kernel's process as its provisioner holds it: a ``Popen`` (started from
    scratch) or a :class:`~autograder.sandbox.forkserver.ForkedKernelProcess`; or None."""
    return getattr(getattr(km, "provisioner", None), "process", None)


def kill_kernel(km: AsyncKernelManager | None) -> None:
    """Kill the kernel's process at once (safe from another thread: the watchdog)."""
    process = kernel_process(km)
    if process is not None:
        with contextlib.suppress(Exception):
            process.kill()


def stop_kernel(km: AsyncKernelManager | None) -> None:
    """Stop the kernel and free what its manager holds (its sockets' context)."""
    if km is None:
        return
    with contextlib.suppress(Exception):
        run_sync(kill_kernel_now)(km)
    with contextlib.suppress(Exception):
        run_sync(km.cleanup_resources)()
    km.context.destroy(linger=0)


def process_inside(km: AsyncKernelManager | None) -> int | None:
    """A process inside the sandbox of a kernel that bubblewrap started from scratch (its
    own /tmp and /dev/shm can be read through /proc/PID/root), or None."""
    process = kernel_process(km)
    if not isinstance(process, subprocess.Popen):
        return None
    import psutil

    mine = os.readlink("/proc/self/ns/mnt")
    with contextlib.suppress(psutil.Error, OSError):
        for child in psutil.Process(process.pid).children(recursive=True):
            if os.readlink(f"/proc/{child.pid}/ns/mnt") != mine:
                return child.pid
    return None


class SandboxedKernelManager(AsyncKernelManager):
    """A KernelManager whose kernel runs sandboxed: forked by a zygote when it has a
    ``fork_server``, else started by the command of :func:`wrap_command`."""

    def __init__(self, *args, launch: Launch, fork_server=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.launch, self.fork_server = launch, fork_server

    async def _async_pre_start_kernel(self, **kw):
        if self.fork_server is not None and self.provisioner is None:
            self.kernel_id = self.kernel_id or str(uuid.uuid4())
            self.provisioner = forkserver.ForkedKernelProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
            self.provisioner.fork_server = self.fork_server
            self.provisioner.settings = self.launch.settings
        return await super()._async_pre_start_kernel(**kw)

    def write_connection_file(self, **kwargs):
        super().write_connection_file(**kwargs)
        # The file holds the session key: readable by the sandbox's uid only.
        uid = self.launch.settings["uid"]
        if uid is not None:
            os.chown(self.connection_file, uid, uid, follow_symlinks=False)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        if self.fork_server is not None:
            return cmd  # the zygote needs only the connection file
        launch = self.launch
        return wrap_command(cmd, launch.workdir, launch.settings, launch.hidden,
                            bwrap=launch.bwrap, tmp=launch.tmp, shm=launch.shm,
                            uses_gpu=launch.uses_gpu)


class FastStartKernelClient(AsyncKernelClient):
    """jupyter_client's kernel client, without a fixed pause when the kernel starts.

    Its ``wait_for_ready`` ends by listening to IOPub until 0.2 s pass in silence, which
    is 0.2 s per submission for nothing: nbclient ignores messages that answer no
    request of its own. Here the same handshake (a ``kernel_info`` reply on the shell
    channel, then a first IOPub message to show that channel is connected) is followed
    by draining only what has already arrived.
    """

    @default("context")
    def _context_default(self) -> zmq.asyncio.Context:
        self._created_context = True
        context = zmq.asyncio.Context()
        # The client connects before the kernel has bound its sockets; ZeroMQ then
        # retries every 100 ms by default. Retry sooner: a forked kernel is up fast.
        context.setsockopt(zmq.RECONNECT_IVL, 10)
        return context

    async def wait_for_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else float("inf"))
        while True:
            self.kernel_info()
            try:
                reply = await self.shell_channel.get_msg(timeout=1)
            except Empty:
                reply = None
            if reply is not None and reply["msg_type"] == "kernel_info_reply":
                try:
                    await self.iopub_channel.get_msg(timeout=0.2)
                except Empty:
                    pass  # IOPub not connected yet: ask again
                else:
                    self._handle_kernel_info_reply(reply)
                    break
            if not await self._async_is_alive():
                raise RuntimeError("Kernel died before replying to kernel_info")
            if time.monotonic() > deadline:
                raise RuntimeError(f"Kernel didn't respond in {timeout:g} seconds")
        while True:
            try:
                await self.iopub_channel.get_msg(timeout=0)
            except Empty:
                break


async def kill_kernel_now(km: AsyncKernelManager) -> None:
    """``shutdown_kernel(now=True)`` without its pauses.

    That first sends an interrupt the dying kernel never reads (closing the control
    socket then lingers 100 ms for it) and checks for the process's end every 100 ms.
    A graded kernel has nothing to save: kill it and wait in 10 ms steps.
    """
    if km.has_kernel:
        await km.provisioner.kill()
        for _ in range(500):
            if await km.provisioner.poll() is not None:
                break
            await asyncio.sleep(0.01)
        await km.provisioner.wait()
    await km.cleanup_resources()
