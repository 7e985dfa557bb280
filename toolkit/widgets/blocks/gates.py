"""What the gate of a gated feed-forward network lets through.

:func:`glu_gate_explorer` runs one token through a gated feed-forward network
``down(act(gate(x)) * up(x))``. The three panels show, per hidden unit, the gate
``act(W_gate x)``, the value ``W_up x`` and their product. A ReLU gate shuts units
exactly (0), a sigmoid gate only dims them (0..1), SiLU and GELU shut most negative units
softly and let a few slightly negative values through. Change the input token and a
different set of units opens.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.ffn import GatedFeedForward
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

GATE_ACTIVATIONS = ("silu", "gelu", "relu", "sigmoid")
#: How many fixed random input vectors ("tokens") the explorer offers.
N_TOKENS = 6
#: The gated network the explorer runs; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"GatedFeedForward": GatedFeedForward}


def gate_example(ffn_class: type = GatedFeedForward, activation: str = "silu", token: int = 0,
                 scale: float = 1.0, *, d_model: int = 16, d_ff: int = 24,
                 seed: int = 0) -> dict[str, Tensor]:
    """Gate, value and product of each hidden unit for one input vector.

    The network is ``ffn_class(d_model, d_ff, activation)`` with weights drawn from
    ``seed`` (the same weights for every activation); the input is ``scale`` times the
    ``token``-th of :data:`N_TOKENS` fixed random vectors.

    Returns:
        ``{"gate": act(W_gate x), "value": W_up x, "product": gate * value}``, each ``(d_ff,)``.
    """
    if not 0 <= token < N_TOKENS:
        raise ValueError(f"token must be in 0..{N_TOKENS - 1}, got {token}")
    rng = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        ffn = ffn_class(d_model, d_ff, activation)
    finally:
        torch.random.set_rng_state(rng)  # leave the caller's random stream alone
    x = scale * torch.randn(N_TOKENS, d_model,
                            generator=torch.Generator().manual_seed(seed + 1))[token]
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


def glu_gate_explorer(*, fns=None):
    """Activation, input token and input scale controls over :func:`plot_glu_gates`.

    Args:
        fns: your own gated FFN class in place of the toolkit's, called as
            ``GatedFeedForward(d_model, d_ff, activation)`` and read through its
            ``gate_proj``, ``up_proj`` and ``act``: ``fns={"GatedFeedForward":
            GatedFeedForward}``.
    """
    f = widget_functions("glu_gate_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("glu_gate_explorer")
    import ipywidgets as w

    controls = {
        "activation": w.Dropdown(style=LABEL_STYLE, options=list(GATE_ACTIVATIONS),
                                 value="silu", description="gate activation"),
        "token": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=N_TOKENS - 1,
                             description="input token"),
        "scale": w.FloatLogSlider(style=LABEL_STYLE, value=1.0, base=10, min=-1, max=1,
                                  step=0.1, description="input scale"),
    }

    def draw(activation, token, scale):
        example = gate_example(f.GatedFeedForward, activation, token, scale)
        return plot_glu_gates(
            example, f"{activation} gate, token {token}, |x| scaled by {scale:.2g}")

    return live_figure(controls, draw, functions=f)
