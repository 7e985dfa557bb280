"""A fork server ("zygote") that starts a grading kernel in milliseconds instead of seconds.

Starting a Python kernel the ordinary way costs about two seconds of CPU before the
first student line runs: the interpreter, IPython and ipykernel, torch, matplotlib.
For a class of 300 that is ten minutes of pure start-up. A zygote pays it once per
grading worker. It starts inside the worker's sandbox, imports those modules, and then
forks one child per kernel. The child finishes the sandbox on its own, before any
student code runs:

1. a new session, and new mount and System V IPC namespaces;
2. a fresh ``/tmp`` and ``/dev/shm``, and the submission's working directory moved
   into view alone (other working directories of this worker stay out of sight);
3. resource limits (address space, CPU seconds, processes, file size, open files);
4. the slot's unprivileged uid, which clears every capability;
5. ``ipykernel`` with the connection file the grader wrote.

The zygote itself never runs student code, so every child starts from the same
untouched state: nothing one submission does can be seen by the next.

Protocol: one JSON object per line on stdin, one reply per line on stdout.

* first line written: ``{"ready": true, "preloaded": [...]}`` (or ``"ready": false``
  with an ``"error"``) once the imports are done;
* ``{"op": "spawn", "connection_file", "workdir", "cover", "env", "limits", "uid",
  "mounts"}`` -> ``{"pid": N}`` or ``{"error": "..."}``;
* ``{"op": "poll", "pid"}`` -> ``{"exit": None | code}``;
* ``{"op": "signal", "pid", "signum"}`` -> ``{"ok": bool}``;
* ``{"op": "quit"}``.

Run as ``python zygote.py MODULE ...`` (the modules to import up front). Like
:mod:`autograder.limits_launcher` it imports nothing from the project: inside the
sandbox only this file is visible.
"""

import contextlib
import ctypes
import importlib
import json
import os
import resource
import select
import sys
import traceback

# Linux constants (sched.h, sys/mount.h, sys/prctl.h).
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT = 1, 2, 4, 32
MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 4096, 8192, 16384, 1 << 18
MNT_DETACH = 2
PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 4, 38

#: Where the child parks its working directory while it replaces /tmp (see _isolate).
STAGE = "/.autograder-stage"
#: Where the sandbox's own /tmp is kept in view while its contents are re-bound.
OLD_TMP = "/.autograder-old-tmp"

_RLIMITS = {
    "as": resource.RLIMIT_AS,
    "cpu": resource.RLIMIT_CPU,
    "nproc": resource.RLIMIT_NPROC,
    "fsize": resource.RLIMIT_FSIZE,
    "nofile": resource.RLIMIT_NOFILE,
}


# -- the child: from a copy of the zygote to a sandboxed kernel -----------------------
def _libc_call(name, *args):
    libc = ctypes.CDLL(None, use_errno=True)
    if getattr(libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{name}{args!r}: {os.strerror(errno)}")


def _mount(source, target, fstype, flags, data=None):
    encode = lambda s: None if s is None else s.encode()  # noqa: E731
    _libc_call("mount", encode(source), encode(target), encode(fstype),
               ctypes.c_ulong(flags), encode(data))


def _isolate(workdir: str, cover: str, keep: list) -> None:
    """Private /tmp, /dev/shm and IPC; only ``workdir`` visible under ``cover``.

    ``cover`` is the worker's scratch directory, which holds this workdir (and held
    earlier ones). The workdir is bind-mounted aside, a tmpfs goes over /tmp and over
    ``cover``, and the workdir is moved back to its own path, so host paths the grader
    uses (the connection file, the exchange folder) mean the same thing inside.
    ``keep`` lists ``[path, read_only]`` for what the sandbox showed under /tmp and the
    kernel still needs (a project checked out in /tmp: its toolkit and virtualenv);
    they are bound again on the new /tmp.
    """
    _libc_call("unshare", CLONE_NEWNS | CLONE_NEWIPC)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _mount(workdir, STAGE, None, MS_BIND | MS_REC)
    if keep:
        _mount("/tmp", OLD_TMP, None, MS_BIND | MS_REC)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    for path, read_only in keep:
        os.makedirs(path, mode=0o755, exist_ok=True)
        _mount(OLD_TMP + path[len("/tmp"):], path, None, MS_BIND | MS_REC)
        if read_only:
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY)
    if keep:
        _libc_call("umount2", OLD_TMP.encode(), MNT_DETACH)
    if os.path.isdir("/dev/shm"):
        _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
    os.makedirs(cover, mode=0o755, exist_ok=True)
    _mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755")
    os.makedirs(workdir, mode=0o755, exist_ok=True)
    _mount(STAGE, workdir, None, MS_MOVE)


def _apply_limits(limits: dict, uid) -> None:
    for name, value in limits.items():
        value = int(value)
        if name == "nproc" and uid is None:
            # Without a uid of our own the count includes every process of this user.
            value += _process_count(os.getuid())
        resource.setrlimit(_RLIMITS[name], (value, value))


def _process_count(uid: int) -> int:
    count = 0
    for entry in os.listdir("/proc"):
        try:
            count += entry.isdigit() and os.stat(f"/proc/{entry}").st_uid == uid
        except OSError:
            pass
    return count


def _drop_privileges(uid) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    if uid is None or os.geteuid() != 0:
        return
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    # setuid makes a process undumpable, which hands /proc/PID to root; an exec
    # would have reset it. Keep the kernel an ordinary process of its uid.
    libc.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)


def _become_kernel(request: dict, report_fd: int, set_by_imports: dict) -> None:
    """Runs in the forked child and never returns."""
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        # The zygote's pipes must not reach student code: it could answer for us.
        for fd in [int(name) for name in os.listdir("/proc/self/fd")]:
            if fd > 2 and fd != report_fd:
                with contextlib.suppress(OSError):
                    os.close(fd)
        if request.get("mounts"):
            _isolate(request["workdir"], request["cover"], request.get("keep", []))
        os.chdir(request["workdir"])
        os.environ.clear()
        # What the preloaded modules set when imported, as they would have in the kernel.
        os.environ.update(set_by_imports)
        os.environ.update(request["env"])
        _apply_limits(request["limits"], request.get("uid"))
        _drop_privileges(request.get("uid"))
        # As `python -m ipykernel_launcher` would: IPython puts '' back on sys.path.
        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [p for p in sys.path if p and os.path.abspath(p) != here]
        sys.argv = ["ipykernel_launcher", "-f", request["connection_file"]]
        if "numpy" in sys.modules:  # `random` reseeds itself after a fork; numpy does not
            sys.modules["numpy"].random.seed()
    except BaseException:
        os.write(report_fd, traceback.format_exc().encode()[-4000:])
        os._exit(70)
    os.close(report_fd)  # end of file on the pipe: the sandbox is in place
    code = 0
    try:
        from ipykernel.kernelapp import IPKernelApp

        IPKernelApp.launch_instance(argv=sys.argv[1:])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        code = 1
    os._exit(code)


# -- the zygote --------------------------------------------------------------------
class Zygote:
    def __init__(self, set_by_imports: dict):
        self.children: dict[int, int | None] = {}  # pid -> exit code once reaped
        self.set_by_imports = set_by_imports

    def spawn(self, request: dict) -> dict:
        read_end, write_end = os.pipe()
        sys.stdout.flush()
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            _become_kernel(request, write_end, self.set_by_imports)
        os.close(write_end)
        self.children[pid] = None
        message = b""
        try:
            while True:
                ready, _, _ = select.select([read_end], [], [], 30)
                if not ready:
                    message = b"the kernel's sandbox set-up did not finish within 30 s"
                    break
                chunk = os.read(read_end, 4096)
                if not chunk:
                    break
                message += chunk
        finally:
            os.close(read_end)
        if message:
            self.signal(pid, 9)
            return {"error": message.decode(errors="replace")}
        return {"pid": pid}

    def reap(self) -> None:
        """Collect every child that has exited (no zombies, exit codes kept)."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.children[pid] = os.waitstatus_to_exitcode(status)

    def poll(self, pid: int):
        self.reap()
        return self.children.get(pid, -1)

    def signal(self, pid: int, signum: int) -> bool:
        if self.poll(pid) is not None:
            return False
        for send in (os.killpg, os.kill):  # the kernel leads its own process group
            try:
                send(pid, signum)
            except OSError:
                pass
        return True

    def handle(self, request: dict) -> dict:
        self.reap()
        op = request.get("op")
        if op == "spawn":
            return self.spawn(request)
        if op == "poll":
            return {"exit": self.poll(int(request["pid"]))}
        if op == "signal":
            return {"ok": self.signal(int(request["pid"]), int(request["signum"]))}
        return {"error": f"unknown op {op!r}"}


def _preload(modules: list[str]) -> list[str]:
    loaded = []
    for name in modules:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception:
            pass  # the kernel imports it itself if it needs it
    return loaded


def main(modules: list[str]) -> None:
    os.umask(0o022)
    out = sys.stdout

    def reply(message: dict) -> None:
        out.write(json.dumps(message) + "\n")
        out.flush()

    environment_before = dict(os.environ)
    preloaded = _preload(modules)
    set_by_imports = {
        k: v for k, v in os.environ.items() if environment_before.get(k) != v
    }
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        # Forking a process with other threads can copy a lock held by one of them.
        reply({"ready": False, "error": f"{threads} threads after the imports; need one"})
        return
    reply({"ready": True, "preloaded": preloaded})
    zygote = Zygote(set_by_imports)
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("op") == "quit":
            break
        try:
            reply(zygote.handle(request))
        except Exception as exc:
            reply({"error": f"{type(exc).__name__}: {exc}"})
    for pid in list(zygote.children):
        zygote.signal(pid, 9)


if __name__ == "__main__":
    main(sys.argv[1:])
