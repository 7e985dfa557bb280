"""Widgets for the block around attention: Post-LN vs Pre-LN, and what a GLU gate does.

What each one is for
--------------------
* :func:`layer_scale_explorer`: a deep stack at initialisation, Post-LN against
  Pre-LN. Left: the size (RMS) of each block's output. Post-LN renormalises after every
  block, so it stays at 1; Pre-LN's residual stream is a growing sum. Right: the norm of
  the loss gradient reaching each block's parameters. Post-LN's grows towards the
  output, Pre-LN's is flat and smaller: Post-LN's last layers take the largest steps at
  the start of training, which is what a learning-rate warm-up tames (arXiv 2002.04745).
  Move the depth slider and watch the gap widen.
* :func:`plot_warmup_runs`: the loss curves of :func:`toolkit.warmup.warmup_experiment`
  (Post-LN and Pre-LN, with and without warm-up) against the level of a model that has
  learnt nothing.
* :func:`glu_gate_explorer`: one token through a gated feed-forward network
  ``down(act(gate(x)) * up(x))``. The three panels show, per hidden unit, the gate
  ``act(W_gate x)``, the value ``W_up x`` and their product. A ReLU gate shuts units
  exactly (0), a sigmoid gate only dims them (0..1), SiLU and GELU shut most negative
  units softly and let a few slightly negative values through. Change the input token
  and a different set of units opens.

Every builder has a pure ``plot_*`` function returning a ``matplotlib.figure.Figure``
(tests render them with Agg). Builders that show a function students write take it as
an argument (``layer_scale_explorer(pre_ln_block=PreLNBlock)``,
``glu_gate_explorer(ffn_class=GatedFeedForward)``). With ``TOOLKIT_HEADLESS=1`` they
return a placeholder and draw nothing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.ffn import GatedFeedForward
from toolkit.residual import PreLNBlock
from toolkit.warmup import VOCAB_SIZE, layer_scales
from toolkit.widgets.display import LABEL_STYLE, figure_to_png, headless_placeholder, is_headless

LAYOUT_COLORS = {"Post-LN": "tab:red", "Pre-LN": "tab:blue"}
GATE_ACTIVATIONS = ("silu", "gelu", "relu", "sigmoid")


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


def layer_scale_explorer(pre_ln_block: type = PreLNBlock):
    """Depth and width sliders over :func:`plot_layer_scales` (Post-LN vs Pre-LN at init).

    Args:
        pre_ln_block: the Pre-LN block class to measure (yours, or the toolkit's).

    Returns:
        an ``ipywidgets.VBox`` (a placeholder when headless).
    """
    if is_headless():
        return headless_placeholder("layer_scale_explorer")
    import ipywidgets as w

    depth = w.IntSlider(style=LABEL_STYLE, value=12, min=2, max=24, description="blocks")
    width = w.Dropdown(style=LABEL_STYLE, options=[32, 64, 128], value=64, description="d_model")
    image = w.Image(format="png")

    def redraw(_change=None):
        scales = {
            "Post-LN": layer_scales("post", depth.value, width.value),
            "Pre-LN": layer_scales("pre", depth.value, width.value, pre_ln_block=pre_ln_block),
        }
        image.value = figure_to_png(plot_layer_scales(
            scales, f"{depth.value} blocks, d_model = {width.value}, at initialisation"))

    for control in (depth, width):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([depth, width]), image])


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


def gate_example(ffn_class: type = GatedFeedForward, activation: str = "silu", token: int = 0,
                 scale: float = 1.0, *, d_model: int = 16, d_hidden: int = 24,
                 seed: int = 0) -> dict[str, Tensor]:
    """Gate, value and product of each hidden unit for one input vector.

    The network is ``ffn_class(d_model, d_hidden, activation)`` with weights drawn from
    ``seed`` (the same weights for every activation); the input is ``scale`` times the
    ``token``-th of six fixed random vectors.

    Returns:
        ``{"gate": act(W_gate x), "value": W_up x, "product": gate * value}``, each ``(d_hidden,)``.
    """
    if not 0 <= token < 6:
        raise ValueError(f"token must be in 0..5, got {token}")
    rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    ffn = ffn_class(d_model, d_hidden, activation)
    torch.random.set_rng_state(rng)  # leave the caller's random stream alone
    x = scale * torch.randn(6, d_model, generator=torch.Generator().manual_seed(seed + 1))[token]
    with torch.no_grad():
        gate = ffn.act(ffn.gate_proj(x))  # act(W_gate x)
        value = ffn.up_proj(x)  # W_up x
    return {"gate": gate, "value": value, "product": gate * value}


def plot_glu_gates(example: Mapping[str, Tensor], title: str = "") -> Figure:
    """Three bar panels over the hidden units: gate, value, gate * value."""
    fig = Figure(figsize=(9.5, 4.6), layout="constrained")
    axes = fig.subplots(3, 1, sharex=True)
    gate = example["gate"]
    shut = gate.abs() < 1e-3
    panels = (("gate", "gate act(W_gate x)"), ("value", "value W_up x"),
              ("product", "gate * value (what W_down sees)"))
    for ax, (key, label) in zip(axes, panels):
        v = example[key].float()
        color = "tab:green" if key == "gate" else "tab:blue"
        colors = ["lightgrey" if s else color for s in shut]
        ax.bar(range(len(v)), v.numpy(), color=colors)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3, axis="y")
    axes[-1].set_xlabel(f"hidden unit (grey: gate shut, {int(shut.sum())} of {len(gate)})")
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def glu_gate_explorer(ffn_class: type = GatedFeedForward):
    """Activation, input token and input scale controls over :func:`plot_glu_gates`.

    Args:
        ffn_class: a gated FFN class called as ``ffn_class(d_model, d_hidden, activation)``
            with ``gate_proj``, ``up_proj`` and ``act`` (yours, or the toolkit's).
    """
    if is_headless():
        return headless_placeholder("glu_gate_explorer")
    import ipywidgets as w

    gate_example(ffn_class)  # fail early on a class that does not fit
    act = w.Dropdown(style=LABEL_STYLE, options=list(GATE_ACTIVATIONS), value="silu",
                     description="gate activation")
    token = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=5, description="input token")
    scale = w.FloatLogSlider(style=LABEL_STYLE, value=1.0, base=10, min=-1, max=1, step=0.1,
                             description="input scale")
    image = w.Image(format="png")

    def redraw(_change=None):
        example = gate_example(ffn_class, act.value, token.value, scale.value)
        image.value = figure_to_png(plot_glu_gates(
            example, f"{act.value} gate, token {token.value}, |x| scaled by {scale.value:.2g}"))

    for control in (act, token, scale):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([act, token, scale]), image])
