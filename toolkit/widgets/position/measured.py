"""The context-extension experiment, measured: loss by position and passkey accuracy.

Draws what :func:`toolkit.long_context.measure` returns (from the student's own
evaluation functions in Assignment 02, or the toolkit's in the lecture): on the left the
next-token loss against the position, averaged over bins of ``smooth`` tokens, for every
model and RoPE method, with the training length ``L`` marked; on the right the passkey
accuracy of one model against the prompt length (in multiples of ``L``) and the depth of
the key, as a grid of numbers.
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from toolkit.long_context.experiment import passkey_table
from toolkit.widgets.display import LABEL_STYLE, headless_placeholder, is_headless, live_figure

_COLORS = {"rope": "tab:blue", "learned": "tab:brown", "alibi": "tab:green", "none": "black",
           "rope + PI": "tab:orange", "rope + NTK": "tab:purple",
           "rope + dynamic NTK": "tab:pink", "rope + YaRN": "tab:red"}


def _binned(loss: torch.Tensor, width: int) -> tuple[list[float], list[float]]:
    """Mean of consecutive bins of ``width`` positions: (bin centres, bin means)."""
    n = len(loss) // width * width
    means = loss[:n].view(-1, width).mean(dim=1)
    centres = (torch.arange(len(means)) * width + width / 2).tolist()
    return centres, means.tolist()


def plot_context_extension(results: dict, smooth: int = 32, variant: str | None = None
                           ) -> Figure:
    """Loss by position for every variant (left) and one variant's passkey grid (right).

    Args:
        results: :func:`toolkit.long_context.measure`'s dict.
        smooth: positions per bin of the loss curves.
        variant: the model whose passkey accuracy is drawn by length and depth (default:
            the first).
    """
    if not isinstance(smooth, int) or smooth < 1:
        raise ValueError(f"smooth must be an int >= 1, got {smooth!r}")
    L = results["train_len"]
    labels = list(results["loss"])
    variant = labels[0] if variant is None else variant
    if variant not in results["passkey"]:
        raise ValueError(f"variant must be one of {labels}, got {variant!r}")
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    ax_loss, ax_key = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1.6, 1]})
    for label in labels:
        x, y = _binned(results["loss"][label], smooth)
        ax_loss.plot(x, y, color=_COLORS.get(label), lw=2 if "+" not in label else 1.2,
                     ls="-" if "+" not in label else "--", label=label)
    for k in (1, 2, 4):
        ax_loss.axvline(k * L, color="grey", lw=1, ls=":" if k > 1 else "-")
    ax_loss.text(L, ax_loss.get_ylim()[1], " L (training length)", va="top", fontsize=8)
    ax_loss.set(xlabel="position in the window", ylabel=f"loss (nats, mean of {smooth} positions)",
                title="next-token loss by position on held-out text")
    ax_loss.legend(fontsize=7, ncol=2)

    cells = results["passkey"][variant]
    multiples = sorted({m for m, _ in cells})
    depths = sorted({d for _, d in cells})
    grid = torch.full((len(depths), len(multiples)), float("nan"))
    for (m, d), accuracy in cells.items():
        if accuracy is not None:
            grid[depths.index(d), multiples.index(m)] = accuracy
    ax_key.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
    for i in range(len(depths)):
        for j in range(len(multiples)):
            value = grid[i, j].item()
            ax_key.text(j, i, "n/a" if value != value else f"{value:.0%}", ha="center",
                        va="center", color="white" if value != value or value < 0.6 else "black")
    ax_key.set_xticks(range(len(multiples)), [f"{m}L" for m in multiples])
    ax_key.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax_key.set(xlabel="prompt length (L = training length)", ylabel="depth of the key",
               title=f"passkey accuracy: {variant}")
    return fig


def context_extension_explorer(results: dict):
    """Smoothing of the loss curves and the model whose passkey grid is shown."""
    if is_headless():
        return headless_placeholder("context_extension_explorer")
    import ipywidgets as w

    labels = list(results["loss"])
    controls = {
        "smooth": w.IntSlider(style=LABEL_STYLE, value=32, min=8, max=128, step=8,
                              description="positions per bin"),
        "variant": w.Dropdown(style=LABEL_STYLE, options=labels, value=labels[0],
                              description="passkey grid of"),
    }
    table = passkey_table(results)

    def note(variant, **_):
        row = ", ".join(f"{m}L: {'n/a' if a is None else f'{a:.0%}'}"
                        for m, a in table[variant].items())
        return f"Passkey accuracy of <b>{variant}</b>, mean over depths: {row}."

    def draw(**values):
        return plot_context_extension(results, **values)

    return live_figure(controls, draw, note, tight=True)
