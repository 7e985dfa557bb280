"""Headless tests for toolkit.widgets.attention: every plot renders, every widget builds."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from widget_testing import PNG_MAGIC  # noqa: E402
from widget_testing import render as _render  # noqa: E402

from toolkit.widgets import attention as A  # noqa: E402
from toolkit.widgets import display as D  # noqa: E402

# ---------------------------------------------------------------------------
# Pure plotting functions
# ---------------------------------------------------------------------------


def test_plot_attention_heatmap_renders_with_and_without_tokens():
    weights = torch.softmax(torch.randn(3, 4), dim=-1)
    _render(A.plot_attention_heatmap(weights))
    fig = A.plot_attention_heatmap(weights, ["a", "b", "c", "d"], title="t",
                                   query_tokens=["x", "y", "z"])
    ax = fig.axes[0]
    assert ax.get_title() == "t"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c", "d"]
    _render(fig)
    fig = A.plot_attention_heatmap(weights.numpy(), annotate=False)
    assert not fig.axes[0].texts  # no per-cell numbers


def test_plot_attention_heatmap_rejects_bad_input():
    with pytest.raises(ValueError, match="weights"):
        A.plot_attention_heatmap(torch.ones(2, 3, 3))
    with pytest.raises(ValueError, match="tokens"):
        A.plot_attention_heatmap(torch.ones(3, 3), ["a", "b"])


@pytest.mark.parametrize("mask_kind", A.MASK_KINDS)
def test_example_attention_masks(mask_kind):
    weights, mask = A.example_attention(mask_kind=mask_kind, n_real=4)
    assert weights.shape == (6, 6)
    torch.testing.assert_close(weights.sum(-1), torch.ones(6))
    if mask_kind == "none":
        assert mask is None
    else:
        assert (weights[~mask] == 0).all()
    if mask_kind in ("causal", "combined"):
        assert torch.equal(weights.triu(1), torch.zeros(6, 6))
    if mask_kind in ("padding", "combined"):
        assert (weights[:, 4:] == 0).all()


def test_plot_attention_example_renders_with_pad_labels():
    fig = A.plot_attention_example(mask_kind="combined", n_real=4)
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels[-2:] == ["<pad>", "<pad>"]
    _render(fig)


def test_temperature_sharpens_and_flattens():
    def entropy(p):
        return -(p * p.clamp_min(1e-30).log()).sum(-1).mean()

    cold, _ = A.example_attention(temperature=0.1)
    warm, _ = A.example_attention(temperature=1.0)
    hot, _ = A.example_attention(temperature=10.0)
    assert entropy(cold) < entropy(warm) < entropy(hot)


def test_example_attention_accepts_given_q_k_and_rejects_bad_arguments():
    q, k = torch.randn(3, 4), torch.randn(3, 4)
    weights, _ = A.example_attention(["a", "b", "c"], "causal", q=q, k=k)
    assert weights.shape == (3, 3)
    with pytest.raises(ValueError, match="mask_kind"):
        A.example_attention(mask_kind="diagonal")
    with pytest.raises(ValueError, match="temperature"):
        A.example_attention(temperature=0.0)
    with pytest.raises(ValueError, match="n_real"):
        A.example_attention(mask_kind="padding", n_real=0)
    with pytest.raises(ValueError, match="q and k"):
        A.example_attention(["a", "b"], q=q, k=k)


def test_plot_family_patterns_renders():
    fig = A.plot_family_patterns(5, 3, src_length=4, src_tokens=list("abcde"),
                                 tgt_tokens=["x", "y", "z"])
    assert len(fig.axes) == 3
    _render(fig)
    with pytest.raises(ValueError, match="src_tokens"):
        A.plot_family_patterns(5, 3, src_tokens=["a"])


def test_permutation_outputs_equivariant_only_without_positions():
    plain = A.permutation_outputs([2, 0, 1, 5, 4, 3])
    assert plain["gap"] < 1e-12
    assert A.permutation_outputs([2, 0, 1, 5, 4, 3], with_positions=True)["gap"] > 1e-3
    with pytest.raises(ValueError, match="perm"):
        A.permutation_outputs([0, 0, 1, 2, 3, 4])


def test_a_float32_attention_of_a_student_gets_the_right_verdict():
    """An attention that computes in float32 (the notebook default) neither breaks the
    float64 demo nor turns rounding at 1e-7 into "order matters"."""
    from toolkit.attention import scaled_dot_product_attention

    def in_float32(q, k, v, **kwargs):
        return scaled_dot_product_attention(q.float(), k.float(), v.float(), **kwargs)

    fns = {"scaled_dot_product_attention": in_float32}
    assert 0 < A.permutation_outputs(fns=fns)["gap"] < 1e-5
    assert "equal: order is invisible" in A.plot_permutation(fns=fns)._suptitle.get_text()
    with_positions = A.plot_permutation(with_positions=True, fns=fns)._suptitle.get_text()
    assert "order matters" in with_positions


def test_permutation_outputs_leave_global_rng_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    A.permutation_outputs()
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize("with_positions", [False, True])
def test_plot_permutation_renders(with_positions):
    fig = A.plot_permutation(with_positions=with_positions)
    assert len(fig.axes) == 3
    _render(fig)


# ---------------------------------------------------------------------------
# Widget builders
# ---------------------------------------------------------------------------


def _image_of(widget) -> w.Image:
    images = [c for c in _walk(widget) if isinstance(c, w.Image)]
    assert len(images) == 1
    return images[0]


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def _control(widget, description):
    return next(c for c in _walk(widget) if getattr(c, "description", None) == description)


def test_attention_explorer_builds_and_redraws(interactive):
    widget = A.attention_explorer()
    assert isinstance(widget, w.VBox)
    image = _image_of(widget)
    first = bytes(image.value)
    assert first.startswith(PNG_MAGIC)
    _control(widget, "mask").value = "causal"
    assert bytes(image.value) != first and bytes(image.value).startswith(PNG_MAGIC)


def test_attention_explorer_with_given_q_k(interactive):
    q, k = torch.randn(3, 4), torch.randn(3, 4)
    widget = A.attention_explorer(["a", "b", "c"], q=q, k=k)
    assert bytes(_image_of(widget).value).startswith(PNG_MAGIC)


def test_families_explorer_builds_and_redraws(interactive):
    widget = A.families_explorer()
    image = _image_of(widget)
    first = bytes(image.value)
    _control(widget, "T_src").value = 3
    assert bytes(image.value) != first
    assert _control(widget, "src padding").max == 2  # at least one real source token


def test_permutation_demo_builds_and_redraws(interactive):
    widget = A.permutation_demo()
    image = _image_of(widget)
    first = bytes(image.value)
    _control(widget, "add positions").value = True
    assert bytes(image.value) != first


@pytest.mark.parametrize("builder", [A.attention_explorer, A.families_explorer,
                                     A.permutation_demo])
def test_builders_are_placeholders_when_headless(headless, builder):
    widget = builder()
    assert isinstance(widget, w.HTML)
    assert "skipped" in widget.value
    assert not list(c for c in _walk(widget) if isinstance(c, w.Image))


def test_headless_flag_parsing(monkeypatch):
    for value, expected in [("1", True), ("true", True), ("0", False), ("", False)]:
        monkeypatch.setenv(D.HEADLESS_ENV, value)
        assert D.is_headless() is expected
    monkeypatch.delenv(D.HEADLESS_ENV)
    assert D.is_headless() is False
