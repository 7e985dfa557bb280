"""Differential attention on a sequence with distractors: the two maps, their difference, lambda.

A synthetic retrieval (arXiv 2410.05258's motivation, in miniature): one *needle* key
among ``n`` keys holds the answer. The first query is the needle's feature plus a chance
direction that also matches every other key a little ("attention noise"); the second
query is a weaker copy of that chance direction alone. Both softmax maps spread weight
over the distractors; their difference ``A1 - lambda A2`` cancels part of it. The
student moves ``lambda``; nothing here chooses it from the distractors' weights.
"""

from __future__ import annotations

import math

import torch
from matplotlib.figure import Figure

from toolkit.differential import differential_attention
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

TOOLKIT_FUNCTIONS = {"differential_attention": differential_attention}

#: Width of the toy's queries and keys.
D = 32


def distractor_example(n: int = 64, noise: float = 1.5, seed: int = 0) -> dict[str, torch.Tensor]:
    """One query row over ``n`` keys, key 0 the needle.

    Returns ``q1, q2 (1, 1, 1, D)``, ``keys, values (1, 1, n, D)`` as float64 tensors.
    ``q1`` = needle feature + chance direction (scaled by ``noise``); ``q2`` = 0.8 x the
    chance direction: the second map sees the noise but not the signal, and not exactly
    as strongly as the first.
    """
    if n < 2:
        raise ValueError(f"n must be at least 2 (a needle and a distractor), got {n}")
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, D, generator=g, dtype=torch.float64)
    keys[:, 0] = 0.0
    keys[0, 0] = 1.0  # only the needle has feature 0
    chance = torch.randn(D, generator=g, dtype=torch.float64)
    chance[0] = 0.0
    chance = chance / chance.norm() * noise * math.sqrt(D)
    signal = torch.zeros(D, dtype=torch.float64)
    signal[0] = 4.0 * math.sqrt(D)
    values = torch.randn(n, D, generator=g, dtype=torch.float64)

    def heads(t):
        return t.reshape(1, 1, -1, D)

    return {"q1": heads(chance + signal), "q2": heads(0.8 * chance), "keys": heads(keys),
            "values": heads(values)}


def differential_maps(n=64, lam=0.5, noise=1.5, seed=0, *, fns=None) -> dict[str, object]:
    """The two maps (identity value matrix), their difference and the output's quality.

    Returns ``{"a1", "a2", "diff": (n,) tensors, "needle_share": weight of the needle in
    the difference over the sum of absolute weights, "cosine": cos(output, needle value)
    for this lambda, "lambdas", "cosines": the same on a grid of lambda in [0, 1]}``.
    ``fns``: the student's ``differential_attention``.
    """
    f = widget_functions("differential_maps", fns, TOOLKIT_FUNCTIONS)
    ex = distractor_example(n, noise, seed)
    q1, q2, k, v = ex["q1"], ex["q2"], ex["keys"], ex["values"]
    eye = torch.eye(n, dtype=torch.float64).reshape(1, 1, n, n)  # values = I: out = the weights
    a1 = f.differential_attention(q1, k, q2, k, eye, 0.0)[0, 0, 0]  # lam 0: map 1 alone
    diff = f.differential_attention(q1, k, q2, k, eye, lam)[0, 0, 0]
    a2 = (a1 - diff) / lam if lam else f.differential_attention(q2, k, q1, k, eye, 0.0)[0, 0, 0]

    def cosine(lam_value):
        out = f.differential_attention(q1, k, q2, k, v, lam_value)[0, 0, 0]
        return float(torch.cosine_similarity(out, v[0, 0, 0], dim=0))

    lambdas = [i / 20 for i in range(21)]
    return {"a1": a1, "a2": a2, "diff": diff,
            "needle_share": float(diff[0] / diff.abs().sum().clamp_min(1e-12)),
            "cosine": cosine(lam), "lambdas": lambdas, "cosines": [cosine(x) for x in lambdas]}


def plot_differential_maps(n=64, lam=0.5, noise=1.5, seed=0, *, fns=None) -> Figure:
    """Map 1, map 2, map 1 - lambda map 2 (needle in red), and cos(output, needle) vs lambda."""
    r = differential_maps(n, lam, noise, seed, fns=fns)
    fig = Figure(figsize=(13, 3.0), layout="constrained")
    axes = fig.subplots(1, 4)
    colors = ["tab:red"] + ["tab:grey"] * (n - 1)
    panels = [("map 1: softmax(q1 k / sqrt d)", r["a1"]),
              ("map 2: softmax(q2 k / sqrt d)", r["a2"]),
              (f"map 1 - {lam:.2f} x map 2", r["diff"])]
    for ax, (title, w) in zip(axes, panels):
        ax.bar(range(n), w.numpy(), color=colors, width=1.0)
        ax.axhline(0.0, color="black", linewidth=0.5)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("key (red: the needle)")
    axes[2].set_title(f"map 1 - {lam:.2f} x map 2\nneedle share {r['needle_share']:.0%}",
                      fontsize=9)
    ax = axes[3]
    ax.plot(r["lambdas"], r["cosines"], color="tab:blue")
    ax.plot([lam], [r["cosine"]], "o", color="tab:red")
    ax.set_xlabel("lambda")
    ax.set_ylabel("cos(output, needle value)")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title(f"output quality: {r['cosine']:.2f} at lambda = {lam:.2f}", fontsize=9)
    fig.suptitle(f"Differential attention over {n} keys, one needle (noise {noise:.1f})",
                 fontsize=10)
    return fig


def differential_explorer(*, fns=None):
    """Sliders for lambda, the number of keys, the noise and the seed.

    Args:
        fns: your ``differential_attention`` in place of the toolkit's:
            ``differential_explorer(fns={"differential_attention": differential_attention})``.
    """
    f = widget_functions("differential_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("differential_explorer")
    import ipywidgets as w

    controls = {
        "lam": w.FloatSlider(style=LABEL_STYLE, value=0.5, min=0.0, max=1.0, step=0.05,
                             description="lambda"),
        "n": w.SelectionSlider(style=LABEL_STYLE, options=[16, 32, 64, 128, 256, 512],
                               value=64, description="keys"),
        "noise": w.FloatSlider(style=LABEL_STYLE, value=1.5, min=0.0, max=3.0, step=0.25,
                               description="noise"),
        "seed": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed"),
    }

    def draw(lam, n, noise, seed):
        return plot_differential_maps(n, lam, noise, seed, fns=fns)

    def note(lam, **_):
        return (f"Each row of A1 - &lambda; A2 sums to 1 - &lambda; = {1 - lam:.2f}; weights may "
                "be negative. The layer learns &lambda; (it starts at "
                "&lambda;<sub>init</sub>), and its per-head RMSNorm undoes the shrinking scale.")

    return live_figure(controls, draw, note, functions=f)
