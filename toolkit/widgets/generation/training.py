"""Watching a model train: loss curves, drawn after training or live while it runs."""

from __future__ import annotations

import math
from collections.abc import Mapping

from matplotlib.figure import Figure

from toolkit.widgets.display import figure_to_png, headless_placeholder, is_headless


def _history_fields(history) -> dict[str, list]:
    """Accept a :class:`toolkit.train.TrainHistory` or a dict with the same keys."""
    get = history.get if isinstance(history, Mapping) else lambda k, d=None: getattr(history, k, d)
    out = {k: list(get(k, []) or []) for k in ("step", "train_loss", "val_step", "val_loss")}
    if len(out["step"]) != len(out["train_loss"]) or len(out["val_step"]) != len(out["val_loss"]):
        raise ValueError("history: step/train_loss and val_step/val_loss must have equal lengths")
    return out


# ---------------------------------------------------------------------------
# Loss curves
# ---------------------------------------------------------------------------


def plot_loss_curves(
    histories,
    *,
    uniform_loss: float | None = None,
    title: str = "Next-token loss",
    ax=None,
) -> Figure:
    """Training (line) and validation (markers) loss against the step.

    Args:
        histories: one history (``TrainHistory`` or dict with ``step``, ``train_loss``,
            ``val_step``, ``val_loss``) or a mapping ``label -> history`` to overlay runs.
        uniform_loss: draw this level (``ln V``) as a dashed reference line.
        title: axes title.
        ax: draw into these axes instead of a new figure.

    Returns:
        the ``Figure``.
    """
    if not isinstance(histories, Mapping) or "train_loss" in histories:
        histories = {"": histories}
    if ax is None:
        fig = Figure(figsize=(6.0, 3.6), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, (label, history) in enumerate(histories.items()):
        h = _history_fields(history)
        color = colors[i % len(colors)]
        prefix = f"{label} " if label else ""
        ax.plot(h["step"], h["train_loss"], color=color, alpha=0.6, lw=1, label=f"{prefix}train")
        if h["val_loss"]:
            ax.plot(
                h["val_step"],
                h["val_loss"],
                "o-",
                color=color,
                ms=4,
                lw=1.5,
                label=f"{prefix}validation",
            )
    if uniform_loss is not None:
        ax.axhline(uniform_loss, color="grey", ls="--", lw=1, label="uniform guess (ln V)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


class LiveLossPlot:
    """Training callback that redraws the loss curves every ``every`` steps.

    Usage in a notebook::

        live = LiveLossPlot(every=10, vocab_size=256)
        display(live.widget)
        train(model, corpus.train, corpus.val, cfg, callback=live)

    ``live.figure`` always holds the latest plot (also when headless, where no widget
    is drawn, which is how the tests use it).

    Args:
        every: redraw period in steps (the last evaluation is always drawn).
        vocab_size: if given, draw the uniform-guess level ``ln V``.
        title: plot title.
    """

    def __init__(self, every: int = 10, vocab_size: int | None = None, title: str = "Training"):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        self.every, self.title = every, title
        self.uniform_loss = math.log(vocab_size) if vocab_size else None
        self.figure = Figure(figsize=(6.0, 3.6), layout="constrained")
        self.ax = self.figure.add_subplot()
        self.n_redraws = 0
        self._image = None

    @property
    def widget(self):
        """An ``ipywidgets.Image`` that shows the live plot (a placeholder when headless)."""
        if is_headless():
            return headless_placeholder("LiveLossPlot")
        if self._image is None:
            import ipywidgets as w

            self._image = w.Image(format="png")
        return self._image

    def __call__(self, step: int, history) -> None:
        h = _history_fields(history)
        just_evaluated = bool(h["val_step"]) and h["val_step"][-1] == step
        if (step + 1) % self.every and not just_evaluated:
            return
        self.ax.clear()
        plot_loss_curves(
            history,
            uniform_loss=self.uniform_loss,
            title=f"{self.title}: step {step + 1}",
            ax=self.ax,
        )
        self.n_redraws += 1
        if self._image is not None:
            self._image.value = figure_to_png(self.figure)
