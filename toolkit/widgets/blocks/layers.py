"""Post-LN against Pre-LN in a deep stack: layer scales at initialisation, and warm-up runs.

* :func:`layer_scale_explorer`: a freshly initialised stack, Post-LN against Pre-LN.
  Left: the size (RMS) of each block's output. Post-LN renormalises after every block,
  so it stays at 1; Pre-LN's residual stream is a growing sum. Right: the norm of the
  loss gradient reaching each block's parameters. Post-LN's are larger than Pre-LN's at
  every depth and width (about 1.5 times at 6 blocks, twice or more at 24) and, at some
  widths (64 from 12 blocks on), grow towards the output; Pre-LN's stay flat or shrink a
  little towards the output. Post-LN's large gradients make the first full-size steps of
  Adam too large, which is what a learning-rate warm-up tames (arXiv 2002.04745). Move
  the depth slider and watch the gap widen.
* :func:`plot_warmup_runs`: the loss curves of :func:`toolkit.warmup.warmup_experiment`
  (Post-LN and Pre-LN, with and without warm-up) against the level of a model that has
  learnt nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.norm import LayerNorm
from toolkit.residual import PostLNBlock, PreLNBlock
from toolkit.warmup import VOCAB_SIZE, layer_scales
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

LAYOUT_COLORS = {"Post-LN": "tab:red", "Pre-LN": "tab:blue"}
#: The classes the explorer builds its stacks from; a student's own replace them through
#: ``fns``.
TOOLKIT_FUNCTIONS = {"PreLNBlock": PreLNBlock, "PostLNBlock": PostLNBlock, "LayerNorm": LayerNorm}


def plot_layer_scales(scales: Mapping[str, Mapping[str, Tensor]], title: str = "") -> Figure:
    """Activation RMS and gradient norm per block, one line per layout.

    Args:
        scales: ``{"Post-LN": layer_scales("post", ...), "Pre-LN": layer_scales("pre", ...)}``
            (any labels; each value has ``"activation"`` and ``"gradient"``, ``(L,)``).
        title: figure title.
    """
    if not scales:
        raise ValueError("scales must hold at least one layout")
    fig = Figure(figsize=(9.5, 3.4), layout="constrained")
    ax_act, ax_grad = fig.subplots(1, 2)
    for label, s in scales.items():
        for ax, key in ((ax_act, "activation"), (ax_grad, "gradient")):
            values = torch.as_tensor(s[key]).detach().float()
            layers = range(1, len(values) + 1)
            ax.plot(layers, values.numpy(), "o-", ms=3, label=label,
                    color=LAYOUT_COLORS.get(label))
    ax_act.set_title("size of each block's output (RMS)")
    ax_grad.set_title("gradient norm reaching each block")
    for ax in (ax_act, ax_grad):
        ax.set_xlabel("block (1 = next to the embeddings)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    ax_grad.set_ylim(bottom=0)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def plot_layer_scales_at_init(n_layers: int = 12, d_model: int = 64, *,
                              pre_ln_block: type = PreLNBlock,
                              post_ln_block: type = PostLNBlock,
                              norm: type = LayerNorm) -> Figure:
    """:func:`plot_layer_scales` of a fresh ``n_layers``-block stack in both layouts.

    The classes are those of :func:`toolkit.warmup.layer_scales`. The Pre-LN stack is
    measured first, so a block that cannot run yet fails before any time goes into the
    Post-LN one.
    """
    blocks = dict(pre_ln_block=pre_ln_block, post_ln_block=post_ln_block, norm=norm)
    pre = layer_scales("pre", n_layers, d_model, **blocks)
    scales = {"Post-LN": layer_scales("post", n_layers, d_model, **blocks), "Pre-LN": pre}
    return plot_layer_scales(scales, f"{n_layers} blocks, d_model = {d_model}, at initialisation")


def layer_scale_explorer(*, fns=None):
    """Depth and width controls over :func:`plot_layer_scales_at_init`.

    Args:
        fns: your own classes in place of the toolkit's: the blocks, called as
            ``PreLNBlock(d_model, n_heads)`` and ``PostLNBlock(d_model, n_heads)``, and the
            Pre-LN stack's final norm, ``LayerNorm(d_model)``: ``fns={"PreLNBlock":
            PreLNBlock, "PostLNBlock": PostLNBlock, "LayerNorm": LayerNorm}``.

    Returns:
        an ``ipywidgets.VBox`` (a placeholder when headless).
    """
    f = widget_functions("layer_scale_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("layer_scale_explorer")
    import ipywidgets as w

    controls = {
        "n_layers": w.IntSlider(style=LABEL_STYLE, value=12, min=2, max=24, description="blocks"),
        "d_model": w.Dropdown(style=LABEL_STYLE, options=[32, 64, 128], value=64,
                              description="d_model"),
    }

    def draw(n_layers, d_model):
        return plot_layer_scales_at_init(n_layers, d_model, pre_ln_block=f.PreLNBlock,
                                         post_ln_block=f.PostLNBlock, norm=f.LayerNorm)

    return live_figure(controls, draw, functions=f)


def _smooth(values: Sequence[float], window: int) -> list[float]:
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_warmup_runs(runs: Mapping[str, Sequence[float]], *, warmup_steps: int | None = None,
                     chance: float = math.log(VOCAB_SIZE), window: int = 10) -> Figure:
    """Loss curves (moving average over ``window`` steps) of the warm-up experiment.

    Args:
        runs: ``{label: losses}``, as :func:`toolkit.warmup.warmup_experiment` returns.
        warmup_steps: shade the warm-up phase.
        chance: the loss of a model that has learnt nothing (``ln 16`` for the sorting task).
    """
    if not runs:
        raise ValueError("runs must hold at least one run")
    fig = Figure(figsize=(7.0, 3.8), layout="constrained")
    ax = fig.add_subplot()
    for label, losses in runs.items():
        layout = "Post-LN" if label.startswith("Post") else "Pre-LN"
        style = "--" if "no warm-up" in label else "-"
        finite = [v if math.isfinite(v) else float("nan") for v in losses]
        ax.plot(_smooth(finite, window), style, color=LAYOUT_COLORS[layout], label=label)
    ax.axhline(chance, color="grey", ls=":", lw=1, label=f"learnt nothing (ln {VOCAB_SIZE})")
    if warmup_steps:
        ax.axvspan(0, warmup_steps, color="grey", alpha=0.1, lw=0)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (moving average)")
    ax.set_title("Sorting with a deep stack: Post-LN vs Pre-LN, with and without warm-up")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig
