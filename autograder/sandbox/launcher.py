"""Starting and stopping one sandboxed kernel: one interface, two ways.

:class:`KernelLauncher` is all :mod:`autograder.sandbox.execute` knows about how a kernel
comes to be. It asks this worker's fork server (:mod:`autograder.sandbox.forkserver`) for a
child of its preloaded template when there is one, and otherwise starts the kernel from
scratch inside bubblewrap (:func:`autograder.sandbox.isolation.wrap_command`); both kernels look
the same from inside (``tests/autograder/test_forkserver.py``). Nothing else in the
grader talks to the fork server.

It also takes out jupyter_client's fixed pauses. jupyter_client is written for
notebooks that live for hours, where a few hundred milliseconds at start and stop go
unnoticed; a grader starts and stops one kernel per submission, and a forked kernel is
ready in about a tenth of a second, so those pauses would be most of the cost. Nothing
here changes what is said to the kernel, only how long we wait for it.
"""

from __future__ import annotations

import asyncio
import contextlib
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

from ..limits import Limits
from . import forkserver, gpu
from .isolation import bwrap_path, kept_under_tmp, kernel_environment, sandbox_uid, wrap_command
from .slots import hand_over, kill_strays
from .storage import Storage, scratch_root

log = logging.getLogger(__name__)


def start_mode(uses_gpu: bool = False) -> str:
    """What ``autograder grade`` prints about how kernels start."""
    if not forkserver.enabled():
        return "started from scratch (fork server off)"
    if uses_gpu:
        return "started from scratch (the fork server's template has no GPU)"
    return "forked from a preloaded template (fork server)"


class KernelLauncher:
    """Starts, kills and stops the kernels of one submission (one at a time)."""

    def __init__(self, storage: Storage, limits: Limits, slot: int, hidden=(),
                 use_fork_server: bool = True):
        self.storage, self.limits, self.slot = storage, limits, slot
        self.hidden = tuple(Path(p) for p in hidden)
        self.use_fork_server = use_fork_server
        #: Whether this submission's kernels see the GPU (:mod:`autograder.sandbox.gpu`).
        self.uses_gpu = gpu.in_use(limits)
        self.km: SandboxedKernelManager | None = None
        #: Seconds spent starting this slot's fork server (once per grading worker).
        self.warm_up_seconds = 0.0
        self._context: zmq.asyncio.Context | None = None
        self._inside_pid: int | None = None

    @property
    def forked(self) -> bool:
        """Whether the running kernel came from the fork server."""
        return self.km is not None and self.km.fork_server is not None

    def start(self) -> SandboxedKernelManager:
        """A started kernel manager; from the fork server if it can, else from scratch."""
        server = self._fork_server()
        try:
            return self._start(server)
        except forkserver.ForkServerError as exc:
            # Slower, same isolation: start this kernel from scratch.
            log.warning("fork server failed (%s); starting the kernel from scratch", exc)
            self.stop()
            return self._start(None)

    def _fork_server(self):
        if not self.use_fork_server or self.uses_gpu:  # the template has no GPU
            return None
        started = time.monotonic()
        server = forkserver.get(self.slot, self.hidden)
        if server is not None and server.started_at >= started:  # this call started it
            self.warm_up_seconds += time.monotonic() - started
        return server

    def _start(self, server) -> SandboxedKernelManager:
        workdir = self.storage.workdir
        self._context = zmq.asyncio.Context()
        self._inside_pid = None
        self.km = SandboxedKernelManager(
            kernel_name="python3",
            launcher=self,
            fork_server=server,
            client_class="autograder.sandbox.launcher.FastStartKernelClient",
            # Ours, not the manager's: it would destroy it waiting 100 ms for messages
            # that a killed kernel will never read.
            context=self._context,
            transport="ipc",
            ip=str(workdir / ".kernel-ipc"),
        )
        self.km.connection_file = str(workdir / ".kernel-connection.json")
        # Signals cannot cross into the sandbox's PID namespace: interrupt through
        # the control channel instead, and ipykernel signals itself.
        self.km.kernel_spec.interrupt_mode = "message"
        # The kernel's own console chatter is of no use to anyone grading.
        run_sync(self.km.start_kernel)(
            env=kernel_environment(workdir, self.storage.tmpdir(), self.uses_gpu),
            cwd=str(workdir),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return self.km

    def settings(self) -> dict:
        """What :mod:`.inside.confine` applies in the sandbox, for either start path."""
        # The cover hides this worker's other submissions (bubblewrap shows its whole
        # scratch folder to the fork server).
        keep = kept_under_tmp(self.storage.workdir)
        storage = self.storage.private_storage(keep, cover=scratch_root())
        return {
            "limits": self.limits.rlimits(self.storage.mounted, self.uses_gpu),
            "uid": sandbox_uid(self.slot),
            "storage": storage,
        }

    def kill(self) -> None:
        """Kill the running kernel at once (safe from another thread: the watchdog)."""
        km = self.km
        process = getattr(getattr(km, "provisioner", None), "process", None)
        if process is not None:
            with contextlib.suppress(Exception):
                process.kill()
        kill_strays(self.slot, everything=True)

    def stop(self) -> None:
        """Stop the kernel, and every process of this submission with it."""
        if self.km is not None:
            with contextlib.suppress(Exception):
                run_sync(kill_kernel_now)(self.km)
            with contextlib.suppress(Exception):
                run_sync(self.km.cleanup_resources)()
        if self._context is not None:
            self._context.destroy(linger=0)
            self._context = None
        # Nothing of this kernel may outlive it, not even a daemon that left its tree.
        kill_strays(self.slot, everything=True)
        self.km = None

    def inside_pid(self) -> int | None:
        """A process inside the kernel's sandbox (bubblewrap started from scratch), to
        read the sandbox's own /tmp and /dev/shm through /proc/PID/root."""
        process = getattr(getattr(self.km, "provisioner", None), "process", None)
        if not isinstance(process, subprocess.Popen) or bwrap_path() is None:
            return None
        if self._inside_pid is None:
            import psutil

            mine = os.readlink("/proc/self/ns/mnt")
            with contextlib.suppress(psutil.Error, OSError):
                for child in psutil.Process(process.pid).children(recursive=True):
                    if os.readlink(f"/proc/{child.pid}/ns/mnt") != mine:
                        self._inside_pid = child.pid
                        break
        return self._inside_pid


class SandboxedKernelManager(AsyncKernelManager):
    """A KernelManager whose kernel runs sandboxed: forked by a zygote when it has a
    ``fork_server``, else started by the command of :func:`wrap_command`."""

    def __init__(self, *args, launcher: KernelLauncher, fork_server=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.launcher, self.fork_server = launcher, fork_server

    async def _async_pre_start_kernel(self, **kw):
        if self.fork_server is not None and self.provisioner is None:
            self.kernel_id = self.kernel_id or str(uuid.uuid4())
            self.provisioner = forkserver.ForkedKernelProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
            self.provisioner.fork_server = self.fork_server
        return await super()._async_pre_start_kernel(**kw)

    def write_connection_file(self, **kwargs):
        super().write_connection_file(**kwargs)
        # The file holds the session key: readable by the sandbox's uid only.
        hand_over(Path(self.connection_file), self.launcher.slot)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        if self.fork_server is not None:
            return cmd  # the zygote needs only the connection file
        launcher = self.launcher
        return wrap_command(cmd, launcher.storage.workdir, launcher.settings(),
                            launcher.hidden, launcher.storage, launcher.uses_gpu)


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
