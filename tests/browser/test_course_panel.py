"""End to end: the Course panel and "Check my work" in a real JupyterLab, real grading.

The server's root is a course workspace with 01-attention released (as `make lab` makes
it). In headless Chromium the test opens the released notebook (the stub), checks it
from the notebook toolbar, sees the exercises turn to failing with a hint, then opens a
solved copy, checks that, and sees them turn to passing (the written answer waits for a
person). Screenshots of the panel, light and dark theme, go to docs/images/.
"""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

ASSIGNMENT = "01-attention"
AUTO = ["test_attention_weights", "test_masks", "test_multi_head_attention",
        "test_decoder_block"]
#: The written answers of 01, which a person grades.
WRITTEN = ["families_question", "order_and_cost_question"]
# The screenshot the README and docs/ show is refreshed only on request
# (TOOLKIT_UPDATE_SCREENSHOTS=1), so a test run never changes a tracked file.
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
UPDATE_SCREENSHOTS = os.environ.get("TOOLKIT_UPDATE_SCREENSHOTS") == "1"
PANEL = "#transformers-course-panel"
CHECK_TIMEOUT_MS = 240_000


@pytest.fixture(scope="module")
def lab_server_config():
    return {"CourseLab": {"cooldown_seconds": 0}}


@pytest.fixture(scope="module")
def workspace(lab_server):
    """The server's root becomes a course workspace; a solved copy waits in solved/, one
    with a mistake in its first exercise in mistaken/."""
    from autograder.authoring.submissions import fill_solutions, make_class, released_notebook
    from autograder.workspace.course import Course, notebook_from_text

    course = Course(lab_server.root_dir)
    course.init()
    course.release(ASSIGNMENT)
    spec = course.spec(ASSIGNMENT)
    solved = make_class(course, spec)["reference"]["attention"]
    (lab_server.root_dir / "solved").mkdir()
    nbformat.write(solved, lab_server.root_dir / "solved" / "attention.ipynb")
    # A mistake no named mutant describes: the mask inverted inside attention_weights.
    text = spec.source_text("attention").replace(
        'scores = scores.masked_fill(~mask, float("-inf"))',
        'scores = scores.masked_fill(mask, float("-inf"))')
    mistaken = fill_solutions(released_notebook(course, spec, "attention"),
                              notebook_from_text(text))
    (lab_server.root_dir / "mistaken").mkdir()
    nbformat.write(mistaken, lab_server.root_dir / "mistaken" / "attention.ipynb")
    return course


def _statuses(page) -> dict:
    return page.evaluate(
        """() => Object.fromEntries(Array.from(document.querySelectorAll(
             '#transformers-course-panel [data-exercise]')).map(
             e => [e.dataset.exercise, e.dataset.status]))""")


def _open_and_check(page, lab_server, path: str) -> None:
    # ?reset: a clean layout with this notebook only (no tabs restored from before)
    page.goto(f"{lab_server.url}/lab/tree/{path}?reset&token={lab_server.token}",
              wait_until="domcontentloaded", timeout=60_000)
    button = page.locator(".jp-NotebookPanel:not(.lm-mod-hidden) .tc-CheckButton button")
    button.wait_for(state="visible", timeout=60_000)
    button.click()
    page.locator(".tc-CheckButton.tc-mod-checking").first.wait_for(timeout=10_000)


def _widen_panel(page, pixels: int = 160) -> None:
    """Drag the handle between the side bar and the notebook, as a reader would."""
    handle = page.locator("#jp-main-split-panel > .lm-SplitPanel-handle:visible").first
    box = handle.bounding_box()
    x, y = box["x"] + box["width"] / 2, box["y"] + box["height"] / 2
    page.mouse.move(x, y)
    page.mouse.down()
    page.mouse.move(x + pixels, y, steps=5)
    page.mouse.up()


def _wait_for(page, statuses: dict) -> None:
    page.wait_for_function(
        """(want) => Object.entries(want).every(([name, status]) => {
             const e = document.querySelector(
               `#transformers-course-panel [data-exercise="${name}"]`);
             return e && e.dataset.status === status; })""",
        arg=statuses, timeout=CHECK_TIMEOUT_MS, polling=250)


def test_check_my_work_turns_statuses_from_failing_to_passing(chromium, lab_server,
                                                              workspace, tmp_path):
    page = chromium.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    try:
        # The panel is there, lists the course, and nothing is checked yet.
        _open_and_check(page, lab_server, f"release/{ASSIGNMENT}/attention.ipynb")
        panel = page.locator(PANEL)
        panel.wait_for(state="visible", timeout=60_000)
        assert "Transformers, built by hand" in panel.inner_text()
        _wait_for(page, {name: "failing" for name in AUTO})
        _widen_panel(page)
        stub = _statuses(page)
        # A written answer waits for a person; unanswered, it says so, as exercises do.
        assert stub["families_question"] == "waiting", stub
        # Each unwritten exercise says so once, naming its functions, not under every check.
        shared = [t.inner_text() for t in page.locator(f"{PANEL} .tc-shared").all()]
        assert len(shared) == len(AUTO) + len(WRITTEN), shared
        assert all(t.startswith("not written yet: ") for t in shared), shared
        assert page.locator(f"{PANEL} .tc-check").count() == 0
        panel.screenshot(path=str(tmp_path / "course-panel-stub.png"))

        # A mistake in an early exercise: the later ones that call it say to fix it first.
        _open_and_check(page, lab_server, "mistaken/attention.ipynb")
        _wait_for(page, {"test_attention_weights": "failing", "test_masks": "passing",
                         "test_multi_head_attention": "failing",
                         "test_decoder_block": "failing"})
        fix_first = page.locator(f'{PANEL} [data-exercise="test_multi_head_attention"] '
                                 '.tc-diagnosis')
        assert fix_first.inner_text().startswith(
            "This exercise calls attention_weights, scaled_dot_product_attention")
        assert fix_first.locator("code").first.inner_text() == "attention_weights"
        _widen_panel(page)
        panel.screenshot(path=str(tmp_path / "course-panel-fix-first.png"))

        _open_and_check(page, lab_server, "solved/attention.ipynb")
        _wait_for(page, {**{name: "passing" for name in AUTO},
                         "families_question": "waiting"})
        assert "11 / 11" in panel.inner_text()
        _widen_panel(page)
        shot = (IMAGES if UPDATE_SCREENSHOTS else tmp_path) / "course-panel.png"
        panel.screenshot(path=str(shot))

        # The dark theme, from the Settings menu: same panel, theme variables only.
        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Settings").first.click()
        page.locator(".lm-Menu-item:visible", has_text="Theme").first.hover()
        page.locator(".lm-Menu-item:visible", has_text="JupyterLab Dark").first.click()
        page.wait_for_function(
            "() => document.body.dataset.jpThemeLight === 'false'", timeout=60_000)
        _wait_for(page, {name: "passing" for name in AUTO})
        page.wait_for_timeout(500)  # the theme's stylesheet settles
        panel.screenshot(path=str(tmp_path / "course-panel-dark.png"))
        print(f"screenshots: {shot}, {tmp_path}")

        assert not chromium.blocked, f"browser tried to leave loopback: {chromium.blocked}"
        assert not errors, errors
    except Exception:
        page.screenshot(path=str(tmp_path / "failure.png"))
        print(f"failure screenshot: {tmp_path / 'failure.png'}\nstatuses: {_statuses(page)}\n"
              f"page errors: {errors}\nserver log:\n{lab_server.log_tail()}")
        raise
    finally:
        page.close()

