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
            E.attention_memory_explorer, E.linear_attention_explorer, E.mla_explorer,
            E.differential_explorer]


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


# -- linear attention, MLA and differential attention ---------------------------------------


def _controls(widget) -> dict:
    return {c.description: c for box in widget.children if isinstance(box, w.HBox)
            for c in box.children if hasattr(c, "description")}


def _image(widget) -> bytes:
    return bytes(next(c for c in widget.children if isinstance(c, w.Image)).value)


@pytest.mark.parametrize("builder, moves", [
    (E.linear_attention_explorer, {"feature map": "relu(x)", "step t": 30, "d": 8, "seed": 3}),
    (E.mla_explorer, {"latent d_c": 8, "spectrum decay": 0.0, "seed": 2}),
    (E.differential_explorer, {"lambda": 0.8, "keys": 256, "noise": 0.5, "seed": 4}),
])
def test_every_control_redraws(builder, moves, interactive):
    widget = builder()
    controls = _controls(widget)
    assert set(moves) <= set(controls), sorted(controls)
    for name, value in moves.items():
        before = _image(widget)
        controls[name].value = value
        assert _image(widget) != before, f"{builder.__name__}: moving {name!r} drew nothing new"


def test_differential_maps_are_the_two_softmaxes_and_their_difference():
    r = E.differential_maps(n=32, lam=0.3, noise=1.0, seed=1)
    ex = E.distractor_example(32, 1.0, 1)
    a1 = torch.softmax((ex["q1"] @ ex["keys"].transpose(-2, -1))[0, 0, 0] / 32**0.5, -1)
    a2 = torch.softmax((ex["q2"] @ ex["keys"].transpose(-2, -1))[0, 0, 0] / 32**0.5, -1)
    torch.testing.assert_close(r["a1"], a1)
    torch.testing.assert_close(r["a2"], a2)
    torch.testing.assert_close(r["diff"], a1 - 0.3 * a2)
    assert float(r["diff"].sum()) == pytest.approx(0.7)  # a row of A1 - lam A2 sums to 1 - lam
    torch.testing.assert_close(E.differential_maps(n=32, lam=0.0, noise=1.0, seed=1)["a2"], a2)
    assert r["cosines"][0] < max(r["cosines"])  # some lambda > 0 beats plain attention here
    with pytest.raises(ValueError, match="at least 2"):
        E.distractor_example(1)


def test_differential_widget_draws_with_the_students_function(interactive):
    calls = []

    def mine(q1, k1, q2, k2, v, lam, mask=None, scale=None):
        calls.append(lam)
        return E.differential.differential_attention(q1, k1, q2, k2, v, lam, mask, scale)

    render(E.plot_differential_maps(16, 0.4, fns={"differential_attention": mine}))
    assert 0.4 in calls

    def stub(*args, **kwargs):
        raise NotImplementedError(
            "`differential_attention` is not written yet (Exercise 6a: differential attention)")

    widget = E.differential_explorer(fns={"differential_attention": stub})
    shown = " ".join(c.value for c in widget.children if isinstance(c, w.HTML))
    assert "`differential_attention`" in shown.replace("<code>", "`").replace("</code>", "`")


def test_linear_attention_state_and_error():
    r = E.linear_vs_softmax("elu(x) + 1", d=8, seed=0)
    assert r["lengths"] == list(E.linear.LENGTHS)
    assert r["state"] == [8 * 8 + 8] * len(r["lengths"])  # S and z never grow
    assert r["scores"] == [T * T for T in r["lengths"]]
    assert all(0 < e < 2 for e in r["causal"] + r["full"])  # a different similarity, not exact
    q, k, v = E.linear._qkv(64, 8, 0)
    phi_k = E.FEATURE_MAPS["elu(x) + 1"](k)[0, 0]
    torch.testing.assert_close(E.running_state(5, "elu(x) + 1", d=8),
                               sum(torch.outer(phi_k[j], v[0, 0, j]) for j in range(6)))
    used = []

    def mine(q, k, v, feature_map=None, eps=1e-6):
        used.append(feature_map)
        return E.linear.causal_linear_attention(q, k, v, feature_map=feature_map, eps=eps)

    E.linear_vs_softmax("relu(x)", fns={"causal_linear_attention": mine})
    assert used and all(f is E.FEATURE_MAPS["relu(x)"] for f in used)


def test_mla_tradeoff_orders_the_schemes():
    rows = {r["name"]: r for r in E.latent_tradeoff(d_latent=24, decay=0.05, seed=0)}
    assert rows["MHA"]["error"] == pytest.approx(0.0, abs=1e-12)
    gqa2, gqa4 = rows["GQA (2 KV heads)"]["error"], rows["GQA (4 KV heads)"]["error"]
    assert rows["MQA"]["error"] > gqa2 > gqa4
    mla = sorted((r for r in rows.values() if "latent" in r), key=lambda r: r["latent"])
    errors = [r["error"] for r in mla]
    assert errors == sorted(errors, reverse=True)  # a larger latent keeps more
    assert mla[-1]["error"] == pytest.approx(0.0, abs=1e-9)  # rank 128 = the whole of [K ; V]
    assert rows["MLA d_c=24"]["chosen"]
    assert rows["MHA"]["bytes"] == 2 * 8 * 16 * 2 and rows["MLA d_c=24"]["bytes"] == (24 + 8) * 2
    counted = []

    def my_bytes(n_layers, d_latent, d_rope, n_tokens, batch=1, bytes_per_element=2):
        counted.append(d_latent)
        return n_layers * (d_latent + d_rope) * n_tokens * batch * bytes_per_element

    E.latent_tradeoff(16, fns={"mla_cache_bytes": my_bytes})
    assert 16 in counted
