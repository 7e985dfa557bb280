"""End to end: a student opens each freshly released notebook and presses Run All.

The server's root is a course workspace with every assignment of course/course.toml
released (as `make lab` makes it). In headless Chromium the test opens each released
notebook, untouched (every exercise still a stub), chooses Run > Run All Cells and waits
for the kernel to finish. Then:

* Run All reached the last code cell: every code cell ran (it has an execution count);
  the stubs' cells are tagged ``raises-exception``, so their error does not stop the run.
* Every cell that builds a widget shows a live widget view, drawn, with no "Error
  displaying widget" and no traceback.
* Every error is one short line saying which exercise is missing (from the named stub
  and ``toolkit.notebook.friendly_errors``), never a Python traceback or a cascade
  of ``NameError``; where the line wraps, it wraps between words (the extension's style
  sheet; JupyterLab's own cuts output text at any character).

A screenshot of each notebook's last screen goes to the test's tmp dir.
"""

from __future__ import annotations

import ast
import json

import pytest

from toolkit.notebook import MARK

pytestmark = [pytest.mark.slow, pytest.mark.browser]

RUN_ALL_TIMEOUT_MS = 420_000
KERNEL_IDLE_JS = """
() => { const bar = document.querySelector('#jp-main-statusbar');
        const text = bar ? bar.innerText : '';
        return !text.includes('No Kernel') && /\\| Idle/.test(text); }
"""
# One record per code cell of the visible notebook: prompt and what its output shows.
CELLS_JS = """
() => Array.from(document.querySelectorAll(
    '.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-CodeCell')).map(cell => {
  const out = cell.querySelector('.jp-OutputArea');
  const errors = out ? Array.from(out.querySelectorAll(
      '[data-mime-type="application/vnd.jupyter.stderr"]')) : [];
  const imgs = out ? Array.from(out.querySelectorAll('img.widget-image')) : [];
  // Words of the error lines that the page cut across two lines (drawn in two boxes).
  const cut = [];
  for (const e of errors) {
    const walker = document.createTreeWalker(e, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      for (const m of node.textContent.matchAll(/\\S+/g)) {
        if (m[0].length > 40) continue;  // a word longer than a line may break
        const range = document.createRange();
        range.setStart(node, m.index);
        range.setEnd(node, m.index + m[0].length);
        const tops = new Set(Array.from(range.getClientRects()).map(r => Math.round(r.top)));
        if (tops.size > 1) cut.push(m[0]);
      }
    }
  }
  return {
    cut,
    prompt: (cell.querySelector('.jp-InputPrompt') || {}).innerText || '',
    text: out ? out.innerText : '',
    errors: errors.map(e => e.innerText),
    views: out ? out.querySelectorAll('.jupyter-widgets').length : 0,
    drawn: imgs.filter(i => i.src && i.complete && i.naturalWidth > 50).length,
  };
})
"""
# Every code cell has run: a number in its prompt, none waiting ("*") or never run ("[ ]").
ALL_RAN_JS = (
    "() => { const s = (" + CELLS_JS + ")(); return s.length > 0 &&"
    " s.every(c => /\\[\\d+\\]/.test(c.prompt)); }"
)


def _widget_builders() -> set[str]:
    """Names of every widget builder (what a notebook calls to show one)."""
    from toolkit.widgets import BUILDERS

    return {name for names in BUILDERS.values() for name in names}


def _widget_cells(notebook: dict, builders: set[str]) -> list[int]:
    """Indexes (among code cells) of the cells whose last line shows a widget."""
    found = []
    code_cells = [c for c in notebook["cells"] if c["cell_type"] == "code"]
    for i, cell in enumerate(code_cells):
        try:
            body = ast.parse("".join(cell["source"])).body
        except SyntaxError:
            continue
        last = body[-1] if body else None
        if isinstance(last, ast.Expr) and isinstance(last.value, ast.Call):
            func = last.value.func
            if isinstance(func, ast.Name) and func.id in builders:
                found.append(i)
    return found


@pytest.fixture(scope="module")
def lab_server_config():
    """The test opens one notebook after another in the same page through JupyterLab's own
    command (``docmanager:open``, as the file browser does), so the application loads once,
    not once per notebook."""
    return {"LabApp": {"expose_app_in_browser": True}}


#: Whether the notebook in front is the one at ``path`` (relative to the server's root).
SHOWS_JS = "path => { const w = window.jupyterapp.shell.currentWidget; " \
           "return !!w && !!w.context && w.context.path === path; }"


@pytest.fixture(scope="module")
def released(lab_server):
    """The server's root becomes a course workspace with every assignment released;
    returns ``[(assignment, notebook path relative to the root)]``."""
    from autograder.workspace.course import Course

    course = Course(lab_server.root_dir)
    course.init()
    notebooks = []
    for entry in course.outline().assignments:
        folder = course.release(entry.name, exchange=False)
        notebooks += [(entry.name, path.relative_to(lab_server.root_dir).as_posix())
                      for path in sorted(folder.glob("*.ipynb"))]
    return notebooks


def _says_what_is_missing(error: str) -> bool:
    """One of friendly_errors' lines (``‖ ...``), not a traceback."""
    return error.lstrip().startswith(MARK) and "Traceback" not in error


def _describe(states) -> str:
    return "\n".join(
        f"cell {i} {c['prompt']!r}: views={c['views']} drawn={c['drawn']} "
        f"errors={[e[:200] for e in c['errors']]} text={c['text'][:200]!r}"
        for i, c in enumerate(states))


def test_run_all_reaches_the_end_of_every_fresh_notebook(chromium, lab_server, released,
                                                         tmp_path):
    builders = _widget_builders()
    assert released, "no assignment released"
    failures = []
    page = chromium.new_page()
    first_path = released[0][1]
    page.goto(f"{lab_server.url}/lab/tree/{first_path}?reset&token={lab_server.token}",
              wait_until="domcontentloaded", timeout=60_000)
    page.wait_for_function("() => !!window.jupyterapp", timeout=60_000, polling=250)
    page.evaluate("async () => { await window.jupyterapp.started; "
                  "await window.jupyterapp.restored; }")
    try:
        for assignment, path in released:
            failures += _run_all(page, assignment, path, builders, lab_server, tmp_path)
    finally:
        page.close()
    (tmp_path / "failures.txt").write_text("\n\n".join(failures))
    assert not failures, "\n\n".join(failures)
    assert not chromium.blocked, f"browser tried to leave loopback: {chromium.blocked}"


def _run_all(page, assignment, path, builders, lab_server, tmp_path) -> list[str]:
    """Open ``path`` in front (a tab of its own), Run All, and say what went wrong."""
    failures = []
    notebook = json.loads((lab_server.root_dir / path).read_text())
    widget_cells = _widget_cells(notebook, builders)
    page.evaluate("async path => { await window.jupyterapp.commands.execute("
                  "'docmanager:open', {path}); }", path)
    page.wait_for_function(SHOWS_JS, arg=path, timeout=60_000, polling=100)
    page.wait_for_selector(".jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook "
                           ".jp-CodeCell", timeout=60_000)
    page.wait_for_function(KERNEL_IDLE_JS, timeout=60_000, polling=250)
    page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Run").first.click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()
    try:
        page.wait_for_function(ALL_RAN_JS, timeout=RUN_ALL_TIMEOUT_MS, polling=500)
        page.wait_for_function(KERNEL_IDLE_JS, timeout=60_000, polling=250)
    except Exception:
        page.screenshot(path=str(tmp_path / f"{assignment}-timeout.png"))
        states = page.evaluate(CELLS_JS)
        failures.append(f"{path}: Run All did not reach the end:\n{_describe(states)}")
        return failures
    states = page.evaluate(CELLS_JS)
    page.screenshot(path=str(tmp_path / f"{assignment}.png"))
    report = f"{path}:\n{_describe(states)}"
    for i in widget_cells:
        cell = states[i]
        if cell["errors"] and _says_what_is_missing("\n".join(cell["errors"])):
            continue  # the widget shows a model the student has not built yet
        if not cell["views"] or "Error displaying widget" in cell["text"]:
            failures.append(f"{path}: widget cell {i} did not render\n{report}")
        elif not (cell["drawn"] or "not written yet" in cell["text"]):
            failures.append(f"{path}: widget cell {i} neither drew nor said what "
                            f"it needs\n{report}")
    errored = [i for i, c in enumerate(states) if c["errors"]]
    for i in errored:
        text = "\n".join(states[i]["errors"])
        if not _says_what_is_missing(text):
            failures.append(f"{path}: cell {i} failed without saying which exercise "
                            f"is missing:\n{text[:800]}")
        if states[i]["cut"]:
            failures.append(f"{path}: cell {i}'s message cuts words across lines "
                            f"({states[i]['cut'][:5]}):\n{text[:800]}")
    print(f"{path}: {len(states)} code cells ran, {len(widget_cells)} widgets, "
          f"{len(errored)} cells wait for an exercise")
    return failures
