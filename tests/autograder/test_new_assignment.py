"""`autograder new NAME` makes an assignment that validates at once, in a fresh workspace,
and its hidden checks never reach a student."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.workspace.course import Course, available_assignments

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _cli(*args, cwd, assignments):
    env = {**os.environ, "AUTOGRADER_ASSIGNMENTS": str(assignments)}
    return subprocess.run([str(BIN / "autograder"), *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    root = tmp_path_factory.mktemp("newcomer")
    assignments = root / "assignments"
    assignments.mkdir()
    done = _cli("new", "demo-topic", cwd=root, assignments=assignments)
    assert done.returncode == 0, done.stderr
    return root, assignments, done.stdout


def test_new_writes_the_three_files_and_says_what_next(made):
    root, assignments, out = made
    assert (assignments / "demo-topic" / "assignment.toml").is_file()
    assert (assignments / "demo-topic" / "demo_topic.py").is_file()
    assert (assignments / "demo-topic" / "checks" / "test_softmax.py").is_file()
    assert "autograder validate demo-topic" in out and "docs/adding-an-assignment.md" in out


def test_the_new_assignment_validates(made):
    root, assignments, _ = made
    done = _cli("validate", "demo-topic", "--workers", "1", cwd=root, assignments=assignments)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "all expectations hold" in done.stdout
    for student in ("reference", "stub", "mutant-no-shift"):
        assert f"ok   {student}" in done.stdout


def _released_files(course, name):
    return [p for kind in ("source", "release") for p in course.path(kind, name).rglob("*")
            if p.is_file()]


def test_hidden_checks_never_reach_source_or_release(made, tmp_path):
    """The checks sit in the assignment's own folder; source/ and release/ never get them."""
    root, assignments, _ = made
    course = Course(tmp_path / "workspace", assignments)
    course.init()
    course.release("demo-topic")
    files = _released_files(course, "demo-topic")
    assert {p.name for p in files} >= {"demo_topic.ipynb"}
    assert not [p for p in files if "test_softmax" in p.name or "pytestmark" in p.read_text()]


def test_new_refuses_an_existing_or_odd_name(made):
    root, assignments, _ = made
    again = _cli("new", "demo-topic", cwd=root, assignments=assignments)
    assert again.returncode == 2 and "already exists" in again.stderr
    odd = _cli("new", "Demo Topic", cwd=root, assignments=assignments)
    assert odd.returncode == 2 and "lower-case letters" in odd.stderr


@pytest.mark.parametrize("name", available_assignments())
def test_built_in_checks_never_reach_source(name, tmp_path):
    """Every assignment of the course keeps its checks in ``<name>/checks/``; the
    instructor's ``source/`` (from which nbgrader builds the release) never gets them."""
    course = Course(tmp_path / "workspace")
    spec = course.spec(name)
    assert spec.checks_dir() == (spec.path / "checks").resolve()
    assert list(spec.checks_dir().glob("test_*.py"))
    target = course.build_source(spec)
    leaked = [p for p in target.rglob("*") if p.is_file() and (
        p.name.startswith("test_") or b"pytestmark" in p.read_bytes())]
    assert not leaked
