"""The one object a grading job talks to: a sandboxed kernel, from start to stop.

:class:`SandboxedKernel` owns everything of one submission's run:

* its **slot** (:mod:`autograder.sandbox.slots`: the uid its processes run as), claimed
  here unless the caller holds one;
* its capped **storage** (:mod:`autograder.sandbox.storage`: working directory, ``/tmp``,
  ``/dev/shm``, the handed-in files copied in) and a **watchdog** over its caps;
* how its kernel **starts**, a strategy chosen once when the object is made
  (:func:`autograder.sandbox.launcher.choose`: forked from the fork server, or a fresh
  interpreter; bubblewrap or resource limits only; with the GPU or without), told all
  it needs in one :class:`~autograder.sandbox.launcher.Launch`;
* **running the notebook**: :meth:`SandboxedKernel.run_notebook` executes the code cells
  in order with a per-cell time limit and a per-submission deadline. A cell that times
  out is interrupted; a cell that kills the kernel (``sys.exit`` in a scratch cell,
  ``os._exit``, the memory cap) or fills one of its areas is stopped and noted, the
  kernel is restarted on empty areas and the cells that had worked are replayed, so
  one bad cell costs only what depends on it;
* **answering check requests**: :meth:`SandboxedKernel.install_bridge`,
  :meth:`SandboxedKernel.request` and :meth:`SandboxedKernel.ensure_alive` are the
  transport of the trusted checks (:mod:`autograder.protocol.trusted`);
* **stopping**: :meth:`SandboxedKernel.close` (or leaving its ``with`` block) stops the
  kernel, kills every process of its uid, gives its storage back and its slot.

Every event (time-outs, restarts, caps reached, truncated output) is kept in
``events`` for the report.
"""

from __future__ import annotations

import contextlib
import copy
import queue
import threading
import time
from pathlib import Path

import nbformat
from jupyter_core.utils import run_sync
from nbclient import NotebookClient
from nbclient.exceptions import DeadKernelError

from ..limits import Limits
from . import gpu, launcher
from .cell_notes import cell_label, error_note
from .isolation import bwrap_path, isolation_level, kept_under_tmp, kernel_environment, sandbox_uid
from .slots import Slot, hand_over, kill_strays, sandbox_slot
from .storage import Storage, caps_in_force, new_scratch, scratch_root

#: Marks a cell in the notebook as not executed while grading (widgets, long demos).
SKIP_TAG = "skip-grading"
#: The shell message that asks the check bridge to answer one request (:meth:`request`).
BRIDGE_REQUEST = "autograder_request"
MAX_OUTPUT_CHARS = 20_000
_TIMEOUT_ENAME = "CellTimeoutError"
#: How often the watchdog looks at the storage caps while a kernel runs.
WATCH_SECONDS = 0.1

__all__ = ["SKIP_TAG", "KernelSession", "SandboxedKernel", "describe_isolation",
           "kernel_start_mode"]


def kernel_start_mode(uses_gpu: bool = False) -> str:
    """How kernels start on this machine (printed by ``autograder grade``); a ``gpu = true``
    assignment's kernels on a machine with a GPU never come from the fork server."""
    return launcher.start_mode(uses_gpu)


def describe_isolation(limits: Limits) -> str:
    """The isolation line: the sandbox in force and the caps, with what holds each."""
    return (f"{isolation_level()}; caps: {caps_in_force(limits, bwrap_path() is not None)}"
            + (f"; {gpu.describe(gpu.available())}" if limits.gpu else ""))


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
            outs.append(_note_output("[output truncated by the autograder]"))
            truncated.add(cell_index)
        return out


def _output_size(output) -> int:
    return len(str(output.get("text", ""))) + len(str(output.get("data", "")))


def _note_output(text: str):
    return nbformat.v4.new_output("stream", name="stdout", text=f"\n{text}\n")


class SandboxedKernel:
    """One sandboxed kernel for one submission, used first to run it, then to check it.

    ``with SandboxedKernel(limits, ...) as kernel:`` then :meth:`start`,
    :meth:`run_notebook`, :meth:`install_bridge` and the check transport; leaving the
    block stops everything (:meth:`close`). ``slot=None`` claims a slot for the kernel's
    lifetime.
    """

    def __init__(self, limits: Limits | None = None, *, slot: int | None = None, hidden=(),
                 submission_dir: Path | None = None, notebook_name: str = "",
                 max_restarts: int = 2, use_fork_server: bool = True,
                 preload: tuple[str, ...] = ()):
        self.limits = limits or Limits()
        self._held = contextlib.ExitStack()
        if slot is None:
            slot = self._held.enter_context(sandbox_slot())
        #: The slot, with the uid its processes run as, decided here once.
        self.slot = slot = Slot(slot, sandbox_uid(slot))
        self.hidden = tuple(Path(p) for p in hidden)
        self.cell_timeout = self.limits.cell_timeout
        self.deadline = time.monotonic() + self.limits.submission_timeout
        self.max_restarts = max_restarts
        self.restarts = 0
        self.events: list[str] = []
        # Chosen once, for every start of this kernel: the sandbox (bubblewrap or resource
        # limits only), the GPU, and how a kernel process comes to be.
        self.bwrap = bwrap_path()
        #: Whether this submission's kernels see the GPU (:mod:`autograder.sandbox.gpu`).
        self.uses_gpu = gpu.in_use(self.limits)
        self.start_with = launcher.choose(self.uses_gpu, slot, self.hidden, use_fork_server,
                                          preload)
        self.km: launcher.SandboxedKernelManager | None = None
        self._inside: int | None = None  # a process in the sandbox (see _inside_pid)
        try:
            self.storage = Storage(new_scratch(), self.limits, self.bwrap is not None)
        except BaseException:
            self._held.close()
            raise
        #: Where the hidden checks and the kernel exchange requests and replies.
        self.exchange_dir = self.storage.exchange_dir
        try:
            if submission_dir is not None:
                self.storage.fill(Path(submission_dir), notebook_name)
            hand_over(self.workdir, slot)
        except BaseException:
            # No kernel comes back to close: give the mounted areas (and whatever
            # of the files fitted) back now, or they hold memory until the next sweep.
            self.storage.close()
            self._held.close()
            raise
        self.client: _CappedClient | None = None
        self._good_cells: list[int] = []
        self._bridge_source: str | None = None
        self._answered = False  # did the kernel answer the last request in time?
        self._watch: threading.Thread | None = None
        #: Set to stop the watchdog: it waits on this between looks, so it stops at once.
        self._stop_watching = threading.Event()
        self._full: list[str] = []  # what the watchdog found filled

    def __enter__(self) -> SandboxedKernel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def workdir(self) -> Path:
        return self.storage.workdir

    @property
    def forked(self) -> bool:
        """Whether the running kernel came from the fork server."""
        return self.km is not None and self.km.fork_server is not None

    @property
    def warm_up_seconds(self) -> float:
        """Seconds spent starting this worker's fork server (its first kernel only)."""
        return self.start_with.warm_up_seconds

    # -- kernel life cycle -----------------------------------------------------
    def _launch(self) -> launcher.Launch:
        """What the start strategy is told: all of it decided here, before it starts."""
        storage = self.storage
        # The cover hides this worker's other submissions (bubblewrap shows its whole
        # scratch folder to the fork server).
        keep = kept_under_tmp(storage.workdir)
        settings = {
            "limits": self.limits.rlimits(storage.mounted, self.uses_gpu),
            "uid": self.slot.uid,
            "storage": storage.private_storage(keep, cover=scratch_root()),
        }
        return launcher.Launch(
            workdir=storage.workdir,
            env=kernel_environment(storage.workdir, storage.tmpdir(), self.uses_gpu),
            settings=settings, tmp=storage.sandbox_tmp(), shm=storage.sandbox_shm(),
            hidden=self.hidden, bwrap=self.bwrap, uses_gpu=self.uses_gpu)

    def start(self, nb: nbformat.NotebookNode) -> None:
        self._inside = None
        launch = self._launch()
        km = self.start_with.start(launch)
        if km is None:  # the fork server could not serve this start
            kill_strays(self.slot, everything=True)
            km = launcher.FRESH.start(launch)
        self.km = km
        self.client = _CappedClient(
            nb,
            km=km,
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
        self._start_watchdog()

    def kill(self) -> None:
        """Kill the running kernel at once (safe from another thread: the watchdog)."""
        launcher.kill_kernel(self.km)
        kill_strays(self.slot, everything=True)

    def shutdown(self) -> None:
        """Stop the kernel, and every process of this submission with it."""
        self._stop_watchdog()
        if self.client is not None and self.client.kc is not None:
            with contextlib.suppress(Exception):
                self.client.kc.stop_channels()
        launcher.stop_kernel(self.km)
        # Nothing of this kernel may outlive it, not even a daemon that left its tree.
        kill_strays(self.slot, everything=True)
        self.km = None
        self.client = None

    def close(self) -> None:
        """Stop the kernel and give back its storage (memory and disk), the storage even
        if stopping the kernel failed, and last the slot."""
        try:
            try:
                self.shutdown()
            finally:
                self.storage.close()
        finally:
            self._held.close()

    def alive(self) -> bool:
        return self.km is not None and run_sync(self.km.is_alive)()

    def hand_over(self, path: Path) -> None:
        """Give ``path`` (a check's exchange file or folder) to this kernel's uid, which
        reads the request and writes the reply."""
        hand_over(Path(path), self.slot)

    def _restart(self, nb: nbformat.NotebookNode, reason: str) -> bool:
        """Fresh kernel on empty areas, then replay the cells that had worked.

        False if out of restarts or time."""
        if self.restarts >= self.max_restarts or self.remaining() <= 0:
            self.events.append(f"kernel not restarted after: {reason}")
            return False
        self.restarts += 1
        self.events.append(f"kernel restarted ({reason}); replaying {len(self._good_cells)} cells")
        self.shutdown()
        self.storage.reset()
        hand_over(self.workdir, self.slot)
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

    # -- the storage watchdog ------------------------------------------------------
    def _start_watchdog(self) -> None:
        self._full = []
        self._stop_watching.clear()
        self._watch = threading.Thread(target=self._watchdog, daemon=True,
                                       name=f"autograder-caps-{self.slot}")
        self._watch.start()

    def _stop_watchdog(self) -> None:
        self._stop_watching.set()
        if self._watch is not None:
            self._watch.join()
            self._watch = None

    def _watchdog(self) -> None:
        """Kill the kernel the moment one of its areas is full: a cell that writes in a
        loop and ignores the errors would otherwise spin until its time limit."""
        while not self._stop_watching.is_set():
            started = time.monotonic()
            full = self._full_areas()
            if full:
                self._full = full
                self.kill()
                return
            # A few statvfs calls cost microseconds; walking a big folder (no mounts)
            # can cost a lot more: never spend more than a fifth of the time looking.
            # (Waiting on the event, not sleeping: a stop need not wait out the pause.)
            self._stop_watching.wait(max(WATCH_SECONDS, 4 * (time.monotonic() - started)))

    def _full_areas(self) -> list[str]:
        """What the storage finds filled; bubblewrap's own /tmp and /dev/shm are read
        through a process inside the sandbox, which only the kernel knows."""
        return self.storage.full_areas(self._inside_pid() if self.storage.reads_inside else None)

    def _inside_pid(self) -> int | None:
        if self._inside is None and self.bwrap is not None:
            self._inside = launcher.process_inside(self.km)
        return self._inside

    def _caps_reached(self) -> list[str]:
        """What is full now (or was, when the watchdog stopped the kernel)."""
        return self._full or self._full_areas()

    def _stopped_at_cap(self, nb, cell, label: str, full: list[str]) -> bool:
        """Note the cap in the cell and the events, then restart; False if that failed."""
        for what in full:
            cell.setdefault("outputs", []).append(
                _note_output(f"[autograder] {what}: the cell was stopped"))
            self.events.append(f"{label} {what}: the cell was stopped")
        return self._restart(nb, f"{label} reached a storage cap")

    # -- running the notebook ----------------------------------------------------
    def run_notebook(self, nb: nbformat.NotebookNode, skip_grade_ids=()) -> None:
        """Execute every code cell, in place, never raising; cells tagged ``skip-grading``
        and those whose nbgrader ``grade_id`` is in ``skip_grade_ids`` (the test cells,
        which the hidden checks replace) are left out."""
        if self.km is None:
            self.start(nb)
        skip_grade_ids = set(skip_grade_ids)
        for index, cell in enumerate(nb.cells):
            if (cell.cell_type != "code" or SKIP_TAG in cell.metadata.get("tags", [])
                    or cell.metadata.get("nbgrader", {}).get("grade_id") in skip_grade_ids):
                continue
            label = cell_label(index, cell)
            if self.remaining() <= 0:
                self.events.append(f"{label} not run: the submission's time limit was reached")
                continue
            self.client.timeout = max(1, int(min(self.cell_timeout, self.remaining())))
            started = time.monotonic()
            try:
                self.client.execute_cell(cell, index)
            except DeadKernelError:
                full = self._caps_reached()
                if full:
                    if not self._stopped_at_cap(nb, cell, label, full):
                        break
                    continue
                self.events.append(f"{label} stopped the kernel (exit, crash or memory limit)")
                if not self._restart(nb, f"{label} stopped it"):
                    break
                continue
            full = self._caps_reached()
            if full:
                self.kill()
                if not self._stopped_at_cap(nb, cell, label, full):
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
                self.events.append(error_note(label, errors[0]))
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
        """Define ``__autograder__`` in the kernel from ``kernel_side.kernel_source()``
        (in a running kernel: ask :meth:`alive` first)."""
        self._bridge_source = source
        code = (
            "def __autograder_install(src):\n"
            "    import types\n"
            "    module = types.ModuleType('autograder_bridge')\n"
            "    exec(compile(src, '<autograder-bridge>', 'exec'), module.__dict__)\n"
            "    return module.make_bridge(get_ipython().user_ns)\n"
            f"__autograder__ = __autograder_install({source!r})\n"
            "del __autograder_install\n"
            f"__autograder__.listen(get_ipython().kernel, {BRIDGE_REQUEST!r})\n"
        )
        self.execute_silently(code, timeout=60)

    def request(self, path: str, timeout: float) -> dict:
        """Ask the bridge (:meth:`install_bridge`) to answer the check request in ``path``:
        one :data:`BRIDGE_REQUEST` shell message, whose reply content (``{"status": "ok"}``
        or the error's ``ename`` and ``evalue``) is returned. As for
        :meth:`execute_silently`, the caller has made sure the kernel runs.

        Raises TimeoutError (having interrupted the kernel)."""
        kc = self.client.kc
        self._answered = False
        message = kc.session.msg(BRIDGE_REQUEST, {"request": path})
        kc.shell_channel.send(message)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            try:
                if left <= 0:
                    raise queue.Empty
                reply = run_sync(kc.get_shell_msg)(timeout=left)
            except queue.Empty:
                self._interrupt()
                raise TimeoutError(f"no reply within {timeout:g}s") from None
            # (a reply to an earlier request that timed out is passed over)
            if reply["parent_header"].get("msg_id") == message["header"]["msg_id"]:
                self._answered = True
                return reply["content"]

    def execute_silently(self, code: str, timeout: float) -> dict:
        """Run code in the kernel and return the reply content. The caller has made sure
        the kernel runs (:meth:`alive` before :meth:`install_bridge`, :meth:`ensure_alive`
        before a check request): it is not asked again here, since for a forked kernel each
        asking is a round trip to the fork server.

        Raises TimeoutError."""
        kc = self.client.kc
        self._answered = False
        try:
            reply = run_sync(kc.execute_interactive)(
                code, silent=True, store_history=False, timeout=timeout, output_hook=lambda m: None
            )
        except TimeoutError:
            self._interrupt()
            raise
        self._answered = True
        return reply["content"]

    def _interrupt(self) -> None:
        """Interrupt what the kernel runs (after a request that timed out); never raises."""
        with contextlib.suppress(Exception):
            run_sync(self.km.interrupt_kernel)()

    def ensure_alive(self, nb: nbformat.NotebookNode) -> bool:
        """Called by the checks between requests: restart (and replay) a dead or stuck
        kernel, or one whose storage is full."""
        full = self._caps_reached()
        if full:
            self.kill()
            for what in full:
                self.events.append(f"while the checks ran, the submission {what}; "
                                   "the kernel was restarted")
            return self._restart(nb, "a storage cap was reached during the checks")
        # After an answered request a live process is enough; after a time-out or a
        # crash, make sure the kernel answers again before sending it more work.
        if self._answered and self.alive():
            return True
        if self._responsive(timeout=5):
            self._answered = True
            return True
        return self._restart(nb, "it stopped answering during the checks")


#: The name of the kernel object before it was the one interface (``leaderboard``,
#: workspaces' scripts).
KernelSession = SandboxedKernel
