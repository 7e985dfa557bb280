"""toolkit.widgets.display.live_figure: the redraw loop every widget builder uses."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from toolkit.widgets.display import live_figure  # noqa: E402


def test_redraws_with_the_current_values_and_lays_out_rows():
    calls = []

    def draw(n, label):
        calls.append((n, label))
        fig = Figure(figsize=(1, 1))
        fig.subplots().set_title(f"{label} {n}")
        return fig

    controls = {"n": w.IntSlider(value=1, min=0, max=5), "label": w.Text(value="a")}
    play = w.Play()
    box = live_figure(controls, draw, lambda n, label: f"<b>{label}{n}</b>",
                      rows=[[play, controls["n"]], [controls["label"]]])
    rows, image, note = box.children[:2], box.children[2], box.children[4]
    assert [list(r.children) for r in rows] == [[play, controls["n"]], [controls["label"]]]
    first = bytes(image.value)
    assert first.startswith(b"\x89PNG") and calls == [(1, "a")] and note.value == "<b>a1</b>"
    controls["n"].value = 3
    controls["label"].value = "b"
    assert calls == [(1, "a"), (3, "a"), (3, "b")] and note.value == "<b>b3</b>"
    assert bytes(image.value) != first


def test_without_a_note_there_is_no_note_widget():
    box = live_figure({"n": w.IntSlider()}, lambda n: Figure(figsize=(1, 1)))
    assert [type(c) for c in box.children] == [w.HBox, w.Image, w.HTML]
    assert box.children[2].layout.display == "none"  # says what is missing, when something is


def test_settings_a_function_refuses_are_explained_and_the_next_ones_draw():
    def draw(n):
        if n > 3:
            raise ValueError(f"n={n} is more than the 3 blocks there are")
        return Figure(figsize=(1, 1))

    slider = w.IntSlider(value=1, min=0, max=5)
    box = live_figure({"n": slider}, draw)
    image, message = box.children[1], box.children[2]
    slider.value = 5  # a ValueError: no traceback, the reason in the image's place
    assert image.layout.display == "none" and message.layout.display is None
    assert "cannot be drawn" in message.value and "n=5 is more than the 3 blocks" in message.value
    slider.value = 2
    assert image.layout.display is None and message.layout.display == "none"
