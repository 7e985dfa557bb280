"""Sparse attention patterns side by side, each with its exact number of computed cells."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from toolkit.masks import (
    band_mask,
    bigbird_mask,
    causal_mask,
    dilated_mask,
    global_token_mask,
    mask_cell_count,
    sliding_window_mask,
)
from toolkit.widgets.display import LABEL_STYLE, headless_placeholder, is_headless, live_figure


def gallery_masks(
    n: int = 32,
    window: int = 4,
    dilation: int = 2,
    n_global: int = 1,
    block_size: int = 4,
    n_random_blocks: int = 1,
    seed: int = 0,
) -> dict[str, torch.Tensor]:
    """The patterns shown by :func:`plot_mask_gallery`, by title: bool ``(n, n)`` masks."""
    window = min(window, n)
    band = band_mask(n, window - 1)
    return {
        "causal (dense)": causal_mask(n),
        f"sliding window w={window}": sliding_window_mask(n, window),
        f"band |i-j| <= {window - 1}": band,
        f"dilated w={window}, dilation={dilation}": dilated_mask(n, window, dilation),
        f"band + {n_global} global": global_token_mask(n, range(min(n_global, n)), base=band),
        f"BigBird (block {block_size})": bigbird_mask(
            n,
            block_size,
            window_blocks=3,
            global_blocks=1,
            random_blocks=n_random_blocks,
            seed=seed,
        ),
    }


def plot_mask_gallery(
    n: int = 32,
    window: int = 4,
    dilation: int = 2,
    n_global: int = 1,
    block_size: int = 4,
    n_random_blocks: int = 1,
    seed: int = 0,
) -> Figure:
    """Six sparse patterns as ``n x n`` images, each titled with its exact cell count."""
    masks = gallery_masks(n, window, dilation, n_global, block_size, n_random_blocks, seed)
    fig = Figure(figsize=(11, 7), layout="constrained")
    axes = fig.subplots(2, 3)
    for ax, (title, mask) in zip(axes.flat, masks.items()):
        cells = mask_cell_count(mask)
        ax.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"{title}\n{cells} cells = {cells / n**2:.0%} of n\u00b2", fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
    fig.suptitle(f"Who may attend to whom (n = {n}; blue = may attend)")
    return fig


def mask_gallery():
    """Sliders for ``n``, window, dilation, global tokens and BigBird's random blocks."""
    if is_headless():
        return headless_placeholder("mask_gallery")
    import ipywidgets as w

    controls = {
        "n": w.IntSlider(style=LABEL_STYLE, value=32, min=8, max=64, step=4, description="n"),
        "window": w.IntSlider(style=LABEL_STYLE, value=4, min=1, max=16, description="window"),
        "dilation": w.IntSlider(
            style=LABEL_STYLE, value=2, min=1, max=6, description="dilation"
        ),
        "n_global": w.IntSlider(style=LABEL_STYLE, value=1, min=0, max=4, description="global"),
        "n_random_blocks": w.IntSlider(
            style=LABEL_STYLE, value=1, min=0, max=4, description="random blocks"
        ),
        "seed": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed"),
    }

    def draw(n, window, dilation, n_global, n_random_blocks, seed):
        return plot_mask_gallery(n, window, dilation, n_global, 4, n_random_blocks, seed)

    def note(n, window, **_):
        return (
            f"A sliding window costs about n &times; w = {n * min(window, n)} "
            f"cells instead of n&sup2; = {n**2}. Stacking L window layers lets "
            "information travel about L &times; w tokens (Mistral: 32 &times; 4096 = 131,072)."
        )

    c = list(controls.values())
    return live_figure(controls, draw, note, rows=[c[:3], c[3:]])
