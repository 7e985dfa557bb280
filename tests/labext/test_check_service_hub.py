"""`autograder serve-checks --listen`: students in containers, named by a real JupyterHub.

A real JupyterHub (its database, its tokens, its REST API) says whose token each
request carries. The only stand-in is its proxy: the hub's routes are never followed
here, so the configuration gives it a proxy that keeps no routes instead of starting
configurable-http-proxy (a Node.js program).
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import nbformat
import pytest

from autograder.labext.handin import CheckRefused
from autograder.labext.student_side.shared_server import CheckService, pack, request

pytest.importorskip("jupyterhub")
pytestmark = pytest.mark.slow

ASSIGNMENT = "01-attention"
TOKENS = {"alice": "alice-0123456789abcdef", "bob": "bob-0123456789abcdef"}
SERVICE_TOKEN = "grader-bot-0123456789abcdef"
HUB_CONFIG = """
from jupyterhub.proxy import Proxy


class NoRoutes(Proxy):
    \"\"\"This test calls the hub's API directly: there are no routes to keep.\"\"\"

    should_start = False

    async def add_route(self, routespec, target, data):
        pass

    async def delete_route(self, routespec):
        pass

    async def get_all_routes(self):
        return {{}}


c.JupyterHub.proxy_class = NoRoutes
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = {port}
c.JupyterHub.db_url = "sqlite:///{folder}/hub.sqlite"
c.JupyterHub.cookie_secret_file = "{folder}/cookie_secret"
c.JupyterHub.authenticator_class = "dummy"
c.Authenticator.allowed_users = {users!r}
c.JupyterHub.api_tokens = {tokens!r}
c.JupyterHub.services = [{{"name": "grader-bot", "api_token": {service_token!r}}}]
"""


def _free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return free.getsockname()[1]


def _wait_for(url: str, process: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(url, timeout=5)
            return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            if process.poll() is not None:
                raise AssertionError(f"{what} stopped:\n{process.stdout.read()[-3000:]}") from None
            assert time.monotonic() < deadline, f"{what} did not start"
            time.sleep(0.3)


@pytest.fixture(scope="module")
def hub_api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hub")
    port = _free_port()
    (folder / "jupyterhub_config.py").write_text(HUB_CONFIG.format(
        port=port, folder=folder, users=set(TOKENS),
        tokens={token: name for name, token in TOKENS.items()}, service_token=SERVICE_TOKEN))
    process = subprocess.Popen(
        [sys.executable, "-m", "jupyterhub", "-f", str(folder / "jupyterhub_config.py")],
        cwd=folder, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    api = f"http://127.0.0.1:{port}/hub/api"
    try:
        _wait_for(api, process, "JupyterHub")
        yield api
    finally:
        process.terminate()
        process.communicate(timeout=60)


@pytest.fixture(scope="module")
def service_url(course, hub_api):
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "autograder.cli", "serve-checks", "--course", str(course.root),
         "--listen", f"127.0.0.1:{port}", "--hub-api", hub_api, "--cooldown", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    _wait_for(f"{url}/course", process, "the check service")
    yield url
    process.terminate()
    output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, output
    assert f"alice {ASSIGNMENT}/attention.ipynb: 11 / 11 (" in output, output


@pytest.fixture(scope="module")
def hand_in(notebooks, tmp_path_factory):
    """``hand_in(name)``: a packed 01-attention notebook (reference, stub, a mutant...)."""
    folder = tmp_path_factory.mktemp("home") / ASSIGNMENT
    folder.mkdir()

    def pack_one(name: str) -> bytes:
        nbformat.write(notebooks[name], folder / "attention.ipynb")
        return pack(folder / "attention.ipynb")[0]

    return pack_one


CHECK = f"/check?path={ASSIGNMENT}/attention.ipynb"


def test_each_student_is_named_by_the_hub_from_their_token(service_url, hand_in, course):
    answer = request(service_url, "POST", CHECK, hand_in("reference"), token=TOKENS["alice"])
    assert (answer["score"], answer["max_score"]) == (11.0, 11.0)
    answer = request(service_url, "POST", CHECK, hand_in("stub"), token=TOKENS["bob"])
    assert answer["score"] == 0.0
    saved = course.root / "check-my-work"
    assert json.loads((saved / "alice.json").read_text())[ASSIGNMENT]["attention"]["score"] \
        == 11.0
    assert json.loads((saved / "bob.json").read_text())[ASSIGNMENT]["attention"]["score"] == 0.0
    # Nothing was saved under the name of whoever runs the service.
    assert not (saved / f"{getpass.getuser()}.json").exists()


@pytest.mark.parametrize("token, status, words", [
    (None, 401, "Authorization: token"),
    ("not-a-token-the-hub-made", 403, "the hub does not know this server's token"),
    (SERVICE_TOKEN, 403, "belongs to a service, not a user"),
])
def test_a_request_the_hub_does_not_vouch_for_is_refused(service_url, hand_in, token,
                                                         status, words):
    headers = {"Authorization": f"token {token}"} if token else {}
    sent = urllib.request.Request(f"{service_url}{CHECK}", data=hand_in("reference"),
                                  headers=headers, method="POST")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(sent, timeout=60)
    assert refused.value.code == status
    assert words in json.loads(refused.value.read())["message"]


async def test_the_students_server_sends_its_own_hub_token(service_url, tmp_path,
                                                         monkeypatch, notebooks):
    (tmp_path / ASSIGNMENT).mkdir()
    nbformat.write(notebooks["reference"], tmp_path / ASSIGNMENT / "attention.ipynb")
    lab = CheckService(root_dir=str(tmp_path), url=service_url)
    monkeypatch.delenv("JUPYTERHUB_API_TOKEN", raising=False)
    with pytest.raises(CheckRefused) as refused:
        await lab.check("ignored", f"{ASSIGNMENT}/attention.ipynb")
    assert refused.value.status == 401 and "JUPYTERHUB_API_TOKEN" in str(refused.value)
    monkeypatch.setenv("JUPYTERHUB_API_TOKEN", TOKENS["bob"])  # as the spawner sets it
    view = await lab.course_view("ignored")
    assert view["problem"] is None
    assert view["assignments"][0]["notebooks"][0]["path"] == f"{ASSIGNMENT}/attention.ipynb"
    answer = await lab.check("ignored", f"{ASSIGNMENT}/attention.ipynb")
    assert answer["score"] == 11.0 and answer["path"] == f"{ASSIGNMENT}/attention.ipynb"


def test_listening_on_tcp_needs_a_hub_to_name_students(course):
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "serve-checks", "--course",
                           str(course.root), "--listen", "127.0.0.1:0"],
                          capture_output=True, text=True, timeout=120,
                          env={k: v for k, v in os.environ.items()
                               if k != "JUPYTERHUB_API_URL"})
    assert done.returncode == 2 and "--hub-api" in done.stderr
