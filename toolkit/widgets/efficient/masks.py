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
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: The patterns the gallery draws; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {
    "causal_mask": causal_mask,
    "sliding_window_mask": sliding_window_mask,
    "band_mask": band_mask,
    "dilated_mask": dilated_mask,
    "global_token_mask": global_token_mask,
    "bigbird_mask": bigbird_mask,
    "mask_cell_count": mask_cell_count,
}


def gallery_masks(
    n: int = 32,
    window: int = 4,
    dilation: int = 2,
    n_global: int = 1,
    block_size: int = 4,
    n_random_blocks: int = 1,
    seed: int = 0,
    *,
    fns: dict | None = None,
) -> dict[str, torch.Tensor]:
    """The patterns shown by :func:`plot_mask_gallery`, by title: bool ``(n, n)`` masks.

    ``fns``: the student's ``causal_mask``, ``sliding_window_mask``, ``band_mask``,
    ``dilated_mask``, ``global_token_mask`` or ``bigbird_mask``, by name, in place of the
    toolkit's.
    """
    f = widget_functions("gallery_masks", fns, TOOLKIT_FUNCTIONS)
    window = min(window, n)
    # A short sequence has few blocks: never ask for more random ones than there are.
    n_random_blocks = min(n_random_blocks, -(-n // block_size))
    band = f.band_mask(n, window - 1)
    return {
        "causal (dense)": f.causal_mask(n),
        f"sliding window w={window}": f.sliding_window_mask(n, window),
        f"band |i-j| <= {window - 1}": band,
        f"dilated w={window}, dilation={dilation}": f.dilated_mask(n, window, dilation),
        f"band + {n_global} global": f.global_token_mask(n, range(min(n_global, n)), base=band),
        f"BigBird (block {block_size}, {n_random_blocks} random)": f.bigbird_mask(
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
    *,
    fns: dict | None = None,
) -> Figure:
    """Six sparse patterns as ``n x n`` images, each titled with its exact cell count
    (``fns`` as in :func:`gallery_masks`, ``mask_cell_count`` too)."""
    f = widget_functions("plot_mask_gallery", fns, TOOLKIT_FUNCTIONS)
    masks = gallery_masks(
        n, window, dilation, n_global, block_size, n_random_blocks, seed, fns=fns
    )
    fig = Figure(figsize=(11, 7), layout="constrained")
    axes = fig.subplots(2, 3)
    for ax, (title, mask) in zip(axes.flat, masks.items()):
        cells = f.mask_cell_count(mask)
        ax.imshow(mask.numpy(), cmap="Blues", vmin=0, vmax=1, interpolation="nearest")
        ax.set_title(f"{title}\n{cells} cells = {cells / n**2:.0%} of n\u00b2", fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
    fig.suptitle(f"Who may attend to whom (n = {n}; blue = may attend)")
    return fig


def mask_gallery(*, fns=None):
    """Sliders for ``n``, window, dilation, global tokens and BigBird's random blocks.

    Args:
        fns: your own mask functions in place of the toolkit's, by name:
            ``causal_mask``, ``sliding_window_mask``, ``band_mask``, ``dilated_mask``,
            ``global_token_mask``, ``bigbird_mask``, ``mask_cell_count``; e.g.
            ``fns={"band_mask": band_mask}``.
    """
    f = widget_functions("mask_gallery", fns, TOOLKIT_FUNCTIONS)
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
        return plot_mask_gallery(n, window, dilation, n_global, 4, n_random_blocks, seed, fns=fns)

    def note(n, window, **_):
        return (
            f"A sliding window costs about n &times; w = {n * min(window, n)} "
            f"cells instead of n&sup2; = {n**2}. Stacking L window layers lets "
            "information travel about L &times; w tokens (Mistral: 32 &times; 4096 = 131,072)."
        )

    c = list(controls.values())
    return live_figure(controls, draw, note, rows=[c[:3], c[3:]], functions=f)
