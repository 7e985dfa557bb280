"""``autograder serve-checks``: the checks of a shared server, in a service of their own.

The service holds the course (workspace, hidden checks, gradebook) where students cannot
read it and runs each check through the same :class:`.course_lab.CourseLab` a laptop uses.
Students' Jupyter servers send it their notebooks (:mod:`..student_side.shared_server`).
What it must get right is who is asking, since the one-check-at-a-time rule, the
cool-down and each student's saved results are keyed by that name; it never takes a name
from the request:

* on a Unix socket, the kernel reports the Unix user at the other end (``SO_PEERCRED``);
* over HTTP, the request carries its server's JupyterHub token, and the hub's own
  ``GET /hub/api/user`` says whose token it is (any token may ask the hub who it
  belongs to; only a user's token is accepted, not a service's).

Routes: ``GET /course`` (the panel), ``POST /check?path=<rel>`` (a packed hand-in) and
``GET /material?path=<rel>`` (a lecture or the README, which students' servers copy).
"""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import os
import pwd
import socket
import struct
import time
from pathlib import Path

from ..handin import MAX_UPLOAD_BYTES, CheckRefused

#: How long the hub's answer about a token is trusted before asking again (seconds).
TOKEN_TTL = 300.0


# -- who is asking ------------------------------------------------------------------------------
def peer_user(sock: socket.socket) -> str:
    """The Unix user at the other end of a Unix socket, as the kernel reports it."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no name (a container's user): still one person
        return f"uid-{uid}"


class HubTokens:
    """Names JupyterHub users by their tokens, asking the hub at ``api_url``
    (``http://hub:8081/hub/api``) and remembering each answer for :data:`TOKEN_TTL`."""

    def __init__(self, api_url: str):
        self.api_url = api_url.rstrip("/")
        self._known: dict[str, tuple[str, float]] = {}  # sha256(token) -> (name, until)

    async def user(self, authorization: str | None) -> str:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "token" or not token.strip():
            raise CheckRefused(401, "send the Jupyter server's hub token: Authorization: "
                                    "token $JUPYTERHUB_API_TOKEN")
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        name, until = self._known.get(key, (None, 0.0))
        if name is None or until < time.monotonic():
            name = await self._ask_hub(token.strip())
            self._known[key] = (name, time.monotonic() + TOKEN_TTL)
        return name

    async def _ask_hub(self, token: str) -> str:
        from tornado.httpclient import AsyncHTTPClient, HTTPClientError

        try:
            answer = await AsyncHTTPClient().fetch(
                f"{self.api_url}/user", headers={"Authorization": f"token {token}"},
                request_timeout=30)
        except HTTPClientError as exc:
            if exc.code in (401, 403):
                raise CheckRefused(403, "the hub does not know this server's token: restart "
                                        "your server from the hub's home page") from None
            raise CheckRefused(503, f"the hub could not say who is asking ({exc}); try "
                                    "again, and tell your instructor if it happens again"
                               ) from None
        except OSError as exc:
            raise CheckRefused(503, f"the hub is not answering ({exc}): tell your "
                                    "instructor") from None
        model = json.loads(answer.body)
        if model.get("kind", "user") != "user" or not model.get("name"):
            raise CheckRefused(403, "checks are for students' servers: this token belongs to "
                                    f"a {model.get('kind')}, not a user")
        return str(model["name"])


# -- the service --------------------------------------------------------------------------------
def make_app(lab, hub: HubTokens | None = None):
    """The routes (see the module docstring), naming the caller by the socket's peer, or
    by ``hub`` when it listens on TCP."""
    import tornado.web

    class Route(tornado.web.RequestHandler):
        async def caller(self) -> str:
            if hub is not None:
                return await hub.user(self.request.headers.get("Authorization"))
            return peer_user(self.request.connection.stream.socket)

        def answer(self, status: int, body: dict) -> None:
            self.set_status(status)
            self.set_header("Content-Type", "application/json")
            self.finish(json.dumps(body))

    class CourseRoute(Route):
        async def get(self):
            try:
                user = await self.caller()
            except CheckRefused as exc:
                return self.answer(exc.status, exc.body())
            self.answer(200, await lab.course_view(user))

    class CheckRoute(Route):
        async def post(self):
            path = self.get_query_argument("path", "")
            try:
                user = await self.caller()
            except CheckRefused as exc:
                _log(f"? {path}: refused ({exc.status}): {exc}")
                return self.answer(exc.status, exc.body())
            try:
                view = await lab.check_upload(user, path, self.request.body)
            except CheckRefused as exc:
                _log(f"{user} {path}: refused ({exc.status}): {exc}")
                return self.answer(exc.status, exc.body())
            took = "cached" if view.get("cached") else f"{view.get('seconds') or 0:.1f} s"
            _log(f"{user} {path}: {view['score']:g} / {view['max_score']:g} ({took})")
            self.answer(200, view)

    class MaterialRoute(Route):
        async def get(self):
            try:
                await self.caller()
                text = await asyncio.to_thread(material, lab.course(),
                                               self.get_query_argument("path", ""))
            except CheckRefused as exc:
                return self.answer(exc.status, exc.body())
            self.answer(200, {"text": text})

    # Tornado's own access log is off: each check gets the service's one line instead.
    return tornado.web.Application([("/course", CourseRoute), ("/check", CheckRoute),
                                    ("/material", MaterialRoute)],
                                   log_function=lambda handler: None)


def material(course, path: str) -> str:
    """A lecture notebook or the course's README, by the path the Course panel links it
    with (``lectures/<stem>.ipynb``, ``README.md``); nothing else of the workspace."""
    from ...workspace.outline import load_outline

    outline = load_outline(course.outline_file, course.assignments_dir)
    shown = {"README.md", *(f"lectures/{lecture.stem}.ipynb" for lecture in outline.lectures)}
    if path not in shown or not (course.root / path).is_file():
        raise CheckRefused(404, f"{path!r} is not a lecture or the course README")
    return (course.root / path).read_text()


def _log(line: str) -> None:
    """One line per check on the service's output, for the instructor who runs it."""
    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S} {line}", flush=True)


def serve(course_dir: Path, *, socket_path: Path | None = None, listen: str | None = None,
          hub_api: str | None = None, workers: int = 1, cooldown_seconds: float = 10.0) -> None:
    """Run the check service until it is stopped (Ctrl-C, SIGTERM): on ``socket_path``, or
    on ``listen`` (``host:port``) naming callers through the hub at ``hub_api``."""
    import tornado.httpserver
    import tornado.netutil

    from ...workspace.course import CourseError
    from .course_lab import CourseLab

    if (socket_path is None) == (listen is None):
        raise CourseError("serve-checks listens on --socket PATH or on --listen HOST:PORT")
    if listen is not None and not hub_api:
        raise CourseError("with --listen, name the hub that says who is asking: --hub-api "
                          "http://<hub>:8081/hub/api (or set JUPYTERHUB_API_URL)")
    lab = CourseLab(root_dir=str(course_dir), course_dir=str(course_dir),
                    check_workers=workers, cooldown_seconds=cooldown_seconds)
    course = lab.course()
    if course is None:
        raise CourseError(f"{course_dir} is not a course workspace: make one with "
                          "`autograder init --course DIR` and release the assignments")
    if listen is not None:
        host, _, port = listen.rpartition(":")
        if not port.isdigit():
            raise CourseError(f"--listen {listen}: give HOST:PORT, e.g. 0.0.0.0:8765")
        sockets = tornado.netutil.bind_sockets(int(port), host or None)
        where = f"http://{listen} (students named by the hub at {hub_api})"
    else:
        # Anyone may connect: the caller's Unix user, not the socket's mode, is the key.
        sockets = [tornado.netutil.bind_unix_socket(str(socket_path), mode=0o666)]
        where = str(socket_path)

    async def main():
        hub = HubTokens(hub_api) if listen is not None else None
        server = tornado.httpserver.HTTPServer(make_app(lab, hub), max_body_size=MAX_UPLOAD_BYTES)
        server.add_sockets(sockets)
        lab.start_workers(course)
        print(f"autograder: checking for {course.root} on {where} (Ctrl-C stops)", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            server.stop()

    try:
        asyncio.run(main())
    finally:
        if socket_path is not None and socket_path.is_socket():
            os.unlink(socket_path)
