"""`autograder serve-checks`: "Check my work" on a shared server, the checks in a service
of their own that students' Jupyter servers reach over a Unix socket.

A real service process (the CLI) serves the course workspace; a real Jupyter server,
rooted in a student's home where nothing of the course is, is told the socket and
answers the panel's requests through it. Where this runs as root, a process of another
Unix user (``nobody``), who cannot read the workspace, checks a notebook too.
"""

from __future__ import annotations

import asyncio
import getpass
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from autograder.labext.handin import CheckRefused, unpack
from autograder.labext.service_side.course_lab import BUSY_RETRY_SECONDS, CourseLab
from autograder.labext.student_side.shared_server import (
    SERVICE_RETRY_SECONDS,
    CheckService,
    local_paths,
    pack,
)

ASSIGNMENT = "01-attention"
PROJECT_ROOT = Path(__file__).resolve().parents[2]
SITE_PACKAGES = sysconfig.get_paths()["purelib"]  # traitlets, for the student's side

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def service(course, tmp_path_factory):
    """``autograder serve-checks`` on the course workspace; yields its socket's path."""
    # Outside pytest's own folders (private to root), where any user can reach the socket.
    folder = Path(tempfile.mkdtemp(prefix="check-service-"))
    os.chmod(folder, 0o755)
    socket_path = folder / "check.sock"
    process = subprocess.Popen(
        [sys.executable, "-m", "autograder.cli", "serve-checks", "--course", str(course.root),
         "--socket", str(socket_path), "--cooldown", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not socket_path.is_socket():
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, "the service did not open its socket"
        time.sleep(0.2)
    yield socket_path
    process.terminate()
    output = process.communicate(timeout=60)[0]
    assert process.returncode == 0, output
    assert f"checking for {course.root}" in output and "the check service stopped" in output
    # A line per check for whoever runs the service: who, what, the score, how long.
    user = getpass.getuser()
    assert f" {user} {ASSIGNMENT}/attention.ipynb: 11 / 11 (" in output, output
    assert f" {user} notes.ipynb: refused (400): " in output, output
    assert not socket_path.exists()  # the service cleans up after itself
    shutil.rmtree(folder)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A student's home: the assignment fetched into ``01-attention/``, nothing else."""
    home = tmp_path_factory.mktemp("home")
    (home / ASSIGNMENT).mkdir()
    return home


@pytest.fixture
def jp_root_dir(home):
    return home


@pytest.fixture
def jp_server_config(service):
    return {"ServerApp": {"jpserver_extensions": {"autograder.labext": True}},
            "CheckService": {"socket": str(service)}}


def hand_in(home: Path, nb, *files: tuple[str, bytes]) -> str:
    folder = home / ASSIGNMENT
    nbformat.write(nb, folder / "attention.ipynb")
    for name, data in files:
        (folder / name).write_bytes(data)
    return f"{ASSIGNMENT}/attention.ipynb"


async def test_the_panel_lists_the_course_with_the_students_own_paths(jp_fetch, home,
                                                                     notebooks, course):
    service_course = course
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    assert course["problem"] is None and course["title"]
    first = course["assignments"][0]
    assert first["name"] == ASSIGNMENT and first["released"]
    # Not fetched yet: the service's own copy is nowhere under this server, so no link.
    assert first["notebooks"] == [{"id": "attention", "path": None}]
    # The lectures and the README are copied into course/, once, and linked there.
    assert course["readme"] == "course/README.md"
    lectures = [lecture["path"] for lecture in course["lectures"]]
    assert lectures and all(p.startswith("course/lectures/") for p in lectures)
    for path in [course["readme"], *lectures]:
        assert (home / path).read_bytes() == (service_course.root / path.removeprefix(
            "course/")).read_bytes()
    (home / lectures[0]).write_text("my notes")  # the student's copy from now on
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    assert (home / lectures[0]).read_text() == "my notes"
    hand_in(home, notebooks["stub"])
    course = json.loads((await jp_fetch("autograder", "api", "course")).body)
    assert course["assignments"][0]["notebooks"] == [
        {"id": "attention", "path": f"{ASSIGNMENT}/attention.ipynb"}]


async def test_checks_run_in_the_service_and_are_kept_under_the_socket_user(
        check, home, notebooks, course):
    status, answer = await check(hand_in(home, notebooks["reference"]))
    assert status == 200, answer
    assert (answer["score"], answer["max_score"]) == (11.0, 11.0)
    assert answer["path"] == f"{ASSIGNMENT}/attention.ipynb" and not answer["cached"]

    status, answer = await check(hand_in(home, notebooks["stub"]))
    assert status == 200 and answer["score"] == 0.0
    assert all(e["shared_reason"].startswith("not written yet")
               for e in answer["exercises"] if e["kind"] == "auto")

    # Saved by the service, under the name the kernel gives the socket's caller; nothing
    # of the course is written where the student's server runs.
    saved = json.loads((course.root / "check-my-work" / f"{getpass.getuser()}.json")
                       .read_text())
    assert saved[ASSIGNMENT]["attention"]["score"] == 0.0
    assert sorted(p.name for p in home.iterdir()) == [ASSIGNMENT, "course"]
    assert not list(home.rglob("*.json"))


async def test_a_mutant_is_diagnosed_through_the_service(check, home, notebooks):
    mutant = next(name for name in notebooks if name.startswith("mutant"))
    status, answer = await check(hand_in(home, notebooks[mutant]))
    assert status == 200, answer
    assert 0 < answer["score"] < answer["max_score"]
    assert any(e["diagnoses"] for e in answer["exercises"]), answer


async def test_refusals_of_the_service_reach_the_student(check, home, course):
    (home / "notes.ipynb").write_text("{not json")
    status, answer = await check("notes.ipynb")
    assert status == 400 and "not valid notebook JSON" in answer["message"]
    foreign = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    nbformat.write(foreign, home / "scratch.ipynb")
    status, answer = await check("scratch.ipynb")
    assert 400 <= status < 500 and answer["message"]


async def test_a_service_that_is_down_is_named_not_blamed_on_the_notebook(tmp_path):
    (tmp_path / "a.ipynb").write_text(nbformat.writes(nbformat.v4.new_notebook()))
    lab = CheckService(root_dir=str(tmp_path), socket=str(tmp_path / "none.sock"))
    with pytest.raises(CheckRefused) as refused:
        await lab.check("student", "a.ipynb")
    assert refused.value.status == 503
    assert "not answering on" in str(refused.value) and "tell your instructor" in str(
        refused.value)
    # The panel says when to try again: the refusal carries it.
    assert refused.value.body()["retry_after"] == SERVICE_RETRY_SECONDS
    view = await lab.course_view("student")
    assert "not answering" in view["problem"] and view["assignments"] == []


async def test_when_the_service_goes_down_the_panel_keeps_the_outline_it_had(service,
                                                                               tmp_path):
    lab = CheckService(root_dir=str(tmp_path), socket=str(service))
    seen = await lab.course_view("student")
    assert seen["problem"] is None and seen["assignments"][0]["name"] == ASSIGNMENT
    lab.socket = str(tmp_path / "stopped.sock")  # as if the service had stopped
    view = await lab.course_view("student")
    assert "not answering" in view["problem"]
    assert view["assignments"] == seen["assignments"] and view["lectures"] == seen["lectures"]


def test_a_hand_in_is_the_notebook_and_the_plain_files_beside_it(tmp_path):
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "mine.ipynb").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"\0" * 10)
    (folder / "other.ipynb").write_text("{}")
    (folder / ".hidden").write_text("x")
    (folder / "sub").mkdir()
    data, notes = pack(folder / "mine.ipynb")
    assert notes == []
    unpack(data, tmp_path / "out")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["mine.ipynb",
                                                                  "model.safetensors"]


def test_the_largest_hand_in_the_grader_takes_fits_the_service(tmp_path):
    # The student side cannot import the grader's limit: the two constants must agree.
    from autograder.grading.sanitize import MAX_NOTEBOOK_BYTES
    from autograder.labext.handin import MAX_SIBLING_BYTES, MAX_UPLOAD_BYTES

    tar_overhead = 2**20  # headers and padding of a tar of a few files
    assert MAX_NOTEBOOK_BYTES + MAX_SIBLING_BYTES + tar_overhead <= MAX_UPLOAD_BYTES
    assert MAX_UPLOAD_BYTES <= MAX_NOTEBOOK_BYTES + MAX_SIBLING_BYTES + 2 * tar_overhead


@pytest.mark.parametrize("member", ["../escape", "sub/file", ".hidden", "link"])
def test_the_service_refuses_a_hand_in_that_is_not_plain_files(tmp_path, member):
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        info = tarfile.TarInfo(member)
        if member == "link":
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        else:
            info.size = 1
            tar.addfile(info, io.BytesIO(b"x"))
    with pytest.raises(CheckRefused) as refused:
        unpack(buffer.getvalue(), tmp_path / "out")
    assert refused.value.status == 400 and repr(member) in str(refused.value)
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape").exists()
    with pytest.raises(CheckRefused) as refused:
        unpack(b"not a tar at all" * 40, tmp_path / "out")
    assert refused.value.status == 400


@pytest.mark.parametrize("path", ["source/01-attention/attention.ipynb", "gradebook.db",
                                  "../etc/passwd", "lectures/../gradebook.db"])
def test_the_service_hands_out_lectures_and_the_readme_only(course, path):
    from autograder.labext.service_side.serve_checks import material

    assert material(course, "README.md") == (course.root / "README.md").read_text()
    with pytest.raises(CheckRefused) as refused:
        material(course, path)
    assert refused.value.status == 404


def test_links_in_the_panel_point_only_at_files_under_the_students_root(tmp_path):
    (tmp_path / "01-attention").mkdir()
    (tmp_path / "01-attention" / "attention.ipynb").write_text("{}")
    view = {"readme": "README.md", "lectures": [{"path": "../etc/passwd"},
                                                {"path": "/etc/passwd"}],
            "assignments": [{"name": "01-attention", "notebooks": [
                {"id": "attention", "path": "release/01-attention/attention.ipynb"}]}]}
    local_paths(view, tmp_path)
    assert view["readme"] is None
    assert [lecture["path"] for lecture in view["lectures"]] == [None, None]
    assert view["assignments"][0]["notebooks"][0]["path"] == "01-attention/attention.ipynb"


def _as_nobody(*command: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                           "env", "-i", f"PYTHONPATH={PROJECT_ROOT}:{SITE_PACKAGES}",
                           *command],
                          capture_output=True, text=True, cwd="/", **kwargs)


def test_another_unix_user_who_cannot_read_the_course_gets_a_check(service, course,
                                                                   notebooks):
    """The deployment the service exists for: a student's process, as its own Unix user,
    cannot open the gradebook or the hidden checks, and still gets its notebook checked;
    the service names the student from the socket, never from the request."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if os.geteuid() != 0 or not shutil.which("setpriv") or python is None:
        pytest.skip("needs root, setpriv and a system python3 to act as another user")
    # The student's side needs the standard library and traitlets: a system Python will do.
    if _as_nobody(python, "-c", "import autograder.labext.student_side.shared_server").returncode:
        pytest.skip(f"user nobody cannot read {PROJECT_ROOT}")
    student = service.parent / "nobody-home"
    student.mkdir()
    nbformat.write(notebooks["reference"], student / "attention.ipynb")
    shutil.chown(student, "nobody")
    script = (
        "import json, pathlib, sys\n"
        "from autograder.labext.student_side import shared_server as s\n"
        "try:\n"
        "    pathlib.Path(sys.argv[3]).read_bytes(); readable = True\n"
        "except PermissionError:\n"
        "    readable = False\n"
        "data, notes = s.pack(pathlib.Path(sys.argv[2]))\n"
        "view = s.request(sys.argv[1], 'POST', '/check?path=01-attention/attention.ipynb', data)\n"
        "print(json.dumps({'readable': readable, 'score': view['score']}))\n")
    mode = course.root.stat().st_mode
    os.chmod(course.root, 0o700)  # as a shared server keeps it
    try:
        done = _as_nobody(python, "-c", script, str(service), str(student / "attention.ipynb"),
                          str(course.root / "gradebook.db"), timeout=600)
    finally:
        os.chmod(course.root, mode)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"readable": False, "score": 11.0}
    assert (course.root / "check-my-work" / "nobody.json").is_file()


def test_the_service_refuses_to_start_without_a_workspace(tmp_path):
    done = subprocess.run([sys.executable, "-m", "autograder.cli", "serve-checks", "--course",
                           str(tmp_path), "--socket", str(tmp_path / "s.sock")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "is not a course workspace" in done.stderr
    assert not (tmp_path / "s.sock").exists()


def test_one_check_at_a_time_per_caller(course, tmp_path):
    lab = CourseLab(root_dir=str(course.root), course_dir=str(course.root))
    lab._busy["student"] = "01-attention/attention.ipynb"
    with pytest.raises(CheckRefused) as refused:
        asyncio.run(lab.check_upload("student", "01-attention/attention.ipynb", b""))
    assert refused.value.status == 409 and refused.value.retry_after == BUSY_RETRY_SECONDS
    with pytest.raises(CheckRefused) as refused:
        asyncio.run(lab.check_upload("other", "../x.ipynb", b""))
    assert refused.value.status == 400


def test_the_student_lab_wheel_gives_a_students_jupyterlab_the_panel_and_checks(
        service, notebooks, tmp_path):
    """What a JupyterHub image installs: the student lab wheel in an environment of its
    own. Its JupyterLab finds the prebuilt panel and the server extension, holds no part
    of the grading pipeline, and checks through the service."""
    from autograder.student.lab_wheel import LABEXT, build_student_lab

    if not (LABEXT / "labextension" / "package.json").is_file():
        pytest.skip("the JupyterLab extension is not built (make builds it with Node.js)")
    wheel = build_student_lab(tmp_path / "wheel")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                                "['purelib'])"], check=True, capture_output=True,
                               text=True).stdout.strip())
    (site / "project-venv.pth").write_text(SITE_PACKAGES + "\n")  # jupyterlab, not the project
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True)
    probe = subprocess.run([python, "-c", (
        "import importlib.util, jupyter_core.paths as p\n"
        "import autograder.labext.student_side.handlers as h\n"
        "print(h.__file__)\n"
        "print(importlib.util.find_spec('autograder.workspace'))\n"
        "print(any(__import__('os').path.isfile(d + '/transformers-course-lab/package.json')"
        " for d in p.jupyter_path('labextensions')))\n")],
        capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    module, pipeline, prebuilt = probe.stdout.split()
    assert module.startswith(str(site)) and pipeline == "None" and prebuilt == "True"

    home = tmp_path / "home"
    (home / ASSIGNMENT).mkdir(parents=True)
    nbformat.write(notebooks["reference"], home / ASSIGNMENT / "attention.ipynb")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = subprocess.Popen(
        [python, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--ServerApp.root_dir={home}", "--IdentityProvider.token=t0ken",
         f"--CheckService.socket={service}",
         # The lab's own assets from this venv (the wheel's environment borrows jupyterlab).
         f"--LabApp.app_dir={sys.prefix}/share/jupyter/lab",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=home,
        env={**os.environ, "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
             "JUPYTER_DATA_DIR": str(tmp_path / "data")})
    try:
        def call(path, body=None):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/{path}", data=body,
                headers={"Authorization": "token t0ken"}, method="POST" if body else "GET")
            with urllib.request.urlopen(request, timeout=600) as answer:
                return answer.read()

        deadline = time.monotonic() + 120
        while True:
            try:
                page = call("lab").decode()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, \
                    server.stdout.read() if server.poll() is not None else "no answer"
                time.sleep(0.5)
        assert "transformers-course-lab" in page  # the panel, among the lab's extensions
        course = json.loads(call("autograder/api/course"))
        assert course["problem"] is None
        assert course["assignments"][0]["notebooks"][0]["path"] == f"{ASSIGNMENT}/attention.ipynb"
        answer = json.loads(call("autograder/api/check", json.dumps(
            {"path": f"{ASSIGNMENT}/attention.ipynb"}).encode()))
        assert (answer["score"], answer["max_score"]) == (11.0, 11.0)
    finally:
        server.terminate()
        log = server.communicate(timeout=60)[0]
    assert f"checks sent to the course's check service on {service}" in log, log[-3000:]
