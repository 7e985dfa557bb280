"""toolkit.widgets.position.long_context: the speeds each method uses at each length, and
the plot and widget built on them (headless)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from toolkit import position as P  # noqa: E402
from toolkit.widgets import display as D  # noqa: E402
from toolkit.widgets import position as W  # noqa: E402

D_HEAD, BASE, SCALE, L = 32, 10000.0, 4.0, 256


def speeds(method, seq_len):
    return W.extension_inv_freq(method, D_HEAD, BASE, SCALE, L, seq_len)


def test_static_methods_ignore_the_length_and_match_their_toolkit_functions():
    expected = {
        "RoPE": P.rope_inv_freq(D_HEAD, BASE, dtype=torch.float64),
        "PI": P.rope_inv_freq(D_HEAD, BASE, dtype=torch.float64) / SCALE,
        "NTK": P.rope_inv_freq(D_HEAD, P.ntk_base(D_HEAD, BASE, SCALE), dtype=torch.float64),
        "YaRN": P.yarn_inv_freq_and_temperature(D_HEAD, BASE, SCALE, L)[0].double(),
    }
    for method, inv in expected.items():
        for seq_len in (10, L, 3 * L):
            torch.testing.assert_close(speeds(method, seq_len), inv, rtol=1e-6, atol=0)


@pytest.mark.parametrize("method", ["dynamic NTK", "LongRoPE"])
def test_length_aware_methods_are_plain_rope_within_the_training_length(method):
    rope = P.rope_inv_freq(D_HEAD, BASE, dtype=torch.float64)
    for seq_len in (1, 100, L):
        torch.testing.assert_close(speeds(method, seq_len), rope, rtol=1e-12, atol=0)
    assert bool((speeds(method, L + 1) < rope).any())  # beyond: slowed down


def test_dynamic_ntk_slows_down_more_as_the_input_grows():
    slowest = [float(speeds("dynamic NTK", T)[-1]) for T in (L + 1, 2 * L, 4 * L, 8 * L)]
    assert slowest == sorted(slowest, reverse=True) and slowest[0] > slowest[-1]


def test_longrope_example_factors_rise_from_one_to_the_scale():
    factors = W.longrope_example_factors(D_HEAD, BASE, SCALE, L)
    turns = P.yarn_band_ratios(D_HEAD, BASE, L)
    assert factors.shape == (D_HEAD // 2,)
    assert bool((factors[turns >= 32] == 1).all()) and bool((factors[turns <= 1] == SCALE).all())
    assert bool((factors[1:] >= factors[:-1]).all())  # fast pairs to slow pairs
    assert torch.allclose(speeds("LongRoPE", 2 * L), P.rope_inv_freq(D_HEAD, BASE).double()
                          / factors, rtol=1e-6)


def test_a_students_function_replaces_the_toolkits():
    calls = []

    def my_dynamic_ntk(d_head, base, seq_len, max_position_embeddings, scale, *, dtype):
        calls.append(seq_len)
        return torch.full((d_head // 2,), 0.5, dtype=dtype)

    got = W.extension_inv_freq("dynamic NTK", D_HEAD, BASE, SCALE, L, 3 * L,
                               fns={"rope_inv_freq_dynamic_ntk": my_dynamic_ntk})
    assert calls == [3 * L] and bool((got == 0.5).all())
    W.plot_long_context(train_len=64, scale=2.0, d_head=16,
                        fns={"rope_inv_freq_dynamic_ntk": my_dynamic_ntk})
    assert len(calls) > 10  # once per input length drawn


def test_unknown_method_names_the_choices():
    with pytest.raises(ValueError, match="method must be one of"):
        speeds("linear", 10)


def test_plot_and_widget_build_headless(monkeypatch):
    pytest.importorskip("ipywidgets")
    fig = W.plot_long_context(train_len=64, scale=2.0, d_head=16)
    assert [len(ax.get_lines()) for ax in fig.axes] == [len(W.METHODS) + 2] * 2  # + 2 guides
    assert D.figure_to_png(fig, dpi=40).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="train_len"):
        W.plot_long_context(train_len=4)
    monkeypatch.delenv(D.HEADLESS_ENV, raising=False)
    box = W.long_context_explorer()
    image = next(c for c in box.children if c.__class__.__name__ == "Image")
    assert bytes(image.value).startswith(b"\x89PNG")
    monkeypatch.setenv(D.HEADLESS_ENV, "1")
    assert W.long_context_explorer().__class__.__name__ == "HTML"
