"""The lectures of ``course/course.toml`` run, top to bottom, as a student runs them.

Each lecture listed in the outline (whatever its number: lectures added later are picked
up from the file) is built the way ``autograder init`` builds it and executed in a real
Jupyter kernel with nbclient: widgets built (``TOOLKIT_HEADLESS`` unset), figures drawn
to PNG by matplotlib's inline backend (Agg), from a scratch working directory. A lecture
that raises anywhere fails with the cell and the error. The lectures are built around
the widgets, so each must show at least one, and every widget image it shows must hold a
drawn PNG (read from the widget state nbclient saves), never the line a widget shows for
an exercise that is not written. The cheaper checks (the house rules of every notebook)
run without a kernel.
"""

from __future__ import annotations

import ast
import base64

import nbformat
import pytest
from IPython.core.inputtransformer2 import TransformerManager
from nbclient import NotebookClient

from autograder.workspace.course import Course
from autograder.workspace.outline import COURSE_FILE, lecture_notebook, load_outline
from autograder.workspace.release_steps import CONTINUE_TAG

OUTLINE = load_outline(COURSE_FILE)
LECTURES = list(OUTLINE.lectures)
IDS = [lecture.stem for lecture in LECTURES]
WIDGET = "application/vnd.jupyter.widget-view+json"
#: Seconds one cell may take; the lectures keep their compute to a few seconds on a CPU.
CELL_TIMEOUT = 180


def built(lecture) -> nbformat.NotebookNode:
    """The lecture as ``autograder init`` builds it into the workspace."""
    return lecture_notebook(OUTLINE.lecture_source(lecture))


def code_cells(nb) -> list:
    return [cell for cell in nb.cells if cell.cell_type == "code"]


def widget_states(nb) -> list[dict]:
    """The widget models an executed notebook saved (nbclient stores their last state)."""
    saved = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {})
    return list(saved.get("state", {}).values())


def drawn_images(states) -> list[bytes]:
    """The PNG bytes of every widget image (ipywidgets.Image keeps them in a buffer)."""
    return [base64.b64decode(buffer["data"]) for model in states
            if model["model_name"] == "ImageModel"
            for buffer in model.get("buffers", []) if buffer.get("path") == ["value"]]


def test_the_outline_lists_lectures():
    assert LECTURES, f"{COURSE_FILE} lists no lectures"


@pytest.mark.parametrize("lecture", LECTURES, ids=IDS)
def test_lecture_follows_the_notebook_rules(lecture):
    """First code cell calls friendly_errors(); cells parse; a title names the lecture."""
    nb = built(lecture)
    cells = code_cells(nb)
    assert cells, f"{lecture.notebook} has no code cell"
    assert all(CONTINUE_TAG in c.metadata.get("tags", []) for c in cells[1:]), (
        "Run All must reach the end of a lecture: every code cell after the first is tagged")
    assert "friendly_errors()" in cells[0].source, (
        f"{lecture.notebook}: the first code cell must call toolkit.notebook.friendly_errors()")
    for i, cell in enumerate(cells):
        try:
            ast.parse(TransformerManager().transform_cell(cell.source))  # magics too
        except SyntaxError as exc:
            pytest.fail(f"{lecture.notebook}, code cell {i}: {exc}")
    first_markdown = next(c.source for c in nb.cells if c.cell_type == "markdown")
    assert first_markdown.startswith("# "), f"{lecture.notebook} should open with a # title"


def test_init_builds_every_lecture_into_the_workspace(tmp_path):
    paths = Course(tmp_path / "workspace").build_lectures()
    assert [p.name for p in paths] == [f"{lecture.stem}.ipynb" for lecture in LECTURES]
    for path, lecture in zip(paths, LECTURES):
        def shape(cells):  # cell ids are new at every conversion
            return [(c.cell_type, c.source, c.metadata.get("tags")) for c in cells]

        assert shape(nbformat.read(path, as_version=4).cells) == shape(built(lecture).cells)


@pytest.mark.slow
@pytest.mark.parametrize("lecture", LECTURES, ids=IDS)
def test_lecture_runs_top_to_bottom(lecture, tmp_path, monkeypatch):
    monkeypatch.delenv("TOOLKIT_HEADLESS", raising=False)  # build the widgets for real
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    # OpenMP threads that spin while waiting make small CPU training steps several times
    # slower on a busy machine; waiting passively costs nothing on an idle one.
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    nb = built(lecture)
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}})
    client.execute()  # the cells are tagged to go on past an error: look for them below
    errors = [f"code cell {i}: {o.ename}: {o.evalue}" for i, cell in enumerate(code_cells(nb))
              for o in cell.outputs if o.output_type == "error"]
    assert not errors, f"{lecture.notebook} failed:\n" + "\n".join(errors)
    outputs = [out for cell in code_cells(nb) for out in cell.outputs]
    assert any(WIDGET in o.get("data", {}) for o in outputs), (
        f"{lecture.notebook} showed no widget")
    states = widget_states(nb)
    images = drawn_images(states)
    assert images and all(png.startswith(b"\x89PNG") for png in images), (
        f"{lecture.notebook}: a widget image holds no drawn figure")
    unwritten = [m["state"]["value"] for m in states if m["model_name"] == "HTMLModel"
                 and "not written yet" in str(m["state"].get("value", ""))]
    assert not unwritten, f"{lecture.notebook}: a widget needs an exercise: {unwritten[0]}"
