""""Check my work" on a server shared by many students (JupyterHub and the like).

On a laptop the student's Jupyter server runs the checks itself, in worker processes
(:mod:`.service`). On a shared machine that cannot be safe: each student's Jupyter
server runs as the student's own Unix user, and so does every kernel and terminal the
student opens. Whatever that server can read to grade (the hidden checks, the
gradebook, the assignment sources with their solutions) the student can read too.

So the checks move into a service of their own, ``autograder serve-checks``, run by a
user the students are not (say ``autograder``), which owns the course workspace and
the checkout and keeps them private (``chmod 700``). It listens on a Unix socket that
everyone may connect to. A student's Jupyter server, told where the socket is
(``c.CheckService.socket``), sends it the notebook and the files beside it and
shows what comes back: the same view a local check gives, already cut to the
instructor's visibility setting.

Who asks is never taken from the request. The kernel tells the service which Unix user
is at the other end of the socket (``SO_PEERCRED``), a name no student can forge; the
one-check-at-a-time rule, the cool-down and the saved results are keyed by it.

Two halves, top to bottom: the student's side (pack, send, read the answer), then the
service's side (unpack, name the caller, serve).
"""

from __future__ import annotations

import asyncio
import datetime
import http.client
import io
import json
import os
import pwd
import socket
import struct
import tarfile
import tempfile
import urllib.parse
from pathlib import Path, PurePosixPath

from traitlets import Float, Unicode
from traitlets.config import LoggingConfigurable

from . import CheckRefused
from .handin import MAX_SIBLING_BYTES, notebook_under, stage_submission

#: The largest hand-in the service reads: the notebook's limit, the files beside it, slack.
MAX_UPLOAD_BYTES = (20 + 1) * 2**20 + MAX_SIBLING_BYTES
NOT_RUNNING = ("the course's check service is not answering on {socket}: tell your "
               "instructor (the notebook itself is fine and saved)")

NO_SERVICE = ("no check service is set for this Jupyter server (c.CheckService.socket in "
              "jupyter_server_config.py): tell your instructor")


# -- the student's side -------------------------------------------------------------------
def pack(notebook: Path) -> tuple[bytes, list[str]]:
    """The notebook under its own name and the files beside it, as an uncompressed tar
    (the same files a local check copies, :func:`.handin.stage_submission`), and the notes
    on what was left out."""
    with tempfile.TemporaryDirectory(prefix="check-my-work-") as tmp:
        notes = stage_submission(notebook, Path(tmp), notebook.stem)
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for item in sorted(Path(tmp).iterdir()):
                tar.add(item, arcname=item.name)
    if buffer.tell() > MAX_UPLOAD_BYTES:  # the service would drop the connection
        raise CheckRefused(413, f"{notebook.name} and the files beside it take "
                                f"{buffer.tell() / 2**20:.0f} MiB, over the "
                                f"{MAX_UPLOAD_BYTES // 2**20} MiB a check takes")
    return buffer.getvalue(), notes


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a Unix socket (the standard library speaks it over TCP only)."""

    def __init__(self, socket_path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.socket_path = socket_path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


def request(socket_path: str, method: str, url: str, body: bytes | None = None,
            timeout: float = 3600.0) -> dict:
    """One request to the service; its JSON answer, or :class:`CheckRefused` with the
    service's own status and message (or 503/504 when it does not answer)."""
    if not socket_path:
        raise CheckRefused(503, NO_SERVICE)
    connection = _UnixHTTPConnection(socket_path, timeout)
    try:
        connection.request(method, url, body=body,
                           headers={"Content-Type": "application/x-tar"} if body else {})
        response = connection.getresponse()
        status, data = response.status, response.read()
    except TimeoutError:
        raise CheckRefused(504, f"the check service gave no answer within {timeout:.0f} s; "
                                "try again, and tell your instructor if it happens again"
                           ) from None
    except OSError:  # no socket, nobody listening, no permission, connection dropped
        raise CheckRefused(503, NOT_RUNNING.format(socket=socket_path)) from None
    finally:
        connection.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise CheckRefused(502, f"the check service on {socket_path} answered {status} "
                                "without a result: tell your instructor")
    if status >= 400:
        raise CheckRefused(status, str(answer.get("message") or f"refused ({status})"))
    return answer


class CheckService(LoggingConfigurable):
    """The student's Jupyter server's side: the panel's two requests, answered by the
    service (``c.CheckService.socket = "/run/autograder/check.sock"`` in
    ``jupyter_server_config.py``). Nothing here reads the course: there is none to read."""

    socket = Unicode("", config=True,
                     help="The Unix socket of `autograder serve-checks`. Set, this server "
                          "sends every check there; empty, it runs checks itself.")
    timeout = Float(4 * 3600.0, config=True,
                    help="Seconds to wait for a check's answer (the service applies the "
                         "assignment's own limit first).")

    def __init__(self, root_dir: str, **kwargs):
        super().__init__(**kwargs)
        self.root_dir = Path(root_dir).resolve()

    def describe(self) -> str:
        return (f"checks sent to the course's check service on {self.socket}" if self.socket
                else "no check service set (c.CheckService.socket): checks are refused")

    async def check(self, user: str, raw_path) -> dict:
        """Check a saved notebook (``raw_path`` under this server's root) on the service;
        the answer is the view a local check gives. ``user`` is not sent: the service
        asks the kernel who is calling."""
        notebook = notebook_under(self.root_dir, raw_path)
        rel = notebook.relative_to(self.root_dir).as_posix()
        data, notes = await asyncio.to_thread(pack, notebook)
        url = "/check?" + urllib.parse.urlencode({"path": rel})
        view = await asyncio.to_thread(request, self.socket, "POST", url, data, self.timeout)
        view["notes"] = [*notes, *view.get("notes", [])]
        return view

    async def course_view(self, user: str) -> dict:
        """The Course panel from the service, with its links made this server's: a
        notebook is where nbgrader's fetch puts it (``<assignment>/<notebook>.ipynb``) or
        where the service has it, if this server's root holds that too; else no link."""
        try:
            view = await asyncio.to_thread(request, self.socket, "GET", "/course", None, 60.0)
        except CheckRefused as exc:
            return {"title": "Course", "problem": str(exc), "readme": None, "lectures": [],
                    "assignments": []}
        return local_paths(view, self.root_dir)


def local_paths(view: dict, root_dir: Path) -> dict:
    """Keep only the links of ``view`` that open a file under ``root_dir``."""
    def here(path) -> str | None:
        if not isinstance(path, str) or ".." in PurePosixPath(path).parts:
            return None
        return path if (root_dir / path).is_file() else None

    view["readme"] = here(view.get("readme"))
    for lecture in view.get("lectures", []):
        lecture["path"] = here(lecture.get("path"))
    for assignment in view.get("assignments", []):
        for notebook in assignment.get("notebooks", []):
            fetched = f"{assignment.get('name')}/{notebook.get('id')}.ipynb"
            notebook["path"] = here(fetched) or here(notebook.get("path"))
    return view


# -- the service's side -------------------------------------------------------------------
def unpack(data: bytes, target: Path) -> None:
    """Write a packed hand-in into ``target``: plain files at the top level only, within
    :data:`MAX_UPLOAD_BYTES`; anything else is refused (400) before a byte is written."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
            total = sum(m.size for m in members)
            for member in members:
                name = member.name
                if (not member.isfile() or "/" in name or name in ("", ".", "..")
                        or name.startswith(".")):
                    raise CheckRefused(400, f"the hand-in holds {name!r}, which is not a "
                                            "plain file beside the notebook")
            if total > MAX_UPLOAD_BYTES:
                raise CheckRefused(413, f"the hand-in is {total / 2**20:.0f} MiB, over the "
                                        f"{MAX_UPLOAD_BYTES // 2**20} MiB a check takes")
            target.mkdir(parents=True, exist_ok=True)
            for member in members:
                with tar.extractfile(member) as source, open(target / member.name, "wb") as out:
                    out.write(source.read())
    except tarfile.TarError as exc:
        raise CheckRefused(400, f"the hand-in is not a tar archive ({exc})") from None


def peer_user(sock: socket.socket) -> str:
    """The Unix user at the other end of a Unix socket, as the kernel reports it."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no name (a container's user): still one person
        return f"uid-{uid}"


def make_app(lab):
    """The service's routes: ``GET /course`` and ``POST /check?path=<rel>`` (a tar)."""
    import tornado.web

    class Route(tornado.web.RequestHandler):
        @property
        def user(self) -> str:
            return peer_user(self.request.connection.stream.socket)

        def answer(self, status: int, body: dict) -> None:
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(body))

    class CourseRoute(Route):
        async def get(self):
            self.answer(200, await lab.course_view(self.user))

    class CheckRoute(Route):
        async def post(self):
            user, path = self.user, self.get_query_argument("path", "")
            try:
                view = await lab.check_upload(user, path, self.request.body)
            except CheckRefused as exc:
                _log(f"{user} {path}: refused ({exc.status}): {exc}")
                return self.answer(exc.status, {"message": str(exc)})
            took = "cached" if view.get("cached") else f"{view.get('seconds') or 0:.1f} s"
            _log(f"{user} {path}: {view['score']:g} / {view['max_score']:g} ({took})")
            self.answer(200, view)

    return tornado.web.Application([("/course", CourseRoute), ("/check", CheckRoute)])


def _log(line: str) -> None:
    """One line per check on the service's output, for the instructor who runs it."""
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S} {line}", flush=True)


def serve(socket_path: Path, course_dir: Path, *, workers: int = 1,
          cooldown_seconds: float = 10.0) -> None:
    """Run the check service until it is stopped (Ctrl-C, SIGTERM)."""
    import tornado.httpserver
    import tornado.netutil

    from ..course import CourseError
    from .service import CourseLab

    lab = CourseLab(root_dir=str(course_dir), course_dir=str(course_dir),
                    check_workers=workers, cooldown_seconds=cooldown_seconds)
    course = lab.course()
    if course is None:
        raise CourseError(f"{course_dir} is not a course workspace: make one with "
                          "`autograder init --course DIR` and release the assignments")

    async def main():
        server = tornado.httpserver.HTTPServer(make_app(lab), max_body_size=MAX_UPLOAD_BYTES)
        # Anyone may connect: the caller's Unix user, not the socket's mode, is the key.
        server.add_sockets([tornado.netutil.bind_unix_socket(str(socket_path), mode=0o666)])
        lab.start_workers(course)
        print(f"autograder: checking for {course.root} on {socket_path} (Ctrl-C stops)",
              flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            server.stop()

    try:
        asyncio.run(main())
    finally:
        if socket_path.is_socket():
            os.unlink(socket_path)
