"""toolkit.widgets.position.measured: the context-extension measurement drawn (headless),
on a measurement of tiny untrained models so the test runs in seconds."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
import torch  # noqa: E402

from toolkit.long_context import measure, position_model  # noqa: E402
from toolkit.widgets import display as D  # noqa: E402
from toolkit.widgets import position as W  # noqa: E402

L = 96


@pytest.fixture(scope="module")
def results():
    torch.manual_seed(0)
    models = {p: position_model(p, L, n_layers=1, d_model=16, n_heads=2).eval()
              for p in ("rope", "learned", "alibi")}
    return measure(models, L, lengths=(1, 2), n_windows=2, depths=(0.5,), n_keys=2,
                   progress=False)


def test_measure_covers_every_variant(results):
    labels = ["rope", "learned", "alibi", "rope + PI", "rope + NTK", "rope + dynamic NTK",
              "rope + YaRN"]
    assert list(results["loss"]) == labels and results["train_len"] == L
    assert results["loss"]["rope"].shape == (2 * L,)
    assert results["loss"]["learned"].shape == (L,), "a learned table ends at L"
    assert results["passkey"]["learned"][(2, 0.5)] is None
    assert all(0 <= a <= 1 for a in (results["passkey"]["alibi"][(m, 0.5)] for m in (1, 2)))
    table = W.passkey_table(results)
    assert table["learned"] == {1: results["passkey"]["learned"][(1, 0.5)], 2: None}


def test_plot_and_widget_build_headless(results, monkeypatch):
    pytest.importorskip("ipywidgets")
    fig = W.plot_context_extension(results, smooth=16, variant="rope + YaRN")
    loss_axis = fig.axes[0]
    assert len(loss_axis.get_lines()) == len(results["loss"]) + 3  # + the L, 2L, 4L guides
    assert D.figure_to_png(fig, dpi=40).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="variant"):
        W.plot_context_extension(results, variant="sinusoidal")
    with pytest.raises(ValueError, match="smooth"):
        W.plot_context_extension(results, smooth=0)
    monkeypatch.delenv(D.HEADLESS_ENV, raising=False)
    box = W.context_extension_explorer(results)
    image = next(c for c in box.children if c.__class__.__name__ == "Image")
    assert bytes(image.value).startswith(b"\x89PNG")
    monkeypatch.setenv(D.HEADLESS_ENV, "1")
    assert W.context_extension_explorer(results).__class__.__name__ == "HTML"
