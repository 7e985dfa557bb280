"""Where a submission may write, and how much: its working directory, /tmp and /dev/shm.

A notebook may write files; it may not fill the grading machine's disk or memory.
Each submission gets three *areas*, each with caps from its :class:`Limits`:

============================  ==============================================
working directory             ``workdir_bytes`` and ``max_files``
``/tmp``                      ``tmp_bytes`` and ``max_files``
``/dev/shm``                  ``shm_bytes`` and ``max_files``
============================  ==============================================

**As root** (this is how CI and a grading server run) the grader mounts three tmpfs
filesystems of exactly those sizes and inode counts in the submission's scratch folder;
the sandbox shows them at the working directory's path, ``/tmp`` and ``/dev/shm``. Linux
holds every cap: a write past it fails with ``ENOSPC``. They live in memory, so their
sizes are part of the submission's memory budget (:meth:`Limits.address_space`), and
unmounting them gives every byte back.

**As any other user** nothing can be mounted from outside: bubblewrap mounts ``/tmp``
and ``/dev/shm`` itself, sized the same way (Linux still holds the byte caps), and the
working directory is an ordinary folder on disk that a *watchdog* measures while the
kernel runs; without bubblewrap ``/tmp`` and ``/dev/shm`` are the machine's own, and
only ``TMPDIR`` points into a watched folder. :func:`caps_in_force` says which holds.

Either way the kernel polls :meth:`Storage.full_areas` (a few ``statvfs`` calls, or a
walk of the working directory) while a cell runs and after it. A cell that fills an
area is stopped, noted, and the kernel restarts on empty areas
(:mod:`autograder.sandbox.kernel`). Storage calls nothing of the kernel's: what it needs
to know of a running kernel (a process inside bubblewrap) it is given.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import os
import shutil
import tempfile
import threading
from pathlib import Path

from ..limits import COVER_BYTES, Limits, format_size
from .inside import confine
from .slots import process_running

#: Files the grader itself keeps in a working directory (connection file, sockets,
#: IPython's and matplotlib's folders, the check exchange): not counted against the cap.
PLUMBING_FILES = 256
#: An area with less free space than this counts as full.
FULL_SLACK_BYTES = 256 * 1024
#: Where the hidden checks and the kernel exchange requests and replies.
EXCHANGE = ".autograder"


class StorageError(RuntimeError):
    """The submission's files do not fit its working directory, or a mount failed."""


# -- one scratch folder per grading process ------------------------------------------------
_scratch_root: Path | None = None
_scratch_lock = threading.Lock()
_PREFIX = "autograder-worker-"


def scratch_root() -> Path:
    """This process's folder for its submissions' areas (made on first use).

    As root it is a shared mount point, so the areas mounted in it later also appear in
    the fork server's sandbox, which was started earlier. A scratch folder left behind by
    a grader that was killed (its areas still mounted) is cleaned up here first.
    """
    global _scratch_root
    with _scratch_lock:
        if _scratch_root is None or not _scratch_root.is_dir():
            _sweep_stale()
            _scratch_root = Path(tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-"))
            os.chmod(_scratch_root, 0o755)
            if can_mount():
                confine.make_shared_mount(str(_scratch_root))
        return _scratch_root


def new_scratch() -> Path:
    """A fresh folder for one submission, inside :func:`scratch_root`."""
    return Path(tempfile.mkdtemp(prefix="submission-", dir=scratch_root()))


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or below ``root``, deepest first (from /proc/self/mountinfo)."""
    found = []
    with contextlib.suppress(OSError), open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")  # \040 is a space
            if Path(point) == root or Path(point).is_relative_to(root):
                found.append(point)
    return sorted(set(found), key=len, reverse=True)


def _remove(root: Path) -> None:
    for point in _mounts_under(root):
        with contextlib.suppress(OSError):
            confine.unmount(point)
    shutil.rmtree(root, ignore_errors=True)


def _sweep_stale() -> None:
    """Remove the scratch folders of grading processes that no longer run."""
    for path in stale_scratch_folders(_PREFIX):
        _remove(path)


def stale_scratch_folders(prefix: str) -> list[Path]:
    """Folders ``<tmp>/<prefix><pid>-*`` whose process no longer runs: left behind by a
    process that was killed (a signal, a scheduler's time limit) before its clean-up."""
    stale = []
    for path in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
        pid = path.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and not process_running(int(pid)) and path.is_dir():
            stale.append(path)
    return stale


@atexit.register
def _remove_scratch_root() -> None:
    if _scratch_root is not None:
        _remove(_scratch_root)


_CAN_MOUNT: list[bool] = []


def can_mount() -> bool:
    """Whether the grader can mount the areas itself: root, with the right to mount
    (a container may deny it even to root; tried once per process), unless
    ``AUTOGRADER_NO_MOUNTS=1`` asks for what a non-root grader does."""
    if os.environ.get("AUTOGRADER_NO_MOUNTS") == "1":
        return False
    if not _CAN_MOUNT:
        ok = False
        if os.geteuid() == 0:
            probe = tempfile.mkdtemp(prefix="autograder-mount-probe-")
            try:
                confine.mount_tmpfs(probe, 4096, "0700")
                confine.unmount(probe)
                ok = True
            except OSError:
                ok = False
            finally:
                os.rmdir(probe)
        _CAN_MOUNT.append(ok)
    return _CAN_MOUNT[0]


class Storage:
    """The three capped areas of one submission, under ``scratch`` (a fresh folder).

    The areas are the grader's until the kernel that holds them gives the working
    directory to its slot's uid (after making them, filling them and each reset)."""

    def __init__(self, scratch: Path, limits: Limits, sandboxed: bool):
        self.scratch, self.limits = Path(scratch), limits
        self.sandboxed = sandboxed  # bubblewrap in use
        self.mounted = can_mount()
        self.workdir = self.scratch / "work"
        self.tmp = self.scratch / "tmp"
        self.shm = self.scratch / "shm"
        self.exchange_dir = self.workdir / EXCHANGE
        self._source: tuple[Path, str] | None = None
        #: Whether measuring /tmp and /dev/shm needs a process inside the sandbox (they
        #: are bubblewrap's own, without root): :meth:`full_areas` then wants its pid.
        self.reads_inside = self.sandboxed and not self.mounted
        try:
            self._create()
            self._populate()
        except BaseException:
            self.close()
            raise

    # -- life cycle ------------------------------------------------------------------
    def _create(self) -> None:
        for path in (self.workdir, self.tmp, self.shm):
            path.mkdir(parents=True, exist_ok=True)
        if not self.mounted:
            return
        lim = self.limits
        files = lim.max_files + PLUMBING_FILES
        confine.mount_tmpfs(str(self.workdir), lim.workdir_bytes, "0755", inodes=files)
        confine.mount_tmpfs(str(self.tmp), lim.tmp_bytes, "1777", inodes=files)
        confine.mount_tmpfs(str(self.shm), lim.shm_bytes, "1777", inodes=files)

    def fill(self, submission_dir: Path, notebook_name: str) -> None:
        """Copy what the student handed in (not the notebook, which comes sanitised)."""
        self._source = (Path(submission_dir), notebook_name)
        self._populate()

    def _populate(self) -> None:
        try:
            if self._source is not None:
                _copy_submission(*self._source, self.workdir)
        except OSError as exc:
            if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise StorageError(
                    f"the files handed in do not fit the working directory "
                    f"({format_size(self.limits.workdir_bytes)}, "
                    f"{self.limits.max_files:,} files)") from None
            raise
        self.exchange_dir.mkdir(exist_ok=True)

    def reset(self) -> None:
        """Empty every area and copy the submission in again (call with no kernel)."""
        self._release()
        self._create()
        self._populate()

    def close(self) -> None:
        self._release()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def _release(self) -> None:
        for path in (self.workdir, self.tmp, self.shm):
            if self.mounted:
                with contextlib.suppress(OSError):
                    confine.unmount(str(path))
            shutil.rmtree(path, ignore_errors=True)

    # -- what the sandbox is given ---------------------------------------------------------
    def sandbox_tmp(self) -> str | int:
        """For bubblewrap: the folder to show at /tmp, or the size of a tmpfs to mount."""
        return str(self.tmp) if self.mounted else self.limits.tmp_bytes

    def sandbox_shm(self) -> str | int:
        return str(self.shm) if self.mounted else self.limits.shm_bytes

    def tmpdir(self) -> str:
        """``TMPDIR`` for the kernel: its /tmp, or a watched folder (no root, no bwrap)."""
        return "/tmp" if self.mounted or self.sandboxed else str(self.tmp)

    def private_storage(self, keep: list, cover: Path | None) -> dict | None:
        """The arguments of :func:`confine.private_storage`, or None without root."""
        if not self.mounted:
            return None
        return {"tmp": str(self.tmp), "shm": str(self.shm), "keep": keep,
                "cover": str(cover) if cover else None, "cover_bytes": COVER_BYTES}

    # -- how full --------------------------------------------------------------------------
    def full_areas(self, inside_pid: int | None = None) -> list[str]:
        """What was filled, as a student reads it: ``["wrote more than 512 MiB to /tmp"]``.

        ``inside_pid``: a process inside the kernel's sandbox, through whose
        ``/proc/PID/root`` bubblewrap's own /tmp and /dev/shm are read (see
        :attr:`reads_inside`); without it those two are not measured."""
        lim, found = self.limits, []
        for name, path, cap in (("the working directory", self.workdir, lim.workdir_bytes),
                                ("/tmp", self.tmp, lim.tmp_bytes),
                                ("/dev/shm", self.shm, lim.shm_bytes)):
            try:
                use = self._use(name, path, cap, inside_pid)
            except OSError:  # being reset or removed: nothing to measure
                use = None
            if use is None:
                continue
            free_bytes, free_files = use
            if free_files <= 0:
                found.append(f"created more than {lim.max_files:,} files in {name}")
            elif free_bytes < FULL_SLACK_BYTES:
                found.append(f"wrote more than {format_size(cap)} to {name}")
        return found

    def _use(self, name: str, host: Path, cap: int,
             inside_pid: int | None) -> tuple[int, int] | None:
        """(free bytes, free files) of one area, or None where it cannot be measured."""
        if self.mounted:
            return _statvfs_free(host)
        if host == self.workdir or (host == self.tmp and not self.sandboxed):
            used, files = _tree_use(host)  # a watched folder
            return cap - used, self.limits.max_files + PLUMBING_FILES - files
        if inside_pid is None:
            return None
        with contextlib.suppress(OSError):
            return _statvfs_free(Path(f"/proc/{inside_pid}/root{name}"))
        return None


def _statvfs_free(path: Path) -> tuple[int, int]:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize, st.f_ffree


def _tree_use(root: Path) -> tuple[int, int]:
    """(bytes, files and folders) under ``root``, without following links."""
    used = count = 0
    stack = [str(root)]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                count += 1
                try:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    else:
                        used += entry.stat(follow_symlinks=False).st_blocks * 512
                except OSError:
                    continue
    return used, count


def _copy_submission(submission_dir: Path, notebook_name: str, workdir: Path) -> None:
    if not submission_dir.is_dir():
        return
    for item in submission_dir.iterdir():
        if item.name == notebook_name or item.is_symlink():
            continue
        target = workdir / item.name
        if item.is_dir():
            shutil.copytree(item, target, symlinks=False, ignore_dangling_symlinks=True)
        elif item.is_file():
            shutil.copy2(item, target)


def caps_in_force(limits: Limits, sandboxed: bool) -> str:
    """The caps, and what holds each: the second half of the isolation line."""
    mounted = can_mount()
    work = (f"working directory {format_size(limits.workdir_bytes)} and "
            f"{limits.max_files:,} files")
    tmp = f"/tmp {format_size(limits.tmp_bytes)}, /dev/shm {format_size(limits.shm_bytes)}"
    memory = (f"memory {format_size(limits.memory_bytes)} in all (kernel "
              f"{format_size(limits.address_space(mounted))})")
    if mounted:
        return f"{memory}; {tmp}, {work} (sized tmpfs)"
    if sandboxed:
        return f"{memory}; {tmp} (sized tmpfs); {work} (watchdog)"
    return (f"{memory}; {work} and TMPDIR {format_size(limits.tmp_bytes)} (watchdog); "
            "/tmp and /dev/shm are the machine's own (no root, no bubblewrap)")
