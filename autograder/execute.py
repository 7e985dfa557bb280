"""Run a submitted notebook in a fresh, sandboxed kernel, and keep it alive for the checks.

:class:`KernelSession` owns one kernel for one submission:

* :meth:`KernelSession.run_notebook` executes the code cells in order with a
  per-cell time limit and a per-submission deadline. A cell that times out is
  interrupted; a cell that kills the kernel (``sys.exit`` in a scratch cell,
  ``os._exit``, the memory cap) is recorded, the kernel is restarted and the
  cells that had worked are replayed, so one bad cell costs only what depends on it.
* :meth:`KernelSession.request` is the transport used by the trusted checks
  (:mod:`autograder.protocol`): it runs ``__autograder__.handle(path)`` in the
  kernel and waits for the reply with its own time limit.

Every event (time-outs, restarts, truncated output) is kept in ``events`` for the report.

The kernel itself comes from this worker's fork server (:mod:`autograder.forkserver`)
when there is one, and is otherwise started from scratch inside bubblewrap; the two
look the same from inside (``tests/autograder/test_forkserver.py``).
"""

from __future__ import annotations

import contextlib
import copy
import logging
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import nbformat
import zmq.asyncio
from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from . import forkserver
from .forkserver import ForkedKernelProvisioner
from .quickstart import kill_kernel_now
from .sandbox import Limits, hand_over, kernel_environment, kill_strays, wrap_command

#: Marks a cell in the notebook as not executed while grading (widgets, long demos).
SKIP_TAG = "skip-grading"
log = logging.getLogger(__name__)
MAX_OUTPUT_CHARS = 20_000
_TIMEOUT_ENAME = "CellTimeoutError"


class SandboxedKernelManager(AsyncKernelManager):
    """A KernelManager whose kernel runs sandboxed: forked by a zygote
    (:mod:`autograder.forkserver`) when one is given, else started by the command of
    :func:`autograder.sandbox.wrap_command`."""

    def __init__(
        self, *args, workdir: Path, limits: Limits, slot: int, hidden, fork_server=None, **kwargs
    ):
        super().__init__(*args, **kwargs)
        self._workdir, self.limits, self._slot, self._hidden = workdir, limits, slot, hidden
        self.fork_server = fork_server

    async def _async_pre_start_kernel(self, **kw):
        if self.fork_server is not None and self.provisioner is None:
            self.kernel_id = self.kernel_id or str(uuid.uuid4())
            self.provisioner = ForkedKernelProvisioner(
                kernel_id=self.kernel_id, kernel_spec=self.kernel_spec, parent=self
            )
            self.provisioner.fork_server = self.fork_server
        return await super()._async_pre_start_kernel(**kw)

    def write_connection_file(self, **kwargs):
        super().write_connection_file(**kwargs)
        # The file holds the session key: readable by the sandbox's uid only.
        hand_over(Path(self.connection_file), self._slot)

    def format_kernel_cmd(self, extra_arguments=None):
        cmd = super().format_kernel_cmd(extra_arguments)
        if self.fork_server is not None:
            return cmd  # the zygote needs only the connection file
        return wrap_command(cmd, self._workdir, self.limits, self._slot, self._hidden)


class _CappedClient(NotebookClient):
    """nbclient that keeps at most ``MAX_OUTPUT_CHARS`` of each cell's output."""

    _truncated: set[int]

    def output(self, outs, msg, display_id, cell_index):
        truncated = self.__dict__.setdefault("_truncated", set())
        if cell_index in truncated:
            return None
        out = super().output(outs, msg, display_id, cell_index)
        excess = sum(_output_size(o) for o in outs) - MAX_OUTPUT_CHARS
        if excess > 0:
            # Keep the start of the newest output, drop the rest, and say so.
            last = outs[-1]
            if isinstance(last.get("text"), str) and len(last["text"]) > excess:
                last["text"] = last["text"][: len(last["text"]) - excess]
            else:
                outs.pop()
            outs.append(nbformat.v4.new_output(
                "stream", name="stdout", text="\n[output truncated by the autograder]\n"))
            truncated.add(cell_index)
        return out


def _output_size(output) -> int:
    return len(str(output.get("text", ""))) + len(str(output.get("data", "")))


class KernelSession:
    """One sandboxed kernel for one submission, used first to run it, then to check it."""

    def __init__(
        self,
        workdir: Path,
        *,
        cell_timeout: float = 60,
        submission_timeout: float = 600,
        limits: Limits | None = None,
        slot: int = 0,
        hidden: tuple[Path, ...] = (),
        max_restarts: int = 2,
        use_fork_server: bool = True,
    ):
        self.workdir = Path(workdir)
        self.cell_timeout = cell_timeout
        self.deadline = time.monotonic() + submission_timeout
        self.limits = limits or Limits()
        self.slot = slot
        self.hidden = hidden
        self.max_restarts = max_restarts
        self.use_fork_server = use_fork_server
        self.restarts = 0
        self.events: list[str] = []
        self.km: SandboxedKernelManager | None = None
        self.client: _CappedClient | None = None
        self._good_cells: list[int] = []
        self._bridge_source: str | None = None
        self._context: zmq.asyncio.Context | None = None
        self._answered = False  # did the kernel answer the last request in time?

    # -- kernel life cycle -----------------------------------------------------
    def start(self, nb: nbformat.NotebookNode) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        # The kernel may run under an unprivileged uid of its own: let it write here.
        hand_over(self.workdir, self.slot)
        server = self._fork_server()
        try:
            self._start_kernel(nb, server)
        except forkserver.ForkServerError as exc:
            # Slower, same isolation: start this kernel from scratch.
            log.warning("fork server failed (%s); starting the kernel from scratch", exc)
            self.shutdown()
            self._start_kernel(nb, None)

    def _fork_server(self):
        if not self.use_fork_server:
            return None
        if not self.workdir.resolve().is_relative_to(forkserver.scratch_root().resolve()):
            return None
        return forkserver.get(self.slot, self.hidden)

    def _start_kernel(self, nb: nbformat.NotebookNode, server) -> None:
        self._context = zmq.asyncio.Context()
        self.km = SandboxedKernelManager(
            kernel_name="python3",
            workdir=self.workdir,
            limits=self.limits,
            slot=self.slot,
            hidden=self.hidden,
            fork_server=server,
            client_class="autograder.quickstart.QuickStartKernelClient",
            # Ours, not the manager's: it would destroy it waiting 100 ms for messages
            # that a killed kernel will never read.
            context=self._context,
            transport="ipc",
            ip=str(self.workdir / ".kernel-ipc"),
        )
        self.km.connection_file = str(self.workdir / ".kernel-connection.json")
        # Signals cannot cross into the sandbox's PID namespace: interrupt through
        # the control channel instead, and ipykernel signals itself.
        self.km.kernel_spec.interrupt_mode = "message"
        # The kernel's own console chatter is of no use to anyone grading.
        run_sync(self.km.start_kernel)(
            env=kernel_environment(self.workdir),
            cwd=str(self.workdir),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        self.client = _CappedClient(
            nb,
            km=self.km,
            timeout=self.cell_timeout,
            startup_timeout=120,
            allow_errors=True,
            interrupt_on_timeout=True,
            error_on_timeout={
                "ename": _TIMEOUT_ENAME,
                "evalue": f"cell stopped after the {self.cell_timeout:g}s time limit",
                "traceback": [],
            },
            record_timing=False,
            resources={"metadata": {"path": str(self.workdir)}},
        )
        self.client.start_new_kernel_client()

    def shutdown(self) -> None:
        if self.client is not None and self.client.kc is not None:
            with contextlib.suppress(Exception):
                self.client.kc.stop_channels()
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
        self.km = self.client = None

    def alive(self) -> bool:
        return self.km is not None and run_sync(self.km.is_alive)()

    def _restart(self, nb: nbformat.NotebookNode, reason: str) -> bool:
        """Fresh kernel, then replay the cells that had worked. False if out of restarts."""
        if self.restarts >= self.max_restarts or self.remaining() <= 0:
            self.events.append(f"kernel not restarted after: {reason}")
            return False
        self.restarts += 1
        self.events.append(f"kernel restarted ({reason}); replaying {len(self._good_cells)} cells")
        self.shutdown()
        # Replay on a copy: the outputs that count are the ones already recorded.
        replay = copy.deepcopy(nb)
        self.start(replay)
        for index in self._good_cells:
            try:
                self.client.execute_cell(replay.cells[index], index)
            except DeadKernelError:
                self.events.append("kernel died again during replay")
                return False
        if self._bridge_source is not None:
            self.install_bridge(self._bridge_source)
        return True

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    # -- running the notebook ----------------------------------------------------
    def run_notebook(self, nb: nbformat.NotebookNode, skip=lambda cell: False) -> None:
        """Execute every code cell (except ``skip(cell)``), in place, never raising."""
        if self.km is None:
            self.start(nb)
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code" or skip(cell) or SKIP_TAG in cell.metadata.get("tags", []):
                continue
            label = f"cell {index + 1}"
            if self.remaining() <= 0:
                self.events.append(f"{label} not run: the submission's time limit was reached")
                continue
            self.client.timeout = max(1, int(min(self.cell_timeout, self.remaining())))
            started = time.monotonic()
            try:
                self.client.execute_cell(cell, index)
            except DeadKernelError:
                self.events.append(f"{label} stopped the kernel (exit, crash or memory limit)")
                if not self._restart(nb, f"{label} stopped it"):
                    break
                continue
            if kill_strays(self.slot):
                self.events.append(f"{label} left processes running; they were stopped")
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            if time.monotonic() - started >= self.client.timeout:
                self.events.append(f"{label} exceeded the {self.cell_timeout:g}s time limit")
                if not self._responsive() and not self._restart(nb, f"{label} would not stop"):
                    break
                continue
            if errors:
                self.events.append(
                    f"{label} raised {errors[0].get('ename')}: {errors[0].get('evalue')}"[:300]
                )
                continue
            self._good_cells.append(index)

    def _responsive(self, timeout: float = 10) -> bool:
        if not self.alive():
            return False
        try:
            reply = run_sync(self.client.kc.execute_interactive)(
                "pass",
                silent=True,
                store_history=False,
                timeout=timeout,
                output_hook=lambda m: None,
            )
            return reply["content"]["status"] == "ok"
        except Exception:
            return False

    # -- the check transport -------------------------------------------------------
    def install_bridge(self, source: str) -> None:
        """Define ``__autograder__`` in the kernel from :mod:`autograder.kernel_side`'s source."""
        self._bridge_source = source
        code = (
            "def __autograder_install(src):\n"
            "    import types\n"
            "    module = types.ModuleType('autograder_bridge')\n"
            "    exec(compile(src, '<autograder-bridge>', 'exec'), module.__dict__)\n"
            "    return module.make_bridge(get_ipython().user_ns)\n"
            f"__autograder__ = __autograder_install({source!r})\n"
            "del __autograder_install\n"
        )
        self.execute_silently(code, timeout=60)

    def execute_silently(self, code: str, timeout: float) -> dict:
        """Run code in the kernel and return the reply content.

        Raises TimeoutError or DeadKernelError."""
        if not self.alive():
            raise DeadKernelError("the kernel is not running")
        kc = self.client.kc
        self._answered = False
        try:
            reply = run_sync(kc.execute_interactive)(
                code, silent=True, store_history=False, timeout=timeout, output_hook=lambda m: None
            )
        except TimeoutError:
            with contextlib.suppress(Exception):
                run_sync(self.km.interrupt_kernel)()
            raise
        self._answered = True
        return reply["content"]

    def ensure_alive(self, nb: nbformat.NotebookNode) -> bool:
        """Called by the checks between requests: restart (and replay) a dead or stuck kernel."""
        # After an answered request a live process is enough; after a time-out or a
        # crash, make sure the kernel answers again before sending it more work.
        if self._answered and self.alive():
            return True
        if self._responsive(timeout=5):
            self._answered = True
            return True
        return self._restart(nb, "it stopped answering during the checks")


def prepare_workdir(submission_dir: Path, workdir: Path, notebook_name: str) -> None:
    """Copy a submission's files (not its notebook, which is passed sanitised) into workdir."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    if submission_dir.is_dir():
        for item in submission_dir.iterdir():
            if item.name == notebook_name or item.is_symlink():
                continue
            target = workdir / item.name
            if item.is_dir():
                shutil.copytree(item, target, symlinks=False, ignore_dangling_symlinks=True)
            elif item.is_file():
                shutil.copy2(item, target)
