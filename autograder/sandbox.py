"""Isolation for student kernels: bubblewrap where installed, resource limits always.

A student's notebook is arbitrary code. Each submission's kernel runs

* inside **bubblewrap** (``bwrap``) when it is installed: no network, a private
  ``/tmp``, its own PID namespace, read-only system and Python paths, only the
  ``toolkit`` package visible from the project, and one writable directory (the
  submission's private working copy). The course workspace, the gradebook, the
  hidden checks, the assignment sources and other students' work are simply not
  in its file system;
* under **resource limits** (:mod:`resource` rlimits, applied by
  :mod:`autograder.limits_launcher` before bubblewrap and the kernel start): address space,
  CPU seconds, processes, file size, open files.

When the grader runs as root, each concurrent sandbox also runs under its own
unprivileged uid, so the process limit cannot be bypassed (root ignores
``RLIMIT_NPROC``) and a fork bomb in one submission cannot starve another.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

#: What ``autograder grade`` prints: which isolation was in force.
ISOLATION_BWRAP = "bubblewrap sandbox + resource limits"
ISOLATION_LIMITS = "resource limits only (bubblewrap not found: install the 'bubblewrap' package)"

# Each concurrent sandbox slot gets its own uid when the grader runs as root.
_SANDBOX_UID_BASE = 61000
SLOTS = 4000


@dataclasses.dataclass(frozen=True)
class Limits:
    """Per-kernel resource limits. Sizes in bytes, times in seconds."""

    address_space: int = 6 * 2**30
    cpu_seconds: int = 900
    processes: int = 256
    file_size: int = 256 * 2**20
    open_files: int = 512


def bwrap_path() -> str | None:
    """Path of the bubblewrap binary, or ``None`` (also when it cannot create namespaces)."""
    if os.environ.get("AUTOGRADER_NO_BWRAP") == "1":
        return None
    path = shutil.which("bwrap")
    if path is None:
        return None
    return path if _bwrap_works(path) else None


_BWRAP_OK: dict[str, bool] = {}


def _bwrap_works(path: str) -> bool:
    """bwrap can be installed yet unusable (no user namespaces in a container)."""
    if path not in _BWRAP_OK:
        import subprocess

        probe = [path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent", "true"]
        try:
            ok = subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        _BWRAP_OK[path] = ok
    return _BWRAP_OK[path]


def isolation_level() -> str:
    return ISOLATION_BWRAP if bwrap_path() else ISOLATION_LIMITS


def _project_paths() -> tuple[Path, Path]:
    """(the toolkit package directory, the directory that contains it)."""
    import toolkit

    pkg = Path(toolkit.__file__).resolve().parent
    return pkg, pkg.parent


def _readonly_roots() -> list[Path]:
    """System and Python directories the kernel needs to read, and nothing else."""
    roots = [Path(p) for p in ("/usr", "/etc", "/opt")]
    roots += [Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    # Site-packages may live outside the prefixes (user installs).
    for entry in sys.path:
        if entry and "site-packages" in entry and Path(entry).is_dir():
            roots.append(Path(entry).resolve())
    unique: list[Path] = []
    for root in sorted(set(roots), key=lambda p: len(p.parts)):
        if root.exists() and not any(root.is_relative_to(u) for u in unique):
            unique.append(root)
    return unique


def visible_paths() -> list[tuple[Path, bool]]:
    """``(path, read_only)`` for what the sandbox shows of the host besides the
    submission's own directory: system and Python paths, the toolkit, the virtualenv."""
    toolkit_pkg, project_root = _project_paths()
    paths = [*_readonly_roots(), toolkit_pkg]
    venv = Path(sys.prefix).resolve()
    if venv.is_relative_to(project_root):
        paths.append(venv)
    return [(path, True) for path in dict.fromkeys(paths)]


def sandbox_uid(slot: int) -> int | None:
    """The unprivileged uid a sandbox slot runs as, or None when the kernel keeps ours."""
    if os.geteuid() == 0 and bwrap_path() is not None:
        return _SANDBOX_UID_BASE + slot
    return None


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
    uid = sandbox_uid(slot)
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
    """
    uid = sandbox_uid(slot)
    if uid is None:
        return 0
    killed: set[int] = set()
    # A fork bomb keeps forking while we kill, and a killed process lingers (still
    # "running") while the kernel frees its memory: sweep until none is left.
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        strays = [
            pid
            for pid, parent in _processes_of(uid).items()
            if everything or _uid_of(parent) == uid
        ]
        if not strays:
            break
        for pid in strays:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
        time.sleep(0.005)
    return len(killed)


def _status_fields(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.split(":\t", 1) for line in f if ":\t" in line)


def _uid_of(pid: int) -> int | None:
    """Real uid of a process (from its status: /proc/PID is root's once it set a uid)."""
    try:
        return int(_status_fields(pid)["Uid"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def _processes_of(uid: int) -> dict[int, int]:
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


def wrap_command(
    cmd: list[str],
    workdir: Path,
    limits: Limits,
    slot: int = 0,
    hidden: list[Path] | tuple[Path, ...] = (),
) -> list[str]:
    """Wrap a kernel command line with the limits launcher and, if available, bubblewrap.

    Args:
        cmd: the kernel's own argv (``python -m ipykernel_launcher -f conn.json``).
        workdir: the submission's private, writable working directory.
        limits: resource limits applied inside the sandbox.
        slot: index of the concurrent sandbox (selects the unprivileged uid).
        hidden: extra host paths to hide even if they sit under a readable root
            (the course workspace, the hidden checks, a solutions directory).
    """
    bwrap = bwrap_path()
    launcher_file = Path(__file__).resolve().parent / "limits_launcher.py"
    limit_args = [
        f"--as={limits.address_space}",
        f"--cpu={limits.cpu_seconds}",
        f"--nproc={limits.processes}",
        f"--fsize={limits.file_size}",
        f"--nofile={limits.open_files}",
    ]
    if bwrap is None:
        return [sys.executable, str(launcher_file), *limit_args, "--", *cmd]

    inner_launcher = "/autograder-limits-launcher.py"
    if os.geteuid() == 0:
        # As root: no user namespace (root inside one still counts as uid 0 for
        # RLIMIT_NPROC). The launcher drops to an unprivileged uid of this slot
        # inside the sandbox, which clears every capability.
        limit_args.append(f"--uid={sandbox_uid(slot)}")
    args = bwrap_arguments(bwrap, writable=workdir, hidden=hidden)
    args += ["--chdir", str(workdir)]
    args += ["--setenv", "HOME", str(workdir), "--setenv", "TMPDIR", "/tmp"]
    args += ["--ro-bind", str(launcher_file), inner_launcher]
    return [*args, "--", sys.executable, inner_launcher, *limit_args, "--", *cmd]


def bwrap_arguments(
    bwrap: str, writable: Path, hidden: list[Path] | tuple[Path, ...] = ()
) -> list[str]:
    """The bubblewrap options shared by a kernel's sandbox and a fork server's.

    Read-only system and Python paths, only the toolkit from the project, a private
    ``/tmp``, no network, and one writable host directory, ``writable``, at its own path.
    """
    toolkit_pkg, project_root = _project_paths()
    if os.geteuid() == 0:
        # No user namespace as root: see wrap_command. Capabilities are kept until
        # the process that runs student code drops to the slot's uid.
        args = [
            bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-net",
            "--unshare-pid",
            "--unshare-ipc",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
    else:
        args = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    made: set[Path] = set()
    for root in _readonly_roots():
        args += _parent_dirs(root, made) + ["--ro-bind", str(root), str(root)]
    # Debian's merged /usr: /bin, /lib, /lib64 and /sbin are links into /usr.
    for link in ("bin", "lib", "lib64", "sbin"):
        host = Path("/") / link
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    # A private /tmp, writable by the sandbox uid like a normal one (sticky, 1777).
    args += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"]
    # From the project only the toolkit (widgets, helpers) and the limits launcher
    # are visible. The project root itself becomes an empty tmpfs, so assignment
    # sources, the hidden checks and any workspace inside the checkout are absent.
    args += _parent_dirs(project_root, made) + ["--perms", "0755", "--tmpfs", str(project_root)]
    args += ["--ro-bind", str(toolkit_pkg), str(toolkit_pkg)]
    venv = Path(sys.prefix).resolve()
    if venv.is_relative_to(project_root):
        args += ["--ro-bind", str(venv), str(venv)]
    for path in hidden:
        path = Path(path).resolve()
        if path.exists() and not writable.resolve().is_relative_to(path):
            args += (
                ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
            )
    args += _parent_dirs(writable.resolve(), made)
    args += ["--bind", str(writable), str(writable)]
    # The grader's pid means nothing in the sandbox's PID namespace; ipykernel
    # would take the mismatch for a dead parent. --die-with-parent covers that.
    args += ["--unsetenv", "JPY_PARENT_PID"]
    return args


def _parent_dirs(path: Path, made: set[Path]) -> list[str]:
    """bwrap arguments creating every missing ancestor of ``path`` as mode 0755.

    bwrap copies the host's mode for the parents it creates, and a parent such as
    ``/root`` (0700) would make a bound interpreter unreachable for the sandbox uid.
    """
    args: list[str] = []
    for parent in reversed(path.parents):
        if parent == Path("/") or parent in made:
            continue
        made.add(parent)
        args += ["--perms", "0755", "--dir", str(parent)]
    return args


def kernel_environment(workdir: Path) -> dict[str, str]:
    """Environment for a grading kernel: no secrets from ours, single-threaded maths."""
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HOME=str(workdir),
        MPLBACKEND="Agg",
        MPLCONFIGDIR=str(workdir / ".mpl"),
        IPYTHONDIR=str(workdir / ".ipython"),
        JUPYTER_PLATFORM_DIRS="1",
        JUPYTER_CONFIG_DIR=str(workdir / ".jupyter"),
        JUPYTER_DATA_DIR=str(workdir / ".jupyter-data"),
        JUPYTER_RUNTIME_DIR=str(workdir / ".jupyter-runtime"),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        MALLOC_ARENA_MAX="2",
        PYTHONDONTWRITEBYTECODE="1",
        PYTHONUNBUFFERED="1",
        TOOLKIT_HEADLESS="1",
        TRITON_INTERPRET=os.environ.get("TRITON_INTERPRET", "1"),
        AUTOGRADER_GRADING="1",
    )
    return env
