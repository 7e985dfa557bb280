""""Check my work" on a server shared by many students (JupyterHub and the like): the
student's side.

On a laptop the student's Jupyter server runs the checks itself, in worker processes
(:mod:`..service_side.course_lab`). On a shared machine that cannot be safe: each student's Jupyter
server runs as the student, and so does every kernel and terminal the student opens.
Whatever that server can read to grade (the hidden checks, the gradebook, the
assignment sources with their solutions) the student can read too.

So the checks move into a service of their own, ``autograder serve-checks``
(:mod:`..service_side.serve_checks`), which keeps the course where students cannot read it. A
student's Jupyter server, told where the service is, sends it the notebook and the
files beside it and shows what comes back: the same view a local check gives, already
cut to the instructor's visibility setting. The service is reached one of two ways:

* ``c.CheckService.socket``: a Unix socket on the same machine (JupyterHub's default
  spawner, every student a Unix user). The service asks the kernel who is calling.
* ``c.CheckService.url``: HTTP, for students in containers of their own (KubeSpawner,
  DockerSpawner), where every student is often the same uid. The request carries the
  token JupyterHub gave this server (``JUPYTERHUB_API_TOKEN``), and the service asks
  the hub whose token it is.

Either way, who asks is never taken from the request's own words.
"""

from __future__ import annotations

import asyncio
import http.client
import io
import json
import os
import socket
import tarfile
import tempfile
import urllib.parse
from pathlib import Path, PurePosixPath

from traitlets import Float, Unicode
from traitlets.config import LoggingConfigurable

from ..handin import MAX_UPLOAD_BYTES, CheckRefused, notebook_under, stage_submission

#: The folder under a student's server root that receives the lectures and the README.
MATERIAL = "course"
#: When to suggest trying again after the service did not answer (seconds).
SERVICE_RETRY_SECONDS = 60
NOT_RUNNING = ("the course's check service is not answering on {where}: tell your "
               "instructor (the notebook itself is fine and saved)")
NO_SERVICE = ("no check service is set for this Jupyter server (c.CheckService.socket or "
              "c.CheckService.url in jupyter_server_config.py): tell your instructor")
NO_TOKEN = ("this Jupyter server has no JupyterHub token (JUPYTERHUB_API_TOKEN) to show the "
            "check service who you are: start it from the hub, or tell your instructor")


def pack(notebook: Path) -> tuple[bytes, list[str]]:
    """The notebook under its own name and the files beside it, as an uncompressed tar
    (the same files a local check copies, :func:`..handin.stage_submission`), and the notes
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


def request(where: str, method: str, url: str, body: bytes | None = None,
            timeout: float = 3600.0, token: str | None = None) -> dict:
    """One request to the service at ``where`` (a Unix socket's path, or ``http://host:port``
    with the hub ``token`` that names the student); its JSON answer, or
    :class:`CheckRefused` with the service's own status and message (or 503/504 when it
    does not answer)."""
    if not where:
        raise CheckRefused(503, NO_SERVICE)
    if where.startswith(("http://", "https://")):
        if not token:
            raise CheckRefused(401, NO_TOKEN)
        parts = urllib.parse.urlsplit(where)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else \
            http.client.HTTPConnection
        connection = kind(parts.netloc, timeout=timeout)
        url = parts.path.rstrip("/") + url
    else:
        connection = _UnixHTTPConnection(where, timeout)
    headers = {"Content-Type": "application/x-tar"} if body else {}
    if token:
        headers["Authorization"] = f"token {token}"
    try:
        connection.request(method, url, body=body, headers=headers)
        response = connection.getresponse()
        status, data = response.status, response.read()
    except TimeoutError:
        raise CheckRefused(504, f"the check service gave no answer within {timeout:.0f} s; "
                                "try again, and tell your instructor if it happens again",
                           SERVICE_RETRY_SECONDS) from None
    except OSError:  # no socket, nobody listening, no permission, connection dropped
        raise CheckRefused(503, NOT_RUNNING.format(where=where), SERVICE_RETRY_SECONDS) from None
    finally:
        connection.close()
    try:
        answer = json.loads(data)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise CheckRefused(502, f"the check service on {where} answered {status} without a "
                                "result: tell your instructor")
    if status >= 400:
        retry = answer.get("retry_after")
        raise CheckRefused(status, str(answer.get("message") or f"refused ({status})"),
                           retry if isinstance(retry, (int, float)) else None)
    return answer


class CheckService(LoggingConfigurable):
    """The student's Jupyter server's side: the panel's two requests, answered by the
    service (``c.CheckService.socket = "/run/autograder/check.sock"`` or
    ``c.CheckService.url = "http://course-checks:8765"`` in ``jupyter_server_config.py``).
    Nothing here reads the course: there is none to read."""

    socket = Unicode("", config=True,
                     help="The Unix socket of `autograder serve-checks --socket`. Set (or "
                          "url), this server sends every check there; both empty, it runs "
                          "checks itself.")
    url = Unicode("", config=True,
                  help="http://host:port of `autograder serve-checks --listen`, which learns "
                       "who is asking from this server's JupyterHub token.")
    timeout = Float(4 * 3600.0, config=True,
                    help="Seconds to wait for a check's answer (the service applies the "
                         "assignment's own limit first).")

    def __init__(self, root_dir: str, **kwargs):
        super().__init__(**kwargs)
        self.root_dir = Path(root_dir).resolve()
        self._last_view: dict | None = None
        self._checked: dict[str, dict] = {}  # assignment -> notebook id -> path, saved_at

    @property
    def where(self) -> str:
        return self.url or self.socket

    def describe(self) -> str:
        return (f"checks sent to the course's check service on {self.where}" if self.where
                else "no check service set (c.CheckService.socket or url): checks are "
                     "refused")

    def _request(self, method: str, url: str, body: bytes | None, timeout: float) -> dict:
        token = os.environ.get("JUPYTERHUB_API_TOKEN") if self.url else None
        return request(self.where, method, url, body, timeout, token)

    async def check(self, user: str, raw_path) -> dict:
        """Check a saved notebook (``raw_path`` under this server's root) on the service;
        the answer is the view a local check gives. ``user`` is not sent: the service
        learns who is asking from the kernel or the hub."""
        notebook = notebook_under(self.root_dir, raw_path)
        rel = notebook.relative_to(self.root_dir).as_posix()
        data, notes = await asyncio.to_thread(pack, notebook)
        url = "/check?" + urllib.parse.urlencode({"path": rel})
        view = await asyncio.to_thread(self._request, "POST", url, data, self.timeout)
        view["notes"] = [*notes, *view.get("notes", [])]
        if isinstance(view.get("assignment"), str) and isinstance(view.get("notebook"), str):
            self._checked.setdefault(view["assignment"], {})[view["notebook"]] = {
                "path": rel, "saved_at": notebook.stat().st_mtime}
        return view

    async def last_checked(self, user: str, assignment: str) -> dict:
        """What this server checked last of ``assignment`` (see ``CourseLab.last_checked``)."""
        return dict(self._checked.get(assignment, {}))

    async def course_view(self, user: str) -> dict:
        """The Course panel from the service, with its links made this server's: a
        notebook is where nbgrader's fetch puts it (``<assignment>/<notebook>.ipynb``) or
        where the service has it, if this server's root holds that too; else no link."""
        try:
            view = await asyncio.to_thread(self._request, "GET", "/course", None, 60.0)
        except CheckRefused as exc:
            # The outline as last seen, if any, stays in view under the problem.
            return {**(self._last_view or {"title": "Course", "readme": None,
                                           "lectures": [], "assignments": []}),
                    "problem": str(exc)}
        await asyncio.to_thread(self._copy_material, view)
        self._last_view = local_paths(view, self.root_dir)
        return self._last_view

    def _copy_material(self, view: dict) -> None:
        """The lectures and the course's README, copied once into ``course/`` under this
        server's root, where the panel links them. From then on they are the student's
        own copies (notes in a lecture, cells run): never overwritten."""
        wanted = [view.get("readme"), *(lecture.get("path") for lecture in
                                        view.get("lectures", []))]
        for path in filter(None, wanted):
            local = self.root_dir / MATERIAL / path
            if not _inside(path) or local.exists():
                continue
            try:
                answer = self._request("GET", "/material?" + urllib.parse.urlencode(
                    {"path": path}), None, 60.0)
            except CheckRefused as exc:
                self.log.warning("could not copy %s from the check service: %s", path, exc)
                continue
            local.parent.mkdir(parents=True, exist_ok=True)
            local.write_text(str(answer.get("text", "")))


def local_paths(view: dict, root_dir: Path) -> dict:
    """Keep only the links of ``view`` that open a file under ``root_dir``: the lectures
    and README where :meth:`CheckService._copy_material` put them, each notebook where
    nbgrader's fetch puts it."""
    def here(path) -> str | None:
        if not isinstance(path, str) or not _inside(path):
            return None
        return path if (root_dir / path).is_file() else None

    def material(path) -> str | None:
        return here(f"{MATERIAL}/{path}") if isinstance(path, str) else None

    view["readme"] = material(view.get("readme")) or here(view.get("readme"))
    for lecture in view.get("lectures", []):
        lecture["path"] = material(lecture.get("path")) or here(lecture.get("path"))
    for assignment in view.get("assignments", []):
        for notebook in assignment.get("notebooks", []):
            fetched = f"{assignment.get('name')}/{notebook.get('id')}.ipynb"
            notebook["path"] = here(fetched) or here(notebook.get("path"))
    return view


def _inside(path: str) -> bool:
    """A relative path that stays below the folder it is joined to (no ``..``, not
    absolute: ``root / "/etc/passwd"`` would be ``/etc/passwd``)."""
    rel = PurePosixPath(path)
    return not rel.is_absolute() and ".." not in rel.parts
