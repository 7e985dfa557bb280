"""Two models, one prompt: the same seed and sampling settings, the texts side by side."""

from __future__ import annotations

import html
import textwrap
from collections.abc import Mapping

import torch
from matplotlib.figure import Figure

from toolkit.generate import generate
from toolkit.notebook import NotReadyError
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    reports_unwritten,
    widget_functions,
)

#: The decoder; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"generate": generate}


def compare_generations(
    models: Mapping[str, torch.nn.Module],
    tokenizer,
    prompt: str,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    *,
    fns: dict | None = None,
) -> dict[str, str]:
    """Continue ``prompt`` with each model, same settings and seed; ``label -> text``
    (``fns={"generate": generate}``: the student's decoder in place of the toolkit's)."""
    f = widget_functions("compare_generations", fns, TOOLKIT_FUNCTIONS)
    if not models:
        raise ValueError("models must contain at least one model")
    out = {}
    for label, model in models.items():
        ids = (tokenizer.encode(prompt) or [0])[-(model.config.max_seq_len - 1) :]
        ids = torch.tensor([ids])
        n = min(max_new_tokens, model.config.max_seq_len - ids.size(1))
        generator = torch.Generator().manual_seed(seed)
        seq = f.generate(model, ids, max(n, 0), temperature, top_k, top_p, generator)
        out[label] = tokenizer.decode(seq[0, ids.size(1) :])
    return out


def plot_side_by_side(texts: Mapping[str, str], prompt: str = "", width: int = 48) -> Figure:
    """Generated texts in columns (monospace, wrapped at ``width`` characters)."""
    if not texts:
        raise ValueError("texts must contain at least one entry")
    fig = Figure(figsize=(4.2 * len(texts), 5.0), layout="constrained")
    axes = fig.subplots(1, len(texts), squeeze=False)[0]
    for ax, (label, text) in zip(axes, texts.items()):
        lines = []
        for line in (prompt + text).splitlines()[:40]:
            lines.extend(textwrap.wrap(line.expandtabs(4), width, replace_whitespace=False) or [""])
        ax.text(
            0.0,
            1.0,
            "\n".join(lines[:40]),
            family="monospace",
            fontsize=7,
            va="top",
            transform=ax.transAxes,
        )
        ax.set_title(label)
        ax.set_axis_off()
    return fig


@reports_unwritten(TOOLKIT_FUNCTIONS)
def side_by_side_generation(
    models: Mapping[str, torch.nn.Module],
    tokenizer,
    prompt: str = "def ",
    max_new_tokens: int = 200,
    *,
    fns=None,
):
    """Generate from two (or more) models with shared prompt, seed and sampling settings.

    Args:
        models: ``{label: model}``.
        tokenizer: encodes the prompt, decodes the continuations.
        prompt, max_new_tokens: the start of every text and how many tokens to add.
        fns: your own ``generate`` in place of the toolkit's, ``fns={"generate": generate}``.

    Returns:
        an ``ipywidgets.VBox`` (or a placeholder when headless).
    """
    widget_functions("side_by_side_generation", fns, TOOLKIT_FUNCTIONS)
    if not models:
        # In a notebook this means the training cell above stopped: say so in one line.
        raise NotReadyError("side_by_side_generation: no models to compare yet (`models` is "
                            "empty); the cell that trains them has not finished")
    if is_headless():
        return headless_placeholder("side_by_side_generation")
    import ipywidgets as w

    text = w.Text(value=prompt, description="prompt")
    temperature = w.FloatSlider(
        style=LABEL_STYLE, value=0.8, min=0.05, max=2.0, step=0.05, description="temperature"
    )
    top_k = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=100, description="top-k (0=off)")
    seed = w.IntText(value=0, description="seed")
    button = w.Button(description="Generate")
    columns = w.HTML()

    def run(_button=None):
        texts = compare_generations(
            models,
            tokenizer,
            text.value,
            max_new_tokens,
            temperature.value,
            top_k.value or None,
            seed=seed.value,
            fns=fns,
        )
        cells = "".join(
            f"<td style='vertical-align:top;padding:4px'><b>{html.escape(label)}</b>"
            f"<pre style='white-space:pre-wrap'>{html.escape(text.value + t)}</pre></td>"
            for label, t in texts.items()
        )
        columns.value = f"<table style='width:100%'><tr>{cells}</tr></table>"

    button.on_click(run)
    run()
    return w.VBox([w.HBox([text, temperature, top_k, seed, button]), columns])
