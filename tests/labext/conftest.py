"""A real Jupyter server (pytest-jupyter) with the course extension, on a course workspace
where 01-attention is released, and the notebooks a class would hand in."""

from __future__ import annotations

import json

import nbformat
import pytest

# pytest-jupyter's fixtures (jp_serverapp, jp_fetch, ...) and its async test runner, for
# the tests of this folder only.
from pytest_jupyter.jupyter_server import *  # noqa: F401,F403

ASSIGNMENT = "01-attention"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    from autograder.workspace.course import Course

    course = Course(tmp_path_factory.mktemp("lab") / "workspace")
    course.init()
    course.release(ASSIGNMENT)
    return course


@pytest.fixture(scope="module")
def notebooks(course):
    """``{student: notebook}``: reference, stub, every named mutant, tamper-allclose..."""
    from autograder.authoring.submissions import make_class

    students = make_class(course, course.spec(ASSIGNMENT), broken=True)
    return {student: nbs["attention"] for student, nbs in students.items()
            if not isinstance(nbs["attention"], bytes)}


@pytest.fixture
def jp_root_dir(course):
    return course.root


@pytest.fixture
def jp_server_config(course):
    return {
        "ServerApp": {"jpserver_extensions": {"autograder.labext": True}},
        "CourseLab": {"cooldown_seconds": 0.0, "course_dir": str(course.root)},
    }


@pytest.fixture
def save(course, request):
    """Write a notebook under the server root; returns its path as the server names it."""
    def write(nb, name="attention.ipynb") -> str:
        folder = course.root / "work" / request.node.name.replace("[", "-").rstrip("]")
        folder.mkdir(parents=True, exist_ok=True)
        if isinstance(nb, (bytes, str)):
            (folder / name).write_bytes(nb if isinstance(nb, bytes) else nb.encode())
        else:
            nbformat.write(nb, folder / name)
        return (folder / name).relative_to(course.root).as_posix()

    return write


@pytest.fixture
def check(jp_fetch):
    """POST /autograder/api/check; returns (status, answer)."""
    from tornado.httpclient import HTTPClientError

    async def post(path, **kwargs):
        try:
            response = await jp_fetch("autograder", "api", "check", method="POST",
                                      body=json.dumps({"path": path}),
                                      request_timeout=600, **kwargs)
        except HTTPClientError as exc:
            return exc.code, json.loads(exc.response.body) if exc.response else {}
        return response.code, json.loads(response.body)

    return post
