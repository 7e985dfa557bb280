"""Headless tests for toolkit.widgets.efficient: every plot renders, every widget builds."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from widget_testing import render  # noqa: E402

from toolkit.masks import mask_cell_count  # noqa: E402
from toolkit.widgets import efficient as E  # noqa: E402
from toolkit.widgets.display import HEADLESS_ENV  # noqa: E402

BUILDERS = [E.mask_gallery, E.kv_cache_calculator, E.online_softmax_stepper,
            E.attention_memory_explorer]


def test_plots_render_headless():
    render(E.plot_mask_gallery(n=16, window=3, dilation=2))
    render(E.plot_kv_cache("DeepSeek-V2", n_tokens=1024, batch=2))
    render(E.plot_online_softmax(block=5, step=1))
    render(E.plot_online_softmax())
    render(E.plot_attention_memory([128, 1024, 8192], d=64, heads=8))


def test_gallery_titles_carry_exact_counts():
    masks = E.gallery_masks(n=8, window=2)
    assert mask_cell_count(masks["band |i-j| <= 1"]) == 22
    fig = E.plot_mask_gallery(n=8, window=2)
    titles = [ax.get_title() for ax in fig.axes]
    assert any("22 cells" in t for t in titles)


def test_gallery_draws_at_the_corners_of_its_sliders():
    """The shortest sequence (8 tokens, 2 blocks) with the most random blocks (4) draws:
    BigBird gets as many random blocks as there are, and says so in its title."""
    masks = E.gallery_masks(n=8, window=16, dilation=6, n_global=4, n_random_blocks=4)
    assert "BigBird (block 4, 2 random)" in masks
    render(E.plot_mask_gallery(n=8, window=16, dilation=6, n_global=4, n_random_blocks=4))
    render(E.plot_mask_gallery(n=64, window=1, dilation=1, n_global=0, n_random_blocks=0))


def test_kv_cache_comparison_presets():
    rows = {r["name"]: r for r in E.kv_cache_comparison("LLaMA-2 70B", 4096)}
    assert rows["GQA (8 KV heads)"]["bytes"] == 1_342_177_280 and rows["GQA (8 KV heads)"]["actual"]
    assert rows["MHA"]["bytes"] == 8 * 1_342_177_280
    ds = {r["name"]: r for r in E.kv_cache_comparison("DeepSeek-V2", 1)}
    assert ds["MLA"]["bytes"] == 69_120 and ds["MLA"]["actual"]
    mistral = E.kv_cache_comparison("Mistral 7B", 1)
    assert mistral[1]["bytes"] == 2 * 32 * 8 * 128 * 2
    # Its 4096-token window: a rolling buffer, the same size at 4096 and at 131,072 tokens.
    long, window = (E.kv_cache_comparison("Mistral 7B", n) for n in (131_072, 4096))
    assert [r["bytes"] for r in long] == [r["bytes"] for r in window]
    assert long[1]["bytes"] == 2 * 32 * 8 * 128 * 4096 * 2 and long[1]["cached_tokens"] == 4096
    with pytest.raises(ValueError, match="preset"):
        E.kv_cache_comparison("GPT-5")


def _unwritten_mla(*args, **kwargs):
    raise NotImplementedError("`mla_cache_bytes` is not written yet (Exercise 5a: MLA)")


def test_kv_cache_comparison_waits_for_a_later_exercise_and_draws_the_rest():
    """The calculator comes before MLA's exercise in Assignment 03: MLA's row says what it
    waits for, the other rows are computed and drawn."""
    rows = E.kv_cache_comparison("DeepSeek-V2", 1, fns={"mla_cache_bytes": _unwritten_mla})
    mla = rows[-1]
    assert mla["bytes"] is None and "`mla_cache_bytes`" in mla["pending"]
    assert "Exercise 5a" in mla["pending"]
    assert [r["pending"] for r in rows[:-1]] == [None] * 3 and rows[0]["bytes"] > 0
    fig = E.plot_kv_cache("DeepSeek-V2", 1, fns={"mla_cache_bytes": _unwritten_mla})
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("not written yet" in t for t in texts) and len(texts) == 4
    render(fig)

    def broken(*args, **kwargs):
        raise NotImplementedError("some other gap")

    with pytest.raises(NotImplementedError, match="other gap"):
        E.kv_cache_comparison("DeepSeek-V2", 1, fns={"mla_cache_bytes": broken})
    with pytest.raises(NotImplementedError, match="mla_cache_bytes"):
        E.kv_cache_comparison("DeepSeek-V2", 1, fns={"kv_cache_bytes": _unwritten_mla})


def test_online_softmax_plot_validates_step():
    with pytest.raises(ValueError, match="step"):
        E.plot_online_softmax(block=4, step=99)
    s, v = E.example_row(16)
    assert int(s.argmax()) == 12  # the maximum arrives in a late tile


@pytest.mark.parametrize("builder", BUILDERS)
def test_widgets_build_and_redraw(builder, interactive):
    widget = builder()
    assert isinstance(widget, w.VBox)
    images = [c for c in widget.children if isinstance(c, w.Image)]
    assert images and bytes(images[0].value).startswith(b"\x89PNG")
    sliders = [c for box in widget.children if isinstance(box, w.HBox) for c in box.children
               if isinstance(c, (w.IntSlider, w.SelectionSlider, w.Dropdown))]
    before = bytes(images[0].value)
    control = sliders[0]
    if isinstance(control, w.IntSlider):
        control.value = min(control.max, control.value + 1)
    else:
        control.value = control.options[-1]
    assert bytes(images[0].value) != before  # moving a control redraws


def test_stepper_clamps_step_when_tiles_grow(interactive):
    widget = E.online_softmax_stepper(n=16)
    block, step = widget.children[0].children
    step.value = step.max
    block.value = 8
    assert step.max == 1 and step.value == 1


@pytest.mark.parametrize("builder", BUILDERS)
def test_widgets_headless_placeholder(builder, monkeypatch):
    monkeypatch.setenv(HEADLESS_ENV, "1")
    assert isinstance(builder(), w.HTML)


def test_tensor_inputs_accepted():
    s = torch.tensor([0.0, 2.0, 1.0, 3.0])
    render(E.plot_online_softmax(s, torch.eye(4), block=2, step=0))
