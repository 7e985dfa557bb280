"""The REST endpoints, behind the Jupyter server's own authentication.

``GET  /autograder/api/course``  the Course panel (:mod:`..service_side.catalog`)
``POST /autograder/api/check``   ``{"path": "release/01-attention/attention.ipynb"}``

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

from ..handin import CheckRefused
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
        self.finish(json.dumps({"message": str(exc)}))


class CourseHandler(_Handler):
    @tornado.web.authenticated
    @authorized
    async def get(self):
        self.finish(json.dumps(await self.lab.course_view(self.user_name)))


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
    ])
    return lab
