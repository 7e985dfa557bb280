"""End to end: the student's lab (`make lab LAB=student`) shows what a student sees.

The course workspace lies beside the lab's root, as course-workspace/ lies beside
course-student/ in a checkout; the root is laid out by
:func:`autograder.student.lab_wheel.prepare_student_folder` and the server started with its
``.lab`` folder on ``JUPYTER_CONFIG_PATH``, as the Makefile does. In headless Chromium:
the file browser holds the lectures and nothing of the instructor's (no ``source/``,
gradebook, ``submitted/`` or ``autograded/``); formgrader is off; the Course panel links the
student's copies of the lectures, its Open fetches the assignment into the lab, and
Check my work grades it against the workspace's hidden checks.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ASSIGNMENT = "01-attention"
PANEL = "#transformers-course-panel"
BOX = f'{PANEL} section[data-assignment="{ASSIGNMENT}"]'
INSTRUCTOR_ONLY = {"source", "gradebook.db", "submitted", "autograded", "release", "feedback",
                   "exchange"}


@pytest.fixture(scope="module")
def lab_server_config():
    return {"CourseLab": {"cooldown_seconds": 0}}


@pytest.fixture(scope="module")
def lab_root_before_start():
    def prepare(root):
        from autograder.student.lab_wheel import prepare_student_folder
        from autograder.workspace.course import Course

        course = Course(root.parent / "course-workspace")
        course.init()
        course.release(ASSIGNMENT)
        course.build_lectures()
        prepare_student_folder(course, root)
        return {"JUPYTER_CONFIG_PATH": str(root / ".lab")}

    return prepare


def test_the_student_lab_shows_lectures_and_fetched_work_and_no_answer_key(
        chromium, lab_server, tmp_path):
    root = lab_server.root_dir
    listed = {item["name"] for item in lab_server.api("/api/contents")["content"]}
    assert "lectures" in listed and not listed & INSTRUCTOR_ONLY, listed
    page = chromium.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # Formgrader is the instructor's: off here, server and menu.
        with pytest.raises(Exception, match="404"):
            lab_server.api("/formgrader/api/assignments")
        page.goto(f"{lab_server.url}/lab?reset&token={lab_server.token}",
                  wait_until="domcontentloaded", timeout=60_000)
        names = page.locator(".jp-DirListing-item .jp-DirListing-itemName")
        names.first.wait_for(timeout=60_000)
        shown = set(names.all_inner_texts())
        assert "lectures" in shown and not shown & INSTRUCTOR_ONLY, shown
        page.screenshot(path=str(tmp_path / "student-lab-files.png"))
        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Nbgrader").first.click()
        menu = page.locator(".lm-Menu:visible").first.inner_text()
        assert "Assignment List" in menu and "Formgrader" not in menu, menu
        page.keyboard.press("Escape")

        # The Course panel: lectures open from the student's copies; Open fetches.
        page.locator(f'.lm-TabBar-tab[data-id="{PANEL[1:]}"]').first.click()
        lecture = page.locator(f"{PANEL} .tc-lecture.tc-clickable").first
        lecture.click(timeout=60_000)
        page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text=".ipynb").first.wait_for(
            timeout=60_000)
        page.locator(f"{BOX} .tc-assignmentHead").click()
        page.locator(f"{BOX} .tc-actions button", has_text="Open").click()
        page.locator(".lm-DockPanel-tabBar .lm-TabBar-tabLabel").get_by_text(
            "attention.ipynb", exact=True).wait_for(timeout=60_000)
        assert (root / ASSIGNMENT / "attention.ipynb").is_file()

        # Check my work grades the fetched copy with the workspace's hidden checks.
        page.locator(f"{BOX} .tc-checkButton").click()
        page.wait_for_function(
            """(box) => { const e = document.querySelector(
                 `${box} [data-exercise="test_attention_weights"]`);
               return e && e.dataset.status === 'failing'; }""",
            arg=BOX, timeout=240_000, polling=250)
        page.locator(PANEL).screenshot(path=str(tmp_path / "student-lab-panel.png"))
        listed = {item["name"] for item in lab_server.api("/api/contents")["content"]}
        assert ASSIGNMENT in listed and not listed & INSTRUCTOR_ONLY, listed
        assert not chromium.blocked, f"browser tried to leave loopback: {chromium.blocked}"
        assert not errors, errors
        print(f"screenshots: {tmp_path}")
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        print(f"failure screenshot: {tmp_path / 'failure.png'}\nserver log:\n"
              f"{lab_server.log_tail()}")
        raise
    finally:
        page.close()
