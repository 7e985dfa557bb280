"""End to end: the course widgets render and react in a real JupyterLab, with no network.

A JupyterLab server (127.0.0.1 only, private config dirs, ``TOOLKIT_HEADLESS`` unset) is
driven by headless system Chromium through Playwright. The test writes a notebook that
builds one widget from each ``toolkit.widgets`` module, runs all cells from the Run menu,
and checks that every cell shows a live widget view with a drawn image (not the
"Loading widget..." placeholder, not an error), that moving a slider with the keyboard
makes the kernel redraw the image, and that the browser never asked for anything beyond
loopback. Screenshots go to the test's tmp dir.
"""

from __future__ import annotations

import nbformat
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.browser]

NOTEBOOK = "widgets_smoke.ipynb"
# (builder name, code): one widget builder per toolkit.widgets module, and the three
# attention variants' explorers.
WIDGET_CELLS = [
    ("attention_explorer",
     "from toolkit.widgets.attention import attention_explorer\nattention_explorer()"),
    ("rope_spectrum_explorer",
     "from toolkit.widgets.position import rope_spectrum_explorer\nrope_spectrum_explorer()"),
    ("mask_gallery",
     "from toolkit.widgets.efficient import mask_gallery\nmask_gallery()"),
    # The attention variants of Assignment 03: each has a control of another kind.
    ("linear_attention_explorer",
     "from toolkit.widgets.efficient import linear_attention_explorer\n"
     "linear_attention_explorer()"),
    ("mla_explorer",
     "from toolkit.widgets.efficient import mla_explorer\nmla_explorer()"),
    ("differential_explorer",
     "from toolkit.widgets.efficient import differential_explorer\ndifferential_explorer()"),
    ("temperature_explorer",
     "from toolkit.widgets.blocks import temperature_explorer\ntemperature_explorer()"),
    ("ssm_kernel_explorer",
     "from toolkit.widgets.beyond import ssm_kernel_explorer\nssm_kernel_explorer()"),
    ("sampling_playground",
     "import torch\nfrom toolkit.widgets.generation import sampling_playground\n"
     "sampling_playground(logits=torch.tensor([3.0, 2.5, 2.0, 1.2, 0.5, 0.0, -0.5, -1.0, "
     "-2.0, -3.0]))"),
]
SETUP_CELL = (
    "import os\n"
    "assert not os.environ.get('TOOLKIT_HEADLESS'), 'TOOLKIT_HEADLESS leaked into the kernel'\n"
    "print('kernel ready')"
)
RENDER_TIMEOUT_MS = 60_000
KERNEL_IDLE_JS = """
() => { const bar = document.querySelector('#jp-main-statusbar');
        const text = bar ? bar.innerText : '';
        return !text.includes('No Kernel') && /\\| Idle/.test(text); }
"""

# One record per code cell: what its output area shows.
CELL_STATE_JS = """
() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell')).map(cell => {
  const out = cell.querySelector('.jp-OutputArea');
  const text = out ? out.innerText : '';
  const imgs = out ? Array.from(out.querySelectorAll('img.widget-image')) : [];
  return {
    prompt: (cell.querySelector('.jp-InputPrompt') || {}).innerText || '',
    text: text,
    views: out ? out.querySelectorAll('.jupyter-widgets.widget-container, '
                                     + '.jupyter-widgets.widget-box').length : 0,
    images: imgs.length,
    drawn: imgs.filter(i => i.src && i.complete && i.naturalWidth > 50).length,
    sliders: out ? out.querySelectorAll('.widget-slider').length : 0,
    errors: out ? out.querySelectorAll('[data-mime-type="application/vnd.jupyter.stderr"]')
                    .length : 0,
  };
})
"""
# The states once every widget has drawn (else false): the checks below read this very
# snapshot, since a widget may swap its image again a moment later (src not loaded yet).
ALL_RENDERED_JS = (
    "(n) => { const s = (" + CELL_STATE_JS + ")();"
    " return s.length === n + 1 && s.slice(1).every(c => c.drawn > 0"
    " && !c.text.includes('Loading widget')) && !s.some(c => c.prompt.includes('*')) && s; }"
)


def _write_notebook(path) -> None:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(SETUP_CELL)]
    nb.cells += [nbformat.v4.new_code_cell(code) for _, code in WIDGET_CELLS]
    nbformat.write(nb, str(path))


def _describe(states) -> str:
    return "\n".join(
        f"cell {i} {c['prompt']!r}: views={c['views']} images={c['images']} "
        f"drawn={c['drawn']} sliders={c['sliders']} stderr={c['errors']} "
        f"text={c['text'][:300]!r}"
        for i, c in enumerate(states)
    )


def test_widgets_render_and_react_in_jupyterlab(chromium, lab_server, tmp_path):
    # (chromium first: it skips before a server is started when the browser is missing)
    _write_notebook(lab_server.root_dir / NOTEBOOK)
    page = chromium.new_page()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console_errors.append(f"pageerror: {e}"))
    try:
        page.goto(f"{lab_server.url}/lab/tree/{NOTEBOOK}?token={lab_server.token}",
                  wait_until="domcontentloaded", timeout=60_000)
        page.wait_for_selector(".jp-Notebook .jp-CodeCell", timeout=60_000)
        # Wait for the kernel ("Python 3 (ipykernel) | Idle" in the status bar): a "Run All"
        # sent while the status bar still says "No Kernel" is silently dropped.
        page.wait_for_function(KERNEL_IDLE_JS, timeout=60_000, polling=250)

        page.locator("#jp-MainMenu .lm-MenuBar-item", has_text="Run").first.click()
        page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()

        try:
            rendered = page.wait_for_function(ALL_RENDERED_JS, arg=len(WIDGET_CELLS),
                                              timeout=RENDER_TIMEOUT_MS, polling=250)
        except Exception:
            page.screenshot(path=str(tmp_path / "timeout.png"))
            states = page.evaluate(CELL_STATE_JS)
            pytest.fail(
                "widgets did not all render within "
                f"{RENDER_TIMEOUT_MS / 1000:.0f}s:\n{_describe(states)}\n"
                f"console errors: {console_errors[-10:]}\nserver log:\n{lab_server.log_tail()}"
            )

        states = rendered.json_value()
        report = _describe(states)
        assert "kernel ready" in states[0]["text"], report
        for (name, _), state in zip(WIDGET_CELLS, states[1:]):
            assert state["views"] > 0, f"{name}: no widget view\n{report}"
            assert state["drawn"] > 0, f"{name}: no drawn image\n{report}"
            assert state["errors"] == 0, f"{name}: wrote to stderr\n{report}"
            for bad in ("Loading widget", "Error displaying widget", "Traceback",
                        "skipped while grading"):
                assert bad not in state["text"], f"{name}: shows {bad!r}\n{report}"
        assert sum(s["sliders"] for s in states) >= 1, f"no slider rendered\n{report}"

        # Move the first slider of mask_gallery ("n") one step with the keyboard: the kernel
        # must redraw and the browser must show a new image.
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(
            1 + [n for n, _ in WIDGET_CELLS].index("mask_gallery"))
        slider = cell.locator(".widget-slider").first
        image = cell.locator("img.widget-image").first
        readout = slider.locator(".widget-readout")
        before_src, before_value = image.get_attribute("src"), readout.inner_text()
        handle = slider.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "([img, src]) => img.src && img.src !== src && img.complete && img.naturalWidth > 50",
            arg=[image.element_handle(), before_src], timeout=20_000, polling=100,
        )
        after_value = readout.inner_text()
        assert after_value != before_value, (before_value, after_value)

        # The same with differential_explorer's lambda (a float slider): a new image.
        cell = page.locator(".jp-Notebook .jp-CodeCell").nth(
            1 + [n for n, _ in WIDGET_CELLS].index("differential_explorer"))
        image = cell.locator("img.widget-image").first
        before_src = image.get_attribute("src")
        handle = cell.locator(".widget-slider").first.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        page.keyboard.press("ArrowRight")
        page.wait_for_function(
            "([img, src]) => img.src && img.src !== src && img.complete && img.naturalWidth > 50",
            arg=[image.element_handle(), before_src], timeout=20_000, polling=100,
        )

        page.screenshot(path=str(tmp_path / "jupyterlab_widgets.png"))
        for i, (name, _) in enumerate(WIDGET_CELLS, start=1):
            page.locator(".jp-Notebook .jp-CodeCell").nth(i).locator(
                ".jp-OutputArea").screenshot(path=str(tmp_path / f"{name}.png"))
        print(f"screenshots in {tmp_path}; slider n: {before_value} -> {after_value}")

        assert not chromium.blocked, f"browser tried to leave loopback: {chromium.blocked}"
        widget_errors = [e for e in console_errors if "widget" in e.lower()]
        assert not widget_errors, widget_errors
    finally:
        page.close()
