"""A fork server ("zygote") that starts a grading kernel in milliseconds instead of seconds.

Starting a Python kernel the ordinary way costs about two seconds of CPU before the
first student line runs: the interpreter, IPython and ipykernel, torch, matplotlib.
For a class of 300 that is ten minutes of pure start-up. A zygote pays it once per
grading worker. It starts inside the worker's sandbox, imports those modules, and then
forks one child per kernel. The child finishes the sandbox on its own, before any
student code runs:

1. a new session;
2. :mod:`confine`: as root, new mount and System V IPC namespaces with the submission's
   own size-limited ``/tmp`` and ``/dev/shm``, the working directory bound back into view
   alone (other working directories of this worker stay out of sight); then resource
   limits (address space, CPU seconds, processes, file size, open files) and the slot's
   unprivileged uid, which clears every capability;
3. ``ipykernel`` with the connection file the grader wrote.

The zygote itself never runs student code, so every child starts from the same
untouched state: nothing one submission does can be seen by the next.

Protocol: one JSON message per frame (:mod:`channel`: a 4-byte length, then the JSON) on
stdin, one reply per frame on stdout.

* first line written: ``{"ready": true, "preloaded": [...]}`` (or ``"ready": false``
  with an ``"error"``) once the imports are done;
* ``{"op": "spawn", "connection_file", "workdir", "env", "limits", "uid", "storage"}``
  -> ``{"pid": N}`` or ``{"error": "..."}`` (``storage``: the arguments of
  :func:`confine.private_storage`, or null without root);
* ``{"op": "poll", "pid"}`` -> ``{"exit": None | code}``;
* ``{"op": "signal", "pid", "signum"}`` -> ``{"ok": bool}``;
* ``{"op": "quit"}``.

Run as ``python zygote.py MODULE ...`` (the modules to import up front). Like
:mod:`autograder.sandbox.inside.limits_launcher` it imports only the standard library,
:mod:`confine` and :mod:`channel`, which lie next to it (inside the sandbox, in
``confine.INSIDE_DIR``).
"""

import contextlib
import importlib
import os
import select
import sys
import traceback

import channel
import confine


# -- the child: from a copy of the zygote to a sandboxed kernel -----------------------
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
        if request.get("storage"):
            confine.private_storage(**request["storage"])
        os.chdir(request["workdir"])
        os.environ.clear()
        # What the preloaded modules set when imported, as they would have in the kernel.
        os.environ.update(set_by_imports)
        os.environ.update(request["env"])
        confine.apply_limits(request["limits"], request.get("uid"))
        confine.drop_privileges(request.get("uid"))
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

    def reply(message: dict) -> None:
        sys.stdout.flush()  # whatever an import printed goes first, outside any frame
        channel.send(1, message)

    environment_before = dict(os.environ)
    preloaded = _preload(modules)
    set_by_imports = {
        k: v for k, v in os.environ.items() if environment_before.get(k) != v
    }
    # torch's compiler stack names (and makes) a cache folder for the user who imports it,
    # here the zygote's. A kernel makes its own the first time it compiles, as a kernel
    # started from scratch would.
    inductor_cache = set_by_imports.pop("TORCHINDUCTOR_CACHE_DIR", None)
    if inductor_cache:
        with contextlib.suppress(OSError):
            os.rmdir(inductor_cache)  # only if still empty
    threads = len(os.listdir("/proc/self/task"))
    if threads != 1:
        # Forking a process with other threads can copy a lock held by one of them.
        reply({"ready": False, "error": f"{threads} threads after the imports; need one"})
        return
    reply({"ready": True, "preloaded": preloaded})
    zygote = Zygote(set_by_imports)
    while True:
        try:
            request = channel.receive(0)
        except channel.ChannelClosed:
            break
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
    # Nothing is left to clean up (the children are killed above), and tearing down an
    # interpreter that holds torch costs the grader about a second per worker at exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
