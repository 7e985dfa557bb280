"""Isolation for student kernels: bubblewrap where installed, resource limits always.

A student's notebook is arbitrary code. Each submission's kernel runs

* inside **bubblewrap** (``bwrap``) when it is installed: no network, its own PID
  namespace, read-only system and Python paths, only the ``toolkit`` package visible
  from the project, a size-limited private ``/tmp`` and ``/dev/shm``, and one writable
  directory (the submission's working copy, itself capped: :mod:`autograder.sandbox.storage`).
  Everything else is read-only, and every tmpfs that hides a host folder is tiny and
  read-only too. The course workspace, the gradebook, the hidden checks, the assignment
  sources and other students' work are simply not in its file system;
* under **resource limits** (rlimits, applied by :mod:`autograder.sandbox.inside.confine` inside the
  sandbox just before the kernel starts): address space, CPU seconds, processes, file
  size, open files.

When the grader runs as root, each concurrent sandbox also runs under its own
unprivileged uid (:mod:`autograder.sandbox.slots`), so the process limit cannot be bypassed
(root ignores ``RLIMIT_NPROC``) and a fork bomb in one submission cannot starve another.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from ..limits import COVER_BYTES
from . import gpu
from .inside import confine

#: What ``autograder grade`` prints: which isolation was in force.
ISOLATION_BWRAP = "bubblewrap sandbox + resource limits"
ISOLATION_LIMITS = "resource limits only (bubblewrap not found: install the 'bubblewrap' package)"

# Each concurrent sandbox slot gets its own uid when the grader runs as root.
SANDBOX_UID_BASE = 61000
_HERE = Path(__file__).resolve().parent / "inside"


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
    """bwrap can be installed yet unusable (no user namespaces in a container, or a
    version too old to size a tmpfs)."""
    if path not in _BWRAP_OK:
        # --size (bubblewrap 0.7+) sizes every tmpfs the sandbox mounts.
        probe = [path, "--ro-bind", "/", "/", "--unshare-all", "--die-with-parent",
                 "--size", "65536", "--tmpfs", "/tmp", "true"]
        try:
            ok = subprocess.run(probe, capture_output=True, timeout=20).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        _BWRAP_OK[path] = ok
    return _BWRAP_OK[path]


def isolation_level() -> str:
    return ISOLATION_BWRAP if bwrap_path() else ISOLATION_LIMITS


def sandbox_uid(slot: int) -> int | None:
    """The unprivileged uid a sandbox slot runs as, or None when the kernel keeps ours."""
    if os.geteuid() == 0 and bwrap_path() is not None:
        return SANDBOX_UID_BASE + slot
    return None


def _project_paths() -> tuple[Path, Path]:
    """(the toolkit package directory, the directory that contains it)."""
    import toolkit

    pkg = Path(toolkit.__file__).resolve().parent
    return pkg, pkg.parent


def _rebound(project_root: Path, toolkit_pkg: Path) -> list[Path]:
    """What the sandbox binds back inside the covered project root."""
    venv = Path(sys.prefix).resolve()
    return [toolkit_pkg, *([venv] if venv.is_relative_to(project_root) else [])]


def hidden_from_kernels(course, spec=None) -> tuple[Path, ...]:
    """What no grading kernel may see of a course (a :class:`autograder.workspace.course.Course`):
    its workspace, its assignments and, for ``spec``, the hidden checks. Grading, a
    student's check and the warm-up before it all hide the same, so they share a zygote."""
    return (course.root, course.assignments_dir, *([spec.checks_dir()] if spec else []))


def paths_to_cover(hidden, writable: Path) -> tuple[Path, ...]:
    """Of the ``hidden`` paths, those the sandbox must cover itself, sorted.

    Left out: a path that does not exist or holds ``writable`` (the sandbox's one
    writable folder must stay reachable), a path inside the project root (covered whole,
    see :func:`bwrap_arguments`) that is not bound back, and a path inside another
    covered folder. So every built-in assignment's checks, and a workspace inside the
    checkout, come to the same layout: one fork server serves every assignment of a
    course (see :func:`autograder.sandbox.forkserver.get`).
    """
    toolkit_pkg, project_root = _project_paths()
    rebound = _rebound(project_root, toolkit_pkg)
    writable = Path(writable).resolve()
    paths = sorted({
        p for p in (Path(h).resolve() for h in hidden)
        if p.exists() and not writable.is_relative_to(p)
        and not (p.is_relative_to(project_root) and not any(p.is_relative_to(r) for r in rebound))
    })
    folders = [p for p in paths if p.is_dir()]
    return tuple(p for p in paths if not any(p != f and p.is_relative_to(f) for f in folders))


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


def kept_under_tmp(workdir: Path | None = None) -> list[list]:
    """``[path, read_only]`` of what must stay visible when ``/tmp`` is replaced: the
    working directory and whatever the sandbox shows that lives under ``/tmp``."""
    keep = [[str(p), ro] for p, ro in visible_paths() if p.is_relative_to("/tmp")]
    if workdir is not None:
        keep.append([str(Path(workdir).resolve()), False])
    return keep


def inside_files() -> list[str]:
    """bwrap arguments that show the files of :data:`confine.INSIDE_FILES` (confine.py,
    limits_launcher.py, zygote.py, channel.py), read-only,
    in :data:`confine.INSIDE_DIR`: the only files of the autograder a sandbox holds."""
    args = []
    for name in confine.INSIDE_FILES:
        args += ["--ro-bind", str(_HERE / name), f"{confine.INSIDE_DIR}/{name}"]
    return args


def wrap_command(cmd: list[str], workdir: Path, settings: dict,
                 hidden: list[Path] | tuple[Path, ...] = (), *, bwrap: str | None,
                 tmp: str | int = COVER_BYTES, shm: str | int | None = None,
                 uses_gpu: bool = False) -> list[str]:
    """Wrap a kernel command line with the limits launcher and, with ``bwrap``, bubblewrap.

    Args:
        cmd: the kernel's own argv (``python -m ipykernel_launcher -f conn.json``).
        workdir: the submission's private, writable working directory.
        settings: what :mod:`.inside.limits_launcher` applies: ``limits``, ``uid``,
            ``storage`` (see there).
        hidden: extra host paths to hide even if they sit under a readable root
            (the course workspace, the hidden checks, a solutions directory).
        tmp, shm: what the sandbox shows at ``/tmp`` and ``/dev/shm``: the host folder of
            the submission's own area, or the size of a tmpfs for bubblewrap to mount
            (:meth:`autograder.sandbox.storage.Storage.sandbox_tmp`).
        bwrap: the bubblewrap binary (:func:`bwrap_path`, asked once by the kernel), or
            None for resource limits only.
        uses_gpu: show the GPU to the kernel (:mod:`autograder.sandbox.gpu`).
    """
    settings = {**settings, "workdir": str(workdir)}
    if bwrap is None:
        launcher = str(_HERE / "limits_launcher.py")
        return [sys.executable, launcher, json.dumps(settings), "--", *cmd]
    # bubblewrap mounts /tmp and /dev/shm itself: nothing left for the launcher.
    settings["storage"] = None
    args = bwrap_arguments(bwrap, writable=workdir, hidden=hidden,
                           tmp=tmp, shm=shm, uses_gpu=uses_gpu)
    args += ["--chdir", str(workdir)]
    args += ["--setenv", "HOME", str(workdir), "--setenv", "TMPDIR", "/tmp"]
    launcher = f"{confine.INSIDE_DIR}/limits_launcher.py"
    return [*args, "--", sys.executable, launcher, json.dumps(settings), "--", *cmd]


def bwrap_arguments(bwrap: str, writable: Path, hidden=(), tmp: str | int = COVER_BYTES,
                    shm: str | int | None = None, uses_gpu: bool = False) -> list[str]:
    """The bubblewrap options shared by a kernel's sandbox and a fork server's.

    Read-only system and Python paths, only the toolkit from the project, no network,
    one writable host directory, ``writable``, at its own path, and ``/tmp`` and
    ``/dev/shm``: a host folder to bind there (a string), or a fresh tmpfs of that many
    bytes (an int), or (``shm`` None) nothing yet. Everything else is read-only.
    ``uses_gpu`` adds the NVIDIA device files and driver libraries.
    """
    toolkit_pkg, project_root = _project_paths()
    if os.geteuid() == 0:
        # As root: no user namespace (root inside one still counts as uid 0 for
        # RLIMIT_NPROC). Capabilities are kept until the process that runs student
        # code drops to the slot's uid (autograder.sandbox.inside.confine).
        args = [bwrap, "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid",
                "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    else:
        args = [bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--cap-drop", "ALL"]
    roots = _readonly_roots()
    made: set[Path] = set()
    for root in roots:
        args += _parent_dirs(root, made) + ["--ro-bind", str(root), str(root)]
    # Debian's merged /usr: /bin, /lib, /lib64 and /sbin are links into /usr.
    for link in ("bin", "lib", "lib64", "sbin"):
        host = Path("/") / link
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), str(host)]
        elif host.is_dir():
            args += ["--ro-bind", str(host), str(host)]
    args += ["--dev", "/dev", "--proc", "/proc"]
    args += _scratch_mount(tmp, "/tmp")
    scratch = [Path("/tmp")]
    if shm is not None:
        args += _scratch_mount(shm, "/dev/shm")
        scratch.append(Path("/dev/shm"))
    # A Python that lives under /tmp (a virtualenv made there, say) was just hidden by
    # the fresh /tmp: show it again, read-only, inside it.
    for root in roots:
        if any(root.is_relative_to(s) for s in scratch):
            args += (_parent_dirs(root, set(scratch))
                     + ["--ro-bind", str(root), str(root)])
    if uses_gpu:
        args += gpu.bwrap_arguments(roots)
    # From the project only the toolkit (widgets, helpers) is visible. The project root
    # itself becomes an empty tmpfs, so assignment sources, the hidden checks and any
    # workspace inside the checkout are absent.
    covers = [project_root]
    args += _parent_dirs(project_root, made) + _cover(project_root)
    for path in _rebound(project_root, toolkit_pkg):
        args += ["--ro-bind", str(path), str(path)]
    for path in paths_to_cover(hidden, writable):
        if path.is_dir():
            args += _cover(path)
            covers.append(path)
        else:
            args += ["--ro-bind", "/dev/null", str(path)]
    args += _parent_dirs(writable.resolve(), made)
    args += ["--bind", str(writable), str(writable)]
    args += inside_files()
    # Nothing else is writable: the covers, and bwrap's own root and /dev, are tmpfs
    # mounts that the sandbox user owns when the grader is not root.
    for path in [*covers, Path("/dev"), Path("/")]:
        args += ["--remount-ro", str(path)]
    # The grader's pid means nothing in the sandbox's PID namespace; ipykernel
    # would take the mismatch for a dead parent. --die-with-parent covers that.
    args += ["--unsetenv", "JPY_PARENT_PID"]
    return args


def _scratch_mount(source: str | int, target: str) -> list[str]:
    """A writable ``/tmp`` or ``/dev/shm``: a host folder bound, or a sized tmpfs."""
    if isinstance(source, int):
        return ["--size", str(source), "--perms", "1777", "--tmpfs", target]
    return ["--bind", str(source), target]


def _cover(path: Path) -> list[str]:
    """An empty tmpfs over ``path``, small (it only holds mount points)."""
    return ["--size", str(COVER_BYTES), "--perms", "0755", "--tmpfs", str(path)]


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


#: The user name a grading kernel's environment gives (USER, LOGNAME).
SANDBOX_USER = "student"


def kernel_environment(workdir: Path, tmpdir: str = "/tmp",
                       uses_gpu: bool = False) -> dict[str, str]:
    """Environment for a grading kernel: no secrets from ours, single-threaded maths;
    with ``uses_gpu``, compiled Triton and the variables that locate the GPU."""
    keep = ("PATH", "LANG", "LC_ALL", "TERM", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(
        HOME=str(workdir),
        # The kernel's uid has no passwd entry: without these, getpass.getuser() raises
        # KeyError, and so does every library that names a cache folder after the user
        # (PyTorch 2.11's compiler cache, which checks of 04 and 07 reach, say).
        USER=SANDBOX_USER,
        LOGNAME=SANDBOX_USER,
        TMPDIR=tmpdir,
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
    if uses_gpu:
        env.update(gpu.kernel_environment())
    return env
