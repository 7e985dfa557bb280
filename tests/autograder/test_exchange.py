"""The instructor's and the student's day through nbgrader's exchange.

``autograder release`` publishes to the exchange inside the workspace, a student fetches
and submits with nbgrader's own commands, ``autograder collect`` gathers, ``autograder
grade`` grades; formgrader's Autograde (``nbgrader autograde``) runs our grader instead of
plain nbgrader, so it never replaces a sandboxed score by an unsandboxed one.
"""

import getpass
import io
import json
import os
import subprocess
import sys
from contextlib import redirect_stdout
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.submissions import fill_solutions
from autograder.grading.grade import grade
from autograder.grading.gradebook import read_result_file
from autograder.workspace.course import notebook_from_text

pytestmark = pytest.mark.slow
NAME = "00-tiny"


def _nbgrader(*args, cwd, course):
    bin_dir = Path(sys.executable).parent
    done = subprocess.run(
        [str(bin_dir / "nbgrader"), *args, "--course", "transformers-course",
         f"--Exchange.root={course.exchange}"],
        cwd=cwd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_fetch_submit_collect_grade_and_formgrader_autograde(tiny_course, tmp_path):
    course, student = tiny_course, getpass.getuser()
    home = tmp_path / "student"
    home.mkdir()
    _nbgrader("fetch_assignment", NAME, cwd=home, course=course)
    fetched = home / NAME / "tiny.ipynb"
    released = nbformat.read(fetched, as_version=4)
    source = notebook_from_text(course.spec(NAME).source_text("tiny"))
    nbformat.write(fill_solutions(released, source), fetched)  # the student solves it
    _nbgrader("submit", NAME, cwd=home, course=course)

    assert student in course.collect(NAME)
    grade(course, NAME, students=[student], workers=1, progress=False, log=lambda *a: None)
    result = read_result_file(course, NAME, student)
    cells = result["notebooks"]["tiny"]["cells"]
    assert cells["test_softmax"]["score"] == cells["test_softmax"]["max_score"] == 2

    # Formgrader's "Autograde" button: nbgrader autograde, run in the workspace.
    stamp = course.results_dir(NAME) / f"{student}.json"
    before = stamp.stat().st_mtime_ns
    done = subprocess.run(
        [str(Path(sys.executable).parent / "nbgrader"), "autograde", NAME, "--student", student,
         "--force"], cwd=course.root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert stamp.stat().st_mtime_ns > before, "our grader did not run"
    nb = nbformat.read(course.path("autograded", student, NAME, "tiny.ipynb"), 4)
    test_cell = next(c for c in nb.cells
                     if c.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax")
    assert "Hidden checks for `test_softmax`" in json.dumps(test_cell.outputs)
    with course.gradebook() as gb:
        assert gb.find_grade("test_softmax", "tiny", NAME, student).auto_score == 2

    # `autograder feedback` writes the pages and releases them to the exchange, where the
    # student's Fetch Feedback (nbgrader fetch_feedback) finds the page of their submission.
    from autograder.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["feedback", NAME, "--course", str(course.root)]) == 0
    assert "Feedback released to the exchange" in out.getvalue() and "1 student(s)" in \
        out.getvalue(), out.getvalue()
    _nbgrader("fetch_feedback", NAME, cwd=home, course=course)
    (page,) = (home / NAME / "feedback").glob("*/tiny.html")
    assert "Your results" in page.read_text()
    # The heading prints points as the summary does: "2 / 3", not nbgrader's "2.0 / 3.0".
    assert "(Score: 2 / 3)</h4>" in page.read_text()


def test_an_exchange_outside_a_private_workspace(tmp_path):
    """On a server students share, the workspace is private (chmod 700) and the exchange
    lives where every student can reach it: `autograder init --exchange DIR`. The
    workspace remembers it; release, fetch, submit and collect go through it."""
    from autograder.authoring.scaffold import new_assignment
    from autograder.workspace.course import Course, CourseError

    new_assignment(NAME, tmp_path / "assignments", title="Tiny: softmax")
    exchange = tmp_path / "srv" / "nbgrader" / "exchange"
    done = subprocess.run(
        [sys.executable, "-m", "autograder.cli", "init", "--course", str(tmp_path / "ws"),
         "--exchange", str(exchange)], capture_output=True, text=True, timeout=600,
        env={**os.environ, "AUTOGRADER_ASSIGNMENTS": str(tmp_path / "assignments")})
    assert done.returncode == 0, done.stderr
    assert f"exchange: {exchange}" in done.stdout
    course = Course(tmp_path / "ws")  # read back from the workspace's settings
    assert course.exchange == exchange and exchange.stat().st_mode & 0o777 == 0o777
    assert f"c.Exchange.root = {str(exchange)!r}" in (course.root / "nbgrader_config.py"
                                                       ).read_text()
    course.init()  # a later init keeps it
    assert Course(tmp_path / "ws").exchange == exchange
    course.root.chmod(0o700)
    course.release(NAME)
    assert (exchange / "transformers-course" / "outbound" / NAME / "tiny.ipynb").is_file()
    home = tmp_path / "student"
    home.mkdir()
    _nbgrader("fetch_assignment", NAME, cwd=home, course=course)
    _nbgrader("submit", NAME, cwd=home, course=course)
    assert getpass.getuser() in course.collect(NAME)
    assert not (course.root / "exchange").exists()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(CourseError, match="cannot create the exchange .*a-file/exchange"):
        Course(tmp_path / "ws2").init(exchange=tmp_path / "a-file" / "exchange")
