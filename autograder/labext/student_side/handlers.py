"""The REST endpoints, behind the Jupyter server's own authentication.

``GET  /autograder/api/course``  the Course panel (:mod:`..service_side.catalog`)
``POST /autograder/api/check``   ``{"path": "01-attention/attention.ipynb"}``
``POST /autograder/api/open``    ``{"assignment": "01-attention"}``: the student's copy
                                 (nbgrader's fetched one, fetched now if missing)
``GET  /autograder/api/handin?assignment=01-attention``  what to say before Submit

Both are ``APIHandler``s marked ``@authenticated``: without the server's token (or its
login cookie plus the XSRF header) a request is refused before it reaches this code.
Every refusal is a JSON ``{"message": ...}`` with a 4xx/5xx status that says what to do.
"""

from __future__ import annotations

import getpass
import json

import tornado
from jupyter_server.auth.decorator import authorized
from jupyter_server.auth.identity import IdentityProvider, PasswordIdentityProvider
from jupyter_server.base.handlers import APIHandler
from jupyter_server.utils import url_path_join

from ..handin import (
    CheckRefused,
    fetch_with_nbgrader,
    fetched_copy,
    handin_warnings,
    prefer_fetched,
)
from .shared_server import CheckService

AUTH_RESOURCE = "contents"  # checking reads a notebook, as opening it does


class _Handler(APIHandler):
    auth_resource = AUTH_RESOURCE

    @property
    def lab(self):
        """:class:`..service_side.course_lab.CourseLab` (checks run here) or
        :class:`.shared_server.CheckService`."""
        return self.settings["autograder_course_lab"]

    @property
    def user_name(self) -> str:
        """Whose check this is: the one-check-at-a-time, cool-down and results key.

        A personal server (jupyter_server's own identity providers) has one owner, whoever holds
        its token; it names each token request's user at random, so that name is no key.
        A multi-user deployment (JupyterHub) brings its own provider and stable names."""
        if type(self.identity_provider) in (IdentityProvider, PasswordIdentityProvider):
            return getpass.getuser()
        user = self.current_user
        return getattr(user, "username", None) or str(user)

    def refuse(self, exc: CheckRefused) -> None:
        self.set_status(exc.status)
        if exc.retry_after is not None:
            self.set_header("Retry-After", str(max(1, round(exc.retry_after))))
        self.finish(json.dumps(exc.body()))


    def json_body(self) -> dict | None:
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            return None
        return body if isinstance(body, dict) else None

    async def assignment_entry(self, name) -> dict:
        """The panel's entry for assignment ``name``, links at the fetched copy."""
        if not isinstance(name, str) or not name or "/" in name or name.startswith("."):
            raise CheckRefused(400, 'name an assignment: {"assignment": "<name>"}')
        view = prefer_fetched(await self.lab.course_view(self.user_name), self.lab.root_dir)
        for entry in view.get("assignments", []):
            if entry.get("name") == name:
                return entry
        raise CheckRefused(404, view.get("problem") or f"this course has no assignment {name}")


class CourseHandler(_Handler):
    @tornado.web.authenticated
    @authorized
    async def get(self):
        view = await self.lab.course_view(self.user_name)
        self.finish(json.dumps(prefer_fetched(view, self.lab.root_dir)))


class OpenHandler(_Handler):
    """The student's copy of an assignment: the one nbgrader's Assignment List fetched,
    fetched now (as its "Fetch" would) if there is none yet. Open, Check my work and
    Submit then all see the same notebook."""

    @tornado.web.authenticated
    @authorized
    async def post(self):
        body = self.json_body()
        try:
            entry = await self.assignment_entry((body or {}).get("assignment"))
            if not entry.get("released"):
                raise CheckRefused(409, f"{entry['name']} has not been released yet")
        except CheckRefused as exc:
            return self.refuse(exc)
        name, root = entry["name"], self.lab.root_dir
        ids = [n["id"] for n in entry.get("notebooks", [])]
        note = None
        if not fetched_copy(root, name, ids):
            note = fetch_with_nbgrader(self.settings.get("assignment_list_manager"), root,
                                       name, self.log)
        copies = fetched_copy(root, name, ids)
        if copies:
            paths, note = copies, None
        else:  # nothing to fetch (released without the exchange): the course's own copy
            paths = {n["id"]: n["path"] for n in entry.get("notebooks", []) if n.get("path")}
            note = note and f"working in {next(iter(paths.values()), 'the release')}: {note}"
        if not paths:
            return self.refuse(CheckRefused(404, note or f"no notebook of {name} to open"))
        self.finish(json.dumps({"assignment": name, "paths": paths,
                                "path": paths.get(ids[0]) if ids else next(iter(paths.values())),
                                "fetched": bool(copies), "note": note}))


class HandinHandler(_Handler):
    """Before nbgrader's Submit sends ``<assignment>/``: answers left unwritten, or a
    copy older than the one the student last checked (the panel asks before sending)."""

    @tornado.web.authenticated
    @authorized
    async def get(self):
        name = self.get_query_argument("assignment", "")
        if not name or "/" in name or name.startswith("."):
            return self.refuse(CheckRefused(400, "send ?assignment=<name>"))
        folder = self.lab.root_dir / name
        copies = {p.stem: f"{name}/{p.name}" for p in sorted(folder.glob("*.ipynb"))
                  if p.is_file()}
        last = await self.lab.last_checked(self.user_name, name) if copies else {}
        self.finish(json.dumps({"assignment": name, "paths": copies,
                                "warnings": handin_warnings(self.lab.root_dir, copies, last)}))


class CheckHandler(_Handler):
    @tornado.web.authenticated
    @authorized
    async def post(self):
        try:
            body = json.loads(self.request.body or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return self.refuse(CheckRefused(400, 'send a JSON body: {"path": "<notebook>"}'))
        try:
            result = await self.lab.check(self.user_name, body.get("path"))
        except CheckRefused as exc:
            return self.refuse(exc)
        self.finish(json.dumps(result))


def setup_handlers(serverapp):
    """Route the panel's requests to the course's check service when one is configured
    (a shared server), else to checks run by this server. Returns what answers them."""
    lab = CheckService(root_dir=serverapp.root_dir, config=serverapp.config, parent=serverapp)
    if not lab.where:
        try:  # the grading pipeline: only where checks run here
            from ..service_side.course_lab import CourseLab
        except ModuleNotFoundError as exc:
            if exc.name != f"{__package__}.service":
                raise
            return _routes(serverapp, lab)  # the students' build: autograder release --student-lab
        lab = CourseLab(root_dir=serverapp.root_dir, config=serverapp.config, parent=serverapp)
    return _routes(serverapp, lab)


def _routes(serverapp, lab):
    web_app = serverapp.web_app
    web_app.settings["autograder_course_lab"] = lab
    base = url_path_join(web_app.settings["base_url"], "autograder", "api")
    web_app.add_handlers(".*$", [
        (url_path_join(base, "course"), CourseHandler),
        (url_path_join(base, "check"), CheckHandler),
        (url_path_join(base, "open"), OpenHandler),
        (url_path_join(base, "handin"), HandinHandler),
    ])
    return lab
