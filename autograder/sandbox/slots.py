"""Sandbox slots: which uid a grading kernel runs as, and the processes of that uid.

When the grader runs as root with bubblewrap, every kernel running at once on this
machine runs as an unprivileged uid of its own (:func:`autograder.sandbox.isolation.sandbox_uid`).
That makes two things easy and exact: the process limit counts only that kernel's
processes, and "everything this submission started" is "every process of that uid",
so :func:`kill_strays` can stop a fork bomb or a daemon that escaped the kernel's
process tree. A slot is claimed with :func:`sandbox_slot`; the kernel that holds it
decides its uid once and keeps both in a :class:`Slot`, which :func:`hand_over` and
:func:`kill_strays` read instead of asking again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import tempfile
import time
from pathlib import Path

from .isolation import sandbox_uid

SLOTS = 4000


class Slot(int):
    """A claimed slot's number, with the uid its kernel's processes run as (None: the
    grader's own), decided once by :class:`autograder.sandbox.kernel.SandboxedKernel`."""

    uid: int | None

    def __new__(cls, number: int, uid: int | None):
        slot = super().__new__(cls, number)
        slot.uid = uid
        return slot


def _uid(slot: int) -> int | None:
    """The uid of ``slot``: the one its kernel decided, else the rule for a bare number."""
    return slot.uid if isinstance(slot, Slot) else sandbox_uid(slot)


@contextlib.contextmanager
def sandbox_slot():
    """Claim a sandbox slot no other grading kernel on this machine holds; yield it.

    The slot picks the kernel's uid, and :func:`kill_strays` kills by uid, so two
    kernels must never share one: not two worker processes, and not two threads of one
    (a Dask worker runs several tasks at once). A slot is an exclusive ``flock`` on a
    file under the system's temporary directory, released when the block ends. The
    search starts from the process id, so a worker usually gets the same slot back
    (and keeps using its fork server).
    """
    lock_dir = Path(tempfile.gettempdir()) / "autograder-slots"
    lock_dir.mkdir(exist_ok=True)
    with contextlib.suppress(OSError):
        os.chmod(lock_dir, 0o1777)
    first = os.getpid() % SLOTS
    for i in range(SLOTS):
        slot = (first + i) % SLOTS
        fd = os.open(lock_dir / f"slot-{slot}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        try:
            yield slot
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"all {SLOTS} sandbox slots are in use")


def hand_over(path: Path, slot: int) -> None:
    """Give the sandbox's uid ownership of ``path`` (and what is under it)."""
    uid = _uid(slot)
    if uid is None:
        return
    for item in [path, *path.rglob("*")] if path.is_dir() else [path]:
        os.chown(item, uid, uid, follow_symlinks=False)


def kill_strays(slot: int, everything: bool = False) -> int:
    """Kill the processes the kernel of ``slot`` spawned (a fork bomb, a forgotten server).

    Works where each sandbox has a uid of its own: the kernel is the one process of that
    uid whose parent belongs to someone else (bubblewrap, or the fork server); everything
    else of that uid descends from it. With ``everything``, the kernel goes too, and so
    does a daemon that double-forked away from it: call that once the kernel is finished,
    so nothing of one submission outlives it. Returns how many processes were killed.
    Safe to call from any thread.
    """
    uid = _uid(slot)
    if uid is None:
        return 0
    killed: set[int] = set()
    # A fork bomb keeps forking while we kill, and a killed process lingers (still
    # "running") while the kernel frees its memory: sweep until none is left.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        strays = [
            pid
            for pid, parent in processes_of(uid).items()
            if everything or uid_of(parent) == uid
        ]
        if not strays:
            break
        for pid in strays:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.005)
    return len(killed)


#: The fields of ``/proc/PID/status`` this module reads (they come in its first ten lines).
_STATUS_FIELDS = frozenset({"State", "PPid", "Uid"})


def _status_fields(pid: int) -> dict[str, str]:
    """``State``, ``PPid`` and ``Uid`` from ``/proc/PID/status``: the reading stops once
    they are found (a sweep reads the file of every process on the machine, many times a
    submission, and the rest of each file is some fifty lines)."""
    found = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, tab, value = line.partition(":\t")
            if tab and key in _STATUS_FIELDS:
                found[key] = value
                if len(found) == len(_STATUS_FIELDS):
                    break
    return found


def uid_of(pid: int) -> int | None:
    """Real uid of a process (from its status: /proc/PID is root's once it set a uid)."""
    try:
        return int(_status_fields(pid)["Uid"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def process_running(pid: int) -> bool:
    """Whether a process ``pid`` exists (someone else's included)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, as another user's
        return True
    return True


def processes_of(uid: int) -> dict[int, int]:
    """``{pid: parent pid}`` for every live process whose real uid is ``uid``.

    Zombies are left out: they are dead already, waiting for a parent to reap them."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = _status_fields(int(entry))
            if fields["State"].strip()[:1] in "ZX":
                continue
            if int(fields["Uid"].split()[0]) == uid:
                found[int(entry)] = int(fields["PPid"].split()[0])
        except (OSError, KeyError, ValueError):
            continue
    return found
