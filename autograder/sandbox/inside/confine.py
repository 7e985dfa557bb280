"""The last steps before student code runs: private storage, resource limits, a uid of its own.

A grading kernel starts in one of two ways, and both finish the same way, with this
module, inside the sandbox:

* from scratch: :mod:`autograder.sandbox.inside.limits_launcher` runs it, then ``exec``s the kernel;
* forked from a preloaded template: :mod:`autograder.sandbox.inside.zygote` runs it in each child.

In those steps, in order:

1. :func:`private_storage` (root only) gives the process its own mount and System V
   IPC namespaces and shows, at ``/tmp`` and ``/dev/shm``, the two size-limited tmpfs
   mounts the grader made for this submission (:mod:`autograder.sandbox.storage`). Folders of
   the host that must stay visible although they lie under the old ``/tmp`` (the
   working directory, a project checked out in ``/tmp``) are bound again on top, and an
   optional *cover* (a small read-only tmpfs) hides the folder that holds the other
   submissions' working copies;
2. :func:`apply_limits` sets the rlimits (address space, CPU seconds, processes, file
   size, open files);
3. :func:`drop_privileges` switches to the sandbox slot's unprivileged uid, which clears
   every capability, and forbids gaining any back.

Inside the sandbox the project's other files are not visible, so this file imports only
the standard library, and the sandbox shows it, the launcher and the zygote together in
one read-only folder, :data:`INSIDE_DIR`, from which the two import it.
"""

import ctypes
import os
import resource

#: Where the sandbox shows this file, limits_launcher.py, zygote.py and channel.py (read-only).
INSIDE_DIR = "/.autograder"
#: The files of the project a sandbox shows in INSIDE_DIR.
INSIDE_FILES = ("confine.py", "limits_launcher.py", "zygote.py", "channel.py")

RLIMITS = {
    "as": resource.RLIMIT_AS,
    "data": resource.RLIMIT_DATA,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
}

# Linux constants (sched.h, sys/mount.h, sys/prctl.h).
CLONE_NEWNS, CLONE_NEWIPC = 0x00020000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_REC, MS_PRIVATE, MS_SHARED = 4096, 16384, 1 << 18, 1 << 20
MNT_DETACH = 2
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38


def _libc_call(name: str, *args) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}{args!r}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None) -> None:
    def encode(s):
        return None if s is None else s.encode()

    _libc_call("mount", encode(source), encode(target), encode(fstype),
               ctypes.c_ulong(flags), encode(data))


def mount_tmpfs(target: str, size: int, mode: str, inodes: int | None = None) -> None:
    """A tmpfs at ``target`` that holds at most ``size`` bytes (and ``inodes`` files)."""
    options = f"mode={mode},size={size}" + (f",nr_inodes={inodes}" if inodes else "")
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, options)


def make_shared_mount(path: str) -> None:
    """Make ``path`` a mount point whose later sub-mounts reach every copy of it (the
    fork server's sandbox holds one): a bind mount onto itself, marked shared."""
    _mount(path, path, None, MS_BIND)
    _mount(None, path, None, MS_SHARED)


def unmount(target: str) -> None:
    """Detach the mount at ``target`` (it is freed once no process uses it)."""
    _libc_call("umount2", target.encode(), MNT_DETACH)


def _bind(source: str, target: str, read_only: bool = False) -> None:
    os.makedirs(target, mode=0o755, exist_ok=True)
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY)


# -- 1. storage -------------------------------------------------------------------------
def private_storage(tmp: str, shm: str, keep: list, cover: str | None = None,
                    cover_bytes: int = 2**20) -> None:
    """Private ``/tmp`` and ``/dev/shm`` (bound from ``tmp`` and ``shm``), private IPC.

    ``keep`` lists ``[path, read_only]`` of host folders that must stay visible at their
    own path although ``/tmp`` or ``cover`` is laid over them. Every source is opened
    before anything is covered and bound from its descriptor, so the order of the
    mounts cannot hide a source from a later step.
    """
    _libc_call("unshare", CLONE_NEWNS | CLONE_NEWIPC)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we mount leaks to the host
    sources = {}
    for path in [tmp, shm, *(p for p, _ in keep)]:
        sources[path] = os.open(path, os.O_PATH | os.O_DIRECTORY)
    try:
        if cover:
            # A small tmpfs with just the mount points of what stays visible, read-only.
            mount_tmpfs(cover, cover_bytes, "0755")
            for path, _ in keep:
                if os.path.normpath(path).startswith(os.path.normpath(cover) + os.sep):
                    os.makedirs(path, mode=0o755, exist_ok=True)
            _mount(None, cover, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY,
                   f"size={cover_bytes}")
        _bind(_fd_path(sources[tmp]), "/tmp")
        if os.path.isdir("/dev/shm"):
            _bind(_fd_path(sources[shm]), "/dev/shm")
        for path, read_only in keep:
            _bind(_fd_path(sources[path]), path, read_only)
    finally:
        for fd in sources.values():
            os.close(fd)


def _fd_path(fd: int) -> str:
    return f"/proc/self/fd/{fd}"


# -- 2. limits ----------------------------------------------------------------------------
def apply_limits(limits: dict, uid=None) -> None:
    """``setrlimit`` for each ``{name: value}`` of :data:`RLIMITS` (soft = hard)."""
    for name, value in limits.items():
        value = int(value)
        if name == "nproc" and uid is None:
            # Without a uid of our own the count includes every process of this user:
            # leave room for the ones already running.
            value += process_count(os.getuid())
        resource.setrlimit(RLIMITS[name], (value, value))


def process_count(uid: int) -> int:
    """Live processes of ``uid`` (what RLIMIT_NPROC counts)."""
    count = 0
    try:
        entries = os.listdir("/proc")
    except OSError:
        return 1024
    for entry in entries:
        try:
            count += entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid
        except OSError:
            pass
    return count


# -- 3. privileges --------------------------------------------------------------------------
def drop_privileges(uid=None) -> None:
    """No new privileges ever; as root with a slot ``uid``, become that uid."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if uid is None or os.geteuid() != 0:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    # setuid makes a process undumpable, which hands /proc/PID to root; an exec would
    # reset it, a forked kernel does not exec. Keep it an ordinary process of its uid.
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
