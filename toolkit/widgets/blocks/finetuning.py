"""Fine-tuning measured: the accuracy curves, and what ``[CLS]`` attends to.

Draws what a fine-tuning run measured (Assignment 05, part 9, from the student's own
classifier; the lecture, from the toolkit's). ``results`` holds, for each run (say
``"pre-trained"`` and ``"from scratch"``):

* ``results["curves"][run]``: :func:`toolkit.finetune.finetuning_curve`'s dict, the
  training and held-out accuracy against the step;
* ``results["attention"][run]``: one entry per chosen held-out example, a dict with
  ``tokens`` (the ``T`` token strings), ``weights`` (``(n_layers, n_heads, T)``, the
  attention of the ``[CLS]`` query: :func:`toolkit.finetune.cls_attention`), ``label``
  and ``predicted`` (class names);
* ``results["chance"]``: the accuracy of always predicting the commonest class.

:func:`finetuning_results` builds that dict from the fine-tuned classifiers. On the left
the curves of every run, on the right one run's ``[CLS]`` attention over the
tokens of one example, a row per (layer, head): where the vector the classifier reads
gathers its information from.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.finetune import attention_examples, majority_accuracy
from toolkit.widgets.display import LABEL_STYLE, headless_placeholder, is_headless, live_figure

_COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def finetuning_results(classifiers: dict, curves: dict, data: dict[str, Tensor],
                       indices: Sequence[int], vocab, class_names: Sequence[str]) -> dict:
    """What :func:`finetuning_explorer` draws: ``curves`` (run -> its
    :func:`toolkit.finetune.finetuning_curve`), and for every run of ``classifiers`` the
    ``[CLS]`` attention on the examples ``indices`` of ``data`` (the held-out split);
    ``chance`` is the commonest class's share of ``data``."""
    return {"curves": curves, "chance": majority_accuracy(data),
            "attention": {run: attention_examples(clf, data, list(indices), vocab, class_names)
                          for run, clf in classifiers.items()}}


def plot_finetuning(results: dict, run: str | None = None, example: int = 0) -> Figure:
    """Accuracy curves of every run (left) and ``run``'s ``[CLS]`` attention on held-out
    example ``example`` (right).

    Args:
        results: see the module docstring.
        run: whose attention is drawn (default: the first run).
        example: index into ``results["attention"][run]``.
    """
    runs = list(results["curves"])
    run = runs[0] if run is None else run
    if run not in results["attention"]:
        raise ValueError(f"run must be one of {list(results['attention'])}, got {run!r}")
    examples = results["attention"][run]
    if not isinstance(example, int) or not 0 <= example < len(examples):
        raise ValueError(f"example must be an int in [0, {len(examples)}), got {example!r}")
    fig = Figure(figsize=(13, 4.6), layout="constrained")
    ax_curve, ax_attn = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.5]})
    for color, name in zip(_COLORS, runs):
        curve = results["curves"][name]
        ax_curve.plot(curve["step"], curve["val"], color=color, lw=2, label=f"{name}: held-out")
        ax_curve.plot(curve["step"], curve["train"], color=color, lw=1, ls="--",
                      label=f"{name}: training")
    if "chance" in results:
        ax_curve.axhline(results["chance"], color="grey", lw=1, ls=":")
        ax_curve.text(0, results["chance"], " commonest class", va="bottom", fontsize=8)
    ax_curve.set(xlabel="fine-tuning step", ylabel="accuracy", ylim=(0, 1.02),
                 title="fine-tuning: accuracy against the step")
    ax_curve.legend(fontsize=7)

    entry = examples[example]
    weights = torch.as_tensor(entry["weights"], dtype=torch.float32)  # (L, H, T)
    n_layers, n_heads, T = weights.shape
    grid = weights.reshape(n_layers * n_heads, T)
    ax_attn.imshow(grid, vmin=0, vmax=max(float(grid.max()), 1e-6), cmap="viridis",
                   aspect="auto")
    ax_attn.set_xticks(range(T), entry["tokens"], rotation=90, fontsize=7)
    ax_attn.set_yticks(range(n_layers * n_heads),
                       [f"layer {i // n_heads} head {i % n_heads}" for i in range(len(grid))],
                       fontsize=7)
    ax_attn.set(title=f"{run}: what [CLS] attends to (class {entry['label']}, "
                      f"predicted {entry['predicted']})")
    return fig


def finetuning_explorer(results: dict):
    """The run whose ``[CLS]`` attention is shown, and the held-out example."""
    if is_headless():
        return headless_placeholder("finetuning_explorer")
    import ipywidgets as w

    runs = list(results["attention"])
    n = len(results["attention"][runs[0]])
    controls = {
        "run": w.Dropdown(style=LABEL_STYLE, options=runs, value=runs[0],
                          description="[CLS] attention of"),
        "example": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=n - 1,
                               description="held-out example"),
    }

    def note(run, example, **_):
        finals = ", ".join(f"{name} {curve['val'][-1]:.0%}"
                           for name, curve in results["curves"].items())
        entry = results["attention"][run][example]
        return (f"Final held-out accuracy: {finals}. Example {example}: class "
                f"<b>{entry['label']}</b>, {run} predicts <b>{entry['predicted']}</b>.")

    def draw(**values):
        return plot_finetuning(results, **values)

    return live_figure(controls, draw, note, tight=True)
