"""Self-attention has no notion of order: shuffle the tokens and the outputs follow."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.attention import scaled_dot_product_attention
from toolkit.widgets.attention.heatmap import _tokens
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: The attention being shuffled; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"scaled_dot_product_attention": scaled_dot_product_attention}


def _sinusoidal_positions(T: int, d: int) -> Tensor:
    """``PE(p, 2i) = sin(p / 10000^(2i/d))``, ``PE(p, 2i+1) = cos(...)``: ``(T, d)``."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # 10000^(-2i/d)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe


def _self_attention(x: Tensor, weights: Tensor, n_heads: int, attend) -> Tensor:
    """Multi-head self-attention with fixed projections ``weights = (W_q, W_k, W_v, W_o)``.

    ``x`` is ``(T, d_model)``; each head attends with ``attend(q, k, v)`` on
    ``(n_heads, T, d_head)`` tensors, and the heads are concatenated and projected by
    ``W_o``. Returns ``(T, d_model)``.
    """
    T, d_model = x.shape
    W_q, W_k, W_v, W_o = weights
    q, k, v = (
        (x @ W).view(T, n_heads, d_model // n_heads).transpose(0, 1)  # (h, T, d_head)
        for W in (W_q, W_k, W_v)
    )
    heads = attend(q, k, v)  # softmax(q k^T / sqrt(d_head)) v, (h, T, d_head)
    heads = heads.to(x.dtype)  # an attention that computes in float32 still fits W_o
    return heads.transpose(0, 1).reshape(T, d_model) @ W_o  # concat(heads) W_o


def permutation_outputs(
    perm: Sequence[int] | Tensor | None = None,
    with_positions: bool = False,
    *,
    T: int = 6,
    d_model: int = 8,
    n_heads: int = 2,
    seed: int = 0,
    fns: dict | None = None,
) -> dict[str, Tensor | float]:
    """Run one multi-head self-attention on ``X`` and on the shuffled ``P X``.

    Without positions ``f(P X) = P f(X)`` up to rounding; with sinusoidal positions
    added to the input (``f(X + PE)``, and ``f(P X + PE)``: positions stay attached to
    *slots*, not tokens) the identity fails. The projections and ``X`` are random with
    ``seed``, in float64.

    Args:
        perm: new order of the ``T`` positions (default: reversed).
        with_positions: add sinusoidal position encodings before attention.
        fns: ``{"scaled_dot_product_attention": ...}``, the student's attention, called
            as ``(q, k, v)`` on ``(n_heads, T, d_head)`` tensors.

    Returns:
        dict with ``perm`` ``(T,)``, ``out`` = ``f(X)``, ``out_perm`` = ``f(P X)``,
        ``expected`` = ``P f(X)`` (each ``(T, d_model)``) and ``gap`` =
        ``max |f(P X) - P f(X)|``.
    """
    f = widget_functions("permutation_outputs", fns, TOOLKIT_FUNCTIONS)
    perm = torch.arange(T - 1, -1, -1) if perm is None else torch.as_tensor(perm)
    if perm.dim() != 1 or sorted(perm.tolist()) != list(range(T)):
        raise ValueError(f"perm must be a permutation of 0..{T - 1}, got {perm.tolist()}")
    if d_model % n_heads:
        raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
    g = torch.Generator().manual_seed(seed)
    weights = torch.randn(4, d_model, d_model, generator=g, dtype=torch.float64) / d_model**0.5
    x = torch.randn(T, d_model, generator=g, dtype=torch.float64)
    pe = (
        _sinusoidal_positions(T, d_model)
        if with_positions
        else torch.zeros(T, d_model, dtype=torch.float64)
    )
    with torch.no_grad():
        out = _self_attention(x + pe, weights, n_heads, f.scaled_dot_product_attention)  # f(X)
        # f(P X): tokens move, positions stay with the slots
        out_perm = _self_attention(x[perm] + pe, weights, n_heads, f.scaled_dot_product_attention)
    expected = out[perm]  # P f(X)
    gap = (out_perm - expected).abs().max().item()
    return {"perm": perm, "out": out, "out_perm": out_perm, "expected": expected, "gap": gap}


def plot_permutation(
    perm: Sequence[int] | Tensor | None = None,
    with_positions: bool = False,
    tokens: Sequence[str] | None = None,
    *,
    fns: dict | None = None,
) -> Figure:
    """Three panels: ``f(P X)``, ``P f(X)`` and their difference, rows labelled by token
    (``fns`` as in :func:`permutation_outputs`)."""
    tokens = _tokens(tokens)
    T = len(tokens)
    r = permutation_outputs(perm, with_positions, T=T, fns=fns)
    shuffled = [tokens[i] for i in r["perm"].tolist()]
    fig = Figure(figsize=(11, 0.9 + 0.45 * T), layout="constrained")
    axes = fig.subplots(1, 3)
    vmax = float(max(r["out_perm"].abs().max(), r["expected"].abs().max()))
    panels = (
        (r["out_perm"], "f(P X): attend over the shuffled input"),
        (r["expected"], "P f(X): shuffle the original output"),
        (r["out_perm"] - r["expected"], "difference (same colour scale)"),
    )
    for ax, (data, title) in zip(axes, panels):
        ax.imshow(data.numpy(), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_yticks(range(T), shuffled)
        ax.set_xlabel("feature")
        ax.set_title(title, fontsize=9)
    where = "with positions" if with_positions else "no positions"
    # Equal up to rounding: relative to the outputs' size (float32 attention rounds at 1e-7).
    equal = r["gap"] < 1e-5 * max(1.0, float(r["out"].abs().max()))
    verdict = "equal: order is invisible" if equal else "different: order matters"
    fig.suptitle(f"{where}: max |f(PX) - P f(X)| = {r['gap']:.1e} ({verdict})", fontsize=10)
    return fig


def permutation_demo(tokens: Sequence[str] | None = None, *, fns=None):
    """Shuffle the tokens, toggle positions, compare ``f(P X)`` with ``P f(X)``.

    Args:
        tokens: labels (default: a six-word sentence).
        fns: your own attention in place of the toolkit's,
            ``fns={"scaled_dot_product_attention": scaled_dot_product_attention}``.

    Returns:
        an ``ipywidgets.VBox`` (or an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("permutation_demo", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("permutation_demo")
    import ipywidgets as w

    tokens = _tokens(tokens)
    T = len(tokens)
    controls = {
        "shuffle": w.IntSlider(
            style=LABEL_STYLE, value=0, min=0, max=20, description="shuffle #"
        ),
        "with_positions": w.Checkbox(value=False, description="add positions"),
    }

    def permutation(shuffle: int) -> Tensor:
        if shuffle == 0:
            return torch.arange(T - 1, -1, -1)  # shuffle 0 = reverse
        return torch.randperm(T, generator=torch.Generator().manual_seed(shuffle))

    def draw(shuffle, with_positions):
        return plot_permutation(permutation(shuffle), with_positions, tokens, fns=fns)

    def note(shuffle, with_positions):
        return "new order: " + " ".join(tokens[i] for i in permutation(shuffle).tolist())

    return live_figure(controls, draw, note, functions=f)
