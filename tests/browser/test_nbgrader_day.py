"""End to end: nbgrader's own screens in JupyterLab on `make lab`'s set-up, real grading.

The server is rooted in a course workspace (where `make lab` starts it, beside the
workspace's ``nbgrader_config.py``) with the made example assignment ``00-tiny``
released to the workspace's exchange. In headless Chromium:

1. the student opens Nbgrader > Assignment List, fetches 00-tiny, solves it and submits;
2. the instructor runs ``autograder roster``, ``autograder collect`` and ``autograder
   grade`` (sandbox, hidden checks);
3. formgrader opens with no error, lists the submission with the student's name and
   score, and its Autograde button runs our grader again (the results file is
   rewritten) without changing the score behind our back.
"""

from __future__ import annotations

import getpass
import io
import re
from contextlib import redirect_stdout

import nbformat
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NAME = "00-tiny"
GRADE_TIMEOUT_MS = 300_000
# Graded automatically; the written answer (1 point) waits for a person.
GRADED = re.compile("needs manual grading|graded")


@pytest.fixture(scope="module")
def lab_root_before_start():
    """The workspace exists before the server starts, as with `make lab`: formgrader reads
    nbgrader_config.py (its page template, MathJax served locally) once, at start."""
    return _make_workspace


@pytest.fixture(scope="module")
def workspace(lab_server):
    from autograder.workspace.course import Course

    return Course(lab_server.root_dir, lab_server.root_dir.parent / "assignments")


def _make_workspace(root):
    from autograder.authoring.scaffold import new_assignment
    from autograder.workspace.course import Course

    assignments = root.parent / "assignments"
    new_assignment(NAME, assignments, title="Tiny: softmax")
    # A formula for formgrader to draw (offline: MathJax from the server itself).
    source = assignments / NAME / "tiny.py"
    source.write_text(source.read_text().replace(
        "softmax over the last axis.", "softmax over the last axis, "
        "$\\mathrm{softmax}(x)_i = e^{x_i} / \\sum_j e^{x_j}$.", 1))
    course = Course(root, assignments)
    course.init()
    course.release(NAME)  # and published to the exchange


def _cli(*args) -> str:
    from autograder.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(args))
    assert code == 0, out.getvalue()
    return out.getvalue()


def _solve(course, path) -> None:
    from autograder.authoring.submissions import fill_solutions
    from autograder.workspace.course import notebook_from_text

    released = nbformat.read(path, as_version=4)
    source = notebook_from_text(course.spec(NAME).source_text("tiny"))
    nbformat.write(fill_solutions(released, source), path)


def _open_assignment_list(page, lab_server) -> None:
    page.goto(f"{lab_server.url}/lab?reset&token={lab_server.token}",
              wait_until="domcontentloaded", timeout=60_000)
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Nbgrader").first.click(
        timeout=60_000)
    page.locator(".lm-Menu-item:visible", has_text="Assignment List").first.click()


def test_fetch_submit_collect_grade_and_formgrader(chromium, lab_server, workspace, tmp_path):
    course, student = workspace, getpass.getuser()
    page = chromium.new_page()
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text))
    try:
        # The student: fetch, solve, submit, all from the Assignments tab.
        _open_assignment_list(page, lab_server)
        released = page.locator("#released_assignments_list")
        released.get_by_text(NAME).wait_for(timeout=60_000)
        released.get_by_role("button", name="Fetch").click()
        fetched = page.locator("#fetched_assignments_list")
        fetched.get_by_text(NAME).first.wait_for(timeout=60_000)
        notebook = lab_server.root_dir / NAME / "tiny.ipynb"
        assert notebook.is_file(), "Fetch did not put the notebook beside the workspace"
        _solve(course, notebook)
        fetched.get_by_role("button", name="Submit").click()
        page.locator("#submitted_assignments_list").get_by_text(" UTC").first.wait_for(
            timeout=60_000)
        page.screenshot(path=str(tmp_path / "assignment-list.png"))

        # The instructor: the class list, then collect and grade with our CLI.
        roster = tmp_path / "class.csv"
        roster.write_text(f"id,first_name,last_name\n{student},Ada,Lovelace\n")
        _cli("roster", str(roster), "--course", str(course.root))
        assert student in _cli("collect", NAME, "--course", str(course.root))
        _cli("grade", NAME, "--course", str(course.root), "--workers", "1", "--quiet")
        result = course.results_dir(NAME) / f"{student}.json"
        graded_at = result.stat().st_mtime_ns

        # Formgrader: it opens, shows the graded submission and its score.
        page.goto(f"{lab_server.url}/formgrader?token={lab_server.token}",
                  wait_until="domcontentloaded", timeout=60_000)
        page.get_by_text(NAME).first.wait_for(timeout=60_000)
        assert "encountered an error" not in page.inner_text("body")
        page.goto(f"{lab_server.url}/formgrader/manage_submissions/{NAME}"
                  f"?token={lab_server.token}", wait_until="domcontentloaded", timeout=60_000)
        row = page.locator("#main-table tr", has_text=student)
        row.locator(".status", has_text=GRADED).wait_for(timeout=60_000)
        assert "Lovelace, Ada" in row.inner_text(), "formgrader does not show the roster's name"
        score = row.locator(".score").inner_text()
        assert score.startswith("2"), f"formgrader shows {score!r}, the grader gave 2 of 2"
        page.screenshot(path=str(tmp_path / "formgrader-before.png"))

        # Its Autograde button runs `autograder grade --force`: the results file is
        # written again and the score stays the grader's.
        row.locator(".autograde a").click()
        page.wait_for_function(
            "() => !document.querySelector('#main-table .autograde .glyphicon-refresh')"
            " && /needs manual grading|graded/.test("
            "document.querySelector('#main-table .status').innerText)",
            timeout=GRADE_TIMEOUT_MS, polling=500)
        assert result.stat().st_mtime_ns > graded_at, "formgrader's Autograde skipped our grader"
        page.reload(wait_until="domcontentloaded")
        row = page.locator("#main-table tr", has_text=student)
        row.locator(".status", has_text=GRADED).wait_for(timeout=60_000)
        assert row.locator(".score").inner_text() == score
        page.screenshot(path=str(tmp_path / "formgrader-after.png"))

        # Its grading page draws the maths with MathJax from this server, not a CDN.
        with course.gradebook() as gb:
            submission = gb.find_submission_notebook("tiny", NAME, student).id
        page.goto(f"{lab_server.url}/formgrader/submissions/{submission}/"
                  f"?token={lab_server.token}", wait_until="domcontentloaded", timeout=60_000)
        try:
            page.locator(".MathJax").first.wait_for(timeout=60_000)
        except Exception:
            page.screenshot(path=str(tmp_path / "formgrader-maths-failure.png"))
            print("maths:", [line for line in page.content().splitlines() if "athJax" in line],
                  chromium.blocked, console)
            raise
        assert "\\mathrm{softmax}" not in page.inner_text("#notebook")
        page.screenshot(path=str(tmp_path / "formgrader-maths.png"))
        print(f"screenshots: {tmp_path}")
        assert not chromium.blocked, f"browser tried to leave loopback: {chromium.blocked}"
    finally:
        page.close()
