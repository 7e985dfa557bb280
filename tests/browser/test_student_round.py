"""End to end: a student's whole round on one copy of the work, in a real JupyterLab.

The server is rooted in a course workspace with 01-attention released to the exchange
(as `make lab` makes it). In headless Chromium the student:

1. opens the assignment from the Course panel: the panel fetches it as nbgrader's
   Assignment List would, and opens that copy (``01-attention/attention.ipynb``);
2. picks an exercise in the panel: the notebook scrolls to the cell to write in and
   selects it;
3. presses the Assignment List's Submit too early: a dialog names the answers not
   written yet, and "Keep working" sends nothing;
4. writes the work (the solved notebook, then a line typed in the browser), checks it
   from the panel, changes it and checks again within the cool-down: the panel says when
   to try again and stays usable;
5. submits from the Assignment List; the instructor's `autograder collect` gets exactly
   that work, grades it and runs `autograder feedback`, which releases the pages;
6. presses "Fetch Feedback" and gets the page.

Screenshots of each step go to the test's tmp_path (printed at the end).
"""

from __future__ import annotations

import getpass
import io
import json
from contextlib import redirect_stdout

import nbformat
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ASSIGNMENT = "01-attention"
COPY = f"{ASSIGNMENT}/attention.ipynb"
PANEL = "#transformers-course-panel"
BOX = f'{PANEL} section[data-assignment="{ASSIGNMENT}"]'
CHECK_TIMEOUT_MS = 240_000
TYPED = "# written in the browser"


@pytest.fixture(scope="module")
def lab_server_config():
    # A cool-down long enough that the second check of changed work is refused.
    return {"CourseLab": {"cooldown_seconds": 600}}


@pytest.fixture(scope="module")
def workspace(lab_server):
    from autograder.authoring.submissions import make_class
    from autograder.workspace.course import Course

    course = Course(lab_server.root_dir)
    course.init()
    course.release(ASSIGNMENT)  # and to the exchange
    solved = make_class(course, course.spec(ASSIGNMENT))["reference"]["attention"]
    return course, solved


def _cli(*args) -> str:
    from autograder.cli import main

    out = io.StringIO()
    with redirect_stdout(out):
        code = main(list(args))
    assert code == 0, out.getvalue()
    return out.getvalue()


def _menu(page, *items) -> None:
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text=items[0]).first.click()
    for item in items[1:-1]:
        page.locator(".lm-Menu-item:visible", has_text=item).first.hover()
    page.locator(".lm-Menu-item:visible", has_text=items[-1]).first.click()


def _notebook_tab(page) -> None:
    page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="attention.ipynb").first.click()


def _active_cell(page) -> dict:
    """The selected cell of the notebook in view: its text, and whether it is on screen."""
    return page.evaluate("""() => {
        const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
        const cell = panel && panel.querySelector('.jp-Cell.jp-mod-active');
        if (!cell) return null;
        const view = panel.querySelector('.jp-NotebookPanel-notebook').getBoundingClientRect();
        const box = cell.getBoundingClientRect();
        return {text: cell.innerText, top: box.top - view.top, height: view.height,
                onScreen: box.top >= view.top - 2 && box.top < view.bottom - 40};
    }""")


def _layout(page) -> dict:
    """How far the panel's content runs past its width (px), and the contrast ratio of the
    error box's text on its background (WCAG: 4.5 or more reads well)."""
    return page.evaluate("""(panel) => {
        const node = document.querySelector(panel);
        const box = node.querySelector('.tc-problem');
        // rgb(r, g, b) in 0..255, or color(srgb r g b) in 0..1 (what color-mix gives)
        const rgb = c => c.match(/[\\d.]+/g).slice(0, 3).map(Number)
            .map(v => c.startsWith('color(') ? v * 255 : v);
        const lum = c => { const [r, g, b] = rgb(c).map(v => { v /= 255;
            return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); });
            return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
        let contrast = null;
        if (box) {
            const style = getComputedStyle(box);
            const [a, b] = [lum(style.color), lum(style.backgroundColor)];
            contrast = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
        }
        return {overflow: node.scrollWidth - node.clientWidth, width: node.clientWidth,
                contrast};
    }""", PANEL)


def test_open_write_check_submit_collect_and_fetch_feedback(chromium, lab_server, workspace,
                                                            tmp_path):
    course, solved = workspace
    student = getpass.getuser()
    copy = lab_server.root_dir / ASSIGNMENT / "attention.ipynb"
    page = chromium.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    shots = []

    def shot(name, locator=None):
        path = tmp_path / f"{name}.png"
        (locator or page).screenshot(path=str(path))
        shots.append(path)

    try:
        page.goto(f"{lab_server.url}/lab?reset&token={lab_server.token}",
                  wait_until="domcontentloaded", timeout=60_000)
        page.locator(f'.lm-TabBar-tab[data-id="{PANEL[1:]}"]').first.click(timeout=60_000)
        page.locator(f"{BOX} .tc-assignmentHead").click(timeout=60_000)

        # 1. Open from the panel: the fetched copy, fetched now.
        assert not copy.exists()
        page.locator(f"{BOX} .tc-actions button", has_text="Open").click()
        page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="attention.ipynb"
                     ).first.wait_for(timeout=60_000)
        assert copy.is_file(), "Open did not fetch the student's copy"
        page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell").first.wait_for(
            timeout=60_000)

        # 2. An exercise from the panel: scrolled to, its answer cell selected.
        page.locator(f'{BOX} [data-exercise="test_decoder_block"] .tc-exerciseRow').click()
        page.wait_for_function("""() => {
            const c = document.querySelector(
              '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Cell.jp-mod-active');
            return c && c.innerText.includes('class DecoderBlock'); }""", timeout=30_000)
        page.wait_for_timeout(600)
        cell = _active_cell(page)
        assert cell["onScreen"], cell
        assert "NotImplementedError" in cell["text"], "not the cell the student writes in"
        shot("1-exercise-revealed")

        # 3. Submit too early: the dialog names what is not written; nothing is sent.
        _menu(page, "Nbgrader", "Assignment List")
        fetched = page.locator("#fetched_assignments_list")
        fetched.get_by_text(ASSIGNMENT).first.wait_for(timeout=60_000)
        fetched.get_by_role("button", name="Submit").click()
        dialog = page.locator(".jp-Dialog")
        dialog.wait_for(timeout=30_000)
        assert "not written yet" in dialog.inner_text(), dialog.inner_text()
        shot("2-submit-asks-first")
        dialog.get_by_role("button", name="Keep working").click()
        inbound = course.exchange / "transformers-course" / "inbound"
        assert not any(inbound.glob(f"{student}+{ASSIGNMENT}+*")), "submitted anyway"

        # 4. Write the work (the solved notebook, reloaded; then a line typed here).
        nbformat.write(solved, copy)
        _notebook_tab(page)
        _menu(page, "File", "Reload Notebook from Disk")
        page.locator(".jp-Dialog").get_by_role("button", name="Reload").click()
        page.locator(".jp-Dialog").wait_for(state="detached", timeout=30_000)
        page.locator(f'{BOX} [data-exercise="test_masks"] .tc-exerciseRow').click()
        page.wait_for_timeout(800)
        assert "NotImplementedError" not in _active_cell(page)["text"]
        page.keyboard.press("Enter")
        page.keyboard.press("Control+End")
        page.keyboard.type(f"\n{TYPED}\n")
        page.keyboard.press("Escape")

        # ...check it from the panel: everything passes, the written answer waits.
        check = page.locator(f"{BOX} .tc-checkButton")
        check.click()
        page.wait_for_function(
            """(box) => ['test_attention_weights', 'test_masks', 'test_multi_head_attention',
                       'test_decoder_block'].every(n => {
               const e = document.querySelector(`${box} [data-exercise="${n}"]`);
               return e && e.dataset.status === 'passing'; })""",
            arg=BOX, timeout=CHECK_TIMEOUT_MS, polling=250)
        assert TYPED in copy.read_text(), "the check did not save the notebook first"

        # ...change it and check again at once: refused for the cool-down, and the panel
        # says when to try again and stays usable.
        page.locator(f'{BOX} [data-exercise="test_masks"] .tc-exerciseRow').click()
        page.wait_for_timeout(500)
        page.keyboard.press("Enter")
        page.keyboard.press("Control+End")
        page.keyboard.type("# and once more\n")
        page.keyboard.press("Escape")
        check.click()
        problem = page.locator(f"{BOX} .tc-problem")
        problem.wait_for(timeout=60_000)
        assert "You can check again at" in problem.inner_text(), problem.inner_text()
        page.wait_for_timeout(500)
        assert page.locator(f"{BOX} .tc-progress").count() == 0, "the panel still says checking"
        assert check.is_enabled() and page.locator(f"{BOX} .tc-actions button",
                                                    has_text="Open").is_enabled()
        assert "Check my work" in check.inner_text()
        shot("3-panel-after-cooldown", page.locator(PANEL))
        # At the default side bar width nothing runs off to the side, in either theme, and
        # the error box's text stays readable.
        assert _layout(page)["overflow"] <= 1, _layout(page)
        assert _layout(page)["contrast"] >= 4.5, _layout(page)
        _menu(page, "Settings", "Theme", "JupyterLab Dark")
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'false'",
                               timeout=60_000)
        page.wait_for_timeout(500)
        assert _layout(page)["overflow"] <= 1 and _layout(page)["contrast"] >= 4.5, \
            _layout(page)
        shot("3-panel-after-cooldown-dark", page.locator(PANEL))
        _menu(page, "Settings", "Theme", "JupyterLab Light")
        page.wait_for_function("() => document.body.dataset.jpThemeLight === 'true'",
                               timeout=60_000)

        # 5. Submit from the Assignment List: written and checked, so no question.
        page.locator(".lm-DockPanel-tabBar .lm-TabBar-tab", has_text="Assignments").first.click()
        fetched.get_by_role("button", name="Submit").click()
        page.locator("#submitted_assignments_list").get_by_text(" UTC").first.wait_for(
            timeout=60_000)
        assert page.locator(".jp-Dialog").count() == 0
        shot("4-submitted")

        roster = tmp_path / "class.csv"
        roster.write_text(f"id,first_name,last_name\n{student},Ada,Lovelace\n")
        _cli("roster", str(roster), "--course", str(course.root))
        out = _cli("collect", ASSIGNMENT, "--course", str(course.root))
        assert student in course.students_with_submissions(ASSIGNMENT)
        assert f"grade {ASSIGNMENT} --course {course.root}" in out, out
        submitted = course.path("submitted", student, ASSIGNMENT, "attention.ipynb").read_text()
        assert TYPED in submitted and "# and once more" in submitted
        _cli("grade", ASSIGNMENT, "--course", str(course.root), "--workers", "1", "--quiet")
        out = _cli("feedback", ASSIGNMENT, "--course", str(course.root))
        assert "Feedback released to the exchange" in out, out

        # 6. Fetch Feedback delivers the page.
        page.reload(wait_until="domcontentloaded")
        _menu(page, "Nbgrader", "Assignment List")
        page.locator("#submitted_assignments_list").get_by_role(
            "button", name="Fetch Feedback").first.click(timeout=60_000)
        page.wait_for_function(
            "() => document.querySelector('#submitted_assignments_list')"
            ".innerText.includes('view feedback')", timeout=60_000)
        pages = list((lab_server.root_dir / ASSIGNMENT / "feedback").glob("*/attention.html"))
        assert len(pages) == 1 and "Your results" in pages[0].read_text()
        shot("5-feedback-fetched")

        results = json.loads((course.root / "check-my-work" / f"{student}.json").read_text())
        assert results[ASSIGNMENT]["attention"]["path"] == COPY
        assert not chromium.blocked, f"browser tried to leave loopback: {chromium.blocked}"
        assert not errors, errors
        print("screenshots:", *shots)
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        print(f"failure screenshot: {tmp_path / 'failure.png'}\npage errors: {errors}\n"
              f"server log:\n{lab_server.log_tail()}")
        raise
    finally:
        page.close()
