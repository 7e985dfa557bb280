"""toolkit.widgets.beyond.recall: the MQAR measurement drawn (headless), on a measurement of
tiny untrained models so the test runs in seconds."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402

from toolkit.hybrid.experiment import MQARConfig, build_model, measure  # noqa: E402
from toolkit.hybrid.model import state_numbers  # noqa: E402
from toolkit.widgets import beyond as W  # noqa: E402
from toolkit.widgets import display as D  # noqa: E402

CFG = MQARConfig(vocab_size=16, d_model=16, n_heads=2, d_state=4, max_seq_len=16)


@pytest.fixture(scope="module")
def results():
    models = {p: build_model(p, CFG).eval() for p in ("AA", "MM", "MA")}
    return measure(models, CFG, eval_pairs=(2, 4), n_sequences=8)


def test_measure_gives_what_the_plot_reads(results):
    assert list(results["recall"]) == ["AA", "MM", "MA"]
    assert all(list(r) == [2, 4] and all(0 <= v <= 1 for v in r.values())
               for r in results["recall"].values())
    assert results["seq_len"] == 16 and results["vocab_size"] == 16
    assert results["state"]["MM"] == state_numbers("MM", 16, 16, 4)


def test_plot_and_widget_build_headless(results, monkeypatch):
    pytest.importorskip("ipywidgets")
    fig = W.plot_recall(results, seq_len=1024)
    recall_axis, state_axis = fig.axes
    assert len(recall_axis.get_lines()) == 3 + 1  # + chance
    mamba = [line for line in state_axis.get_lines() if line.get_label() == "MM"][0]
    assert len(set(mamba.get_ydata())) == 1, "a Mamba model's state does not grow"
    attention = [line for line in state_axis.get_lines() if line.get_label() == "AA"][0]
    assert list(attention.get_ydata()) == sorted(attention.get_ydata())
    assert D.figure_to_png(fig, dpi=40).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="seq_len"):
        W.plot_recall(results, seq_len=0)
    monkeypatch.delenv(D.HEADLESS_ENV, raising=False)
    box = W.recall_explorer(results)
    image = next(c for c in box.children if c.__class__.__name__ == "Image")
    assert bytes(image.value).startswith(b"\x89PNG")
    monkeypatch.setenv(D.HEADLESS_ENV, "1")
    assert W.recall_explorer(results).__class__.__name__ == "HTML"
