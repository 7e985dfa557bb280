"""Headless tests for toolkit.widgets.generation: plots render, widgets build."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from widget_testing import PNG_MAGIC  # noqa: E402
from widget_testing import render as _render  # noqa: E402

from toolkit.data import ByteTokenizer  # noqa: E402
from toolkit.models import GPT, GPTConfig  # noqa: E402
from toolkit.train import TrainConfig, train  # noqa: E402
from toolkit.widgets import generation as G  # noqa: E402


def tiny_model(recipe="modern", seed=0):
    torch.manual_seed(seed)
    build = GPTConfig.modern if recipe == "modern" else GPTConfig.classic
    return GPT(build(vocab_size=256, d_model=32, n_layers=1, n_heads=4, max_seq_len=64)).eval()


HISTORY = {"step": [0, 1, 2, 3], "train_loss": [5.5, 4.0, 3.2, 3.0], "val_step": [1, 3],
           "val_loss": [4.2, 3.3]}


def test_plot_loss_curves_renders_one_or_many_runs():
    fig = G.plot_loss_curves(HISTORY, uniform_loss=5.545)
    _render(fig)
    ax = fig.axes[0]
    assert len(ax.lines) == 3  # train, validation, uniform reference
    assert list(ax.lines[1].get_xdata()) == [1, 3]
    fig2 = G.plot_loss_curves({"classic": HISTORY, "modern": HISTORY})
    _render(fig2)
    assert len(fig2.axes[0].lines) == 4
    with pytest.raises(ValueError, match="history"):
        G.plot_loss_curves({"step": [0, 1], "train_loss": [1.0]})


def test_live_loss_plot_during_training(headless):
    data = torch.tensor(ByteTokenizer().encode("abc abd abe " * 50))
    live = G.LiveLossPlot(every=5, vocab_size=256)
    cfg = TrainConfig(max_steps=10, batch_size=2, block_size=16, eval_every=5, eval_batches=1,
                      progress=False)
    history = train(tiny_model(), data[:500], data[500:], cfg, callback=live)
    assert live.n_redraws == 2  # steps 5 and 10
    lines = live.ax.lines
    assert len(lines[0].get_xdata()) == len(history.train_loss)
    assert "step 10" in live.ax.get_title()
    _render(live.figure)
    assert isinstance(live.widget, w.HTML)  # placeholder when headless
    with pytest.raises(ValueError, match="every"):
        G.LiveLossPlot(every=0)


def test_live_loss_plot_widget_updates(interactive):
    live = G.LiveLossPlot(every=1)
    image = live.widget
    assert isinstance(image, w.Image)
    live(3, HISTORY)
    assert bytes(image.value).startswith(PNG_MAGIC)


def test_next_token_distribution_marks_cut_tokens():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    d = G.next_token_distribution(logits, temperature=1.0, top_k=3, top_p=None)
    assert d["kept"].tolist() == [True, True, True, False, False]
    torch.testing.assert_close(d["final"].sum(), torch.tensor(1.0))
    assert (d["final"][~d["kept"]] == 0).all()
    tiny_p = G.next_token_distribution(logits, top_p=0.01)
    assert int(tiny_p["kept"].sum()) == 1  # never empty
    with pytest.raises(ValueError, match="logits"):
        G.next_token_distribution(torch.zeros(2, 5))


def test_plot_next_token_distribution_renders():
    tok = ByteTokenizer()
    logits = torch.randn(256, generator=torch.Generator().manual_seed(0))
    fig = G.plot_next_token_distribution(logits, 0.7, top_k=10, top_p=0.9,
                                         labels=tok.token_str, n_show=15)
    _render(fig)
    bars = fig.axes[0].patches
    assert len(bars) == 15
    grey = [b for b in bars if b.get_facecolor()[:3] == matplotlib.colors.to_rgb(G.CUT_COLOR)]
    assert len(grey) >= 5  # at most 10 of the 15 shown survive top-k
    with pytest.raises(ValueError, match="labels"):
        G.plot_next_token_distribution(logits, labels=["a", "b"])


def test_sampling_playground_builds(interactive):
    model, tok = tiny_model(), ByteTokenizer()
    ui = G.sampling_playground(model, tok, prompt="def f")
    assert isinstance(ui, w.VBox)
    image = ui.children[2]
    assert bytes(image.value).startswith(PNG_MAGIC)
    before = image.value
    ui.children[1].children[1].value = 3  # top-k slider redraws
    assert image.value != before
    assert isinstance(G.sampling_playground(logits=torch.randn(10)), w.VBox)
    with pytest.raises(ValueError, match="logits"):
        G.sampling_playground()


def test_playground_headless(headless):
    assert isinstance(G.sampling_playground(logits=torch.randn(10)), w.HTML)
    assert isinstance(G.side_by_side_generation({"a": tiny_model()}, ByteTokenizer()), w.HTML)


def test_side_by_side(interactive):
    models = {"classic": tiny_model("classic"), "modern": tiny_model("modern")}
    tok = ByteTokenizer()
    texts = G.compare_generations(models, tok, "def ", max_new_tokens=20, seed=3)
    assert set(texts) == {"classic", "modern"}
    assert texts == G.compare_generations(models, tok, "def ", max_new_tokens=20, seed=3)
    fig = G.plot_side_by_side(texts, prompt="def ")
    _render(fig)
    assert [ax.get_title() for ax in fig.axes] == ["classic", "modern"]
    ui = G.side_by_side_generation(models, tok, max_new_tokens=10)
    assert isinstance(ui, w.VBox) and "classic" in ui.children[1].value
