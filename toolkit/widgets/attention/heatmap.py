"""The attention matrix of a small example as a heatmap, with masks and a temperature."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.attention import attention_weights
from toolkit.masks import causal_mask, combine_masks, padding_mask
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What the explorer computes with; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {
    "attention_weights": attention_weights,
    "causal_mask": causal_mask,
    "padding_mask": padding_mask,
    "combine_masks": combine_masks,
}
MASK_KINDS = ("none", "causal", "padding", "combined")
DEFAULT_TOKENS = ("The", "cat", "sat", "on", "the", "mat")


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _as_2d(name: str, x) -> Tensor:
    t = torch.as_tensor(x).detach().cpu()
    if t.dim() != 2:
        raise ValueError(f"{name} must be a 2-D (T_q, T_k) matrix, got shape {tuple(t.shape)}")
    return t.float()


def _labels(name: str, tokens: Sequence[str] | None, n: int) -> list[str]:
    if tokens is None:
        return [str(i) for i in range(n)]
    tokens = [str(t) for t in tokens]
    if len(tokens) != n:
        raise ValueError(f"{name} has {len(tokens)} entries but the matrix has {n} along that axis")
    return tokens


def _tokens(tokens: Sequence[str] | None) -> list[str]:
    tokens = list(DEFAULT_TOKENS if tokens is None else tokens)
    if not tokens:
        raise ValueError("tokens must contain at least one token")
    return [str(t) for t in tokens]


# ---------------------------------------------------------------------------
# Attention heatmap and explorer
# ---------------------------------------------------------------------------


def plot_attention_heatmap(
    weights,
    tokens: Sequence[str] | None = None,
    title: str = "Attention weights",
    *,
    query_tokens: Sequence[str] | None = None,
    annotate: bool | None = None,
    ax=None,
) -> Figure:
    """Heatmap of an attention matrix: row = query, column = key.

    Args:
        weights: ``(T_q, T_k)`` tensor or array of weights (rows of probabilities).
        tokens: ``T_k`` key labels; also used for the queries when ``T_q == T_k``
            and ``query_tokens`` is not given.
        title: axes title.
        query_tokens: ``T_q`` query labels.
        annotate: print each weight in its cell (default: when both sides <= 12).
        ax: draw into these axes instead of a new figure.

    Returns:
        the ``matplotlib.figure.Figure`` holding the plot.
    """
    w = _as_2d("weights", weights)
    T_q, T_k = w.shape
    key_labels = _labels("tokens", tokens, T_k)
    if query_tokens is None and tokens is not None and T_q == T_k:
        query_tokens = tokens
    query_labels = _labels("query_tokens", query_tokens, T_q)
    if ax is None:
        fig = Figure(figsize=(1.0 + 0.55 * T_k, 0.8 + 0.5 * T_q), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    image = ax.imshow(w.numpy(), cmap="viridis", vmin=0.0, vmax=max(1.0, float(w.max())))
    ax.set_xticks(range(T_k), key_labels, rotation=45, ha="right")
    ax.set_yticks(range(T_q), query_labels)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    ax.set_title(title)
    if annotate is None:
        annotate = T_q <= 12 and T_k <= 12
    if annotate:
        for i in range(T_q):
            for j in range(T_k):
                value = float(w[i, j])
                ax.text(
                    j,
                    i,
                    f"{value:.2f}",
                    ha="center",
                    va="center",
                    fontsize=7,
                    color="black" if value > 0.6 else "white",
                )
    fig.colorbar(image, ax=ax, shrink=0.8)
    return fig


def _example_inputs(
    tokens, mask_kind="none", temperature=1.0, n_real=None, q=None, k=None, d_k=8, seed=0
):
    """Check :func:`example_attention`'s arguments; returns ``(tokens, n_real, q, k)``."""
    tokens = _tokens(tokens)
    T = len(tokens)
    if mask_kind not in MASK_KINDS:
        raise ValueError(f"mask_kind must be one of {MASK_KINDS}, got {mask_kind!r}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    n_real = max(1, T - 2) if n_real is None else n_real
    if not 1 <= n_real <= T:
        raise ValueError(f"n_real must be in [1, {T}] (the number of tokens), got {n_real}")
    if (q is None) != (k is None):
        raise ValueError("q and k must be given together (or neither)")
    if q is None:
        g = torch.Generator().manual_seed(seed)
        q = torch.randn(T, d_k, generator=g)
        k = torch.randn(T, d_k, generator=g)
    q, k = torch.as_tensor(q, dtype=torch.float32), torch.as_tensor(k, dtype=torch.float32)
    if q.dim() != 2 or q.shape != k.shape or q.size(0) != T:
        raise ValueError(
            f"q and k must both have shape (T={T}, d_k), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    return tokens, n_real, q, k


def example_attention(
    tokens: Sequence[str] | None = None,
    mask_kind: str = "none",
    temperature: float = 1.0,
    n_real: int | None = None,
    *,
    q: Tensor | None = None,
    k: Tensor | None = None,
    d_k: int = 8,
    seed: int = 0,
    fns: dict | None = None,
) -> tuple[Tensor, Tensor | None]:
    """Attention weights of a small fixed example, as shown by :func:`attention_explorer`.

    ``weights = softmax(q k^T / (temperature * sqrt(d_k)) + mask)``; with
    ``temperature = 1`` this is exactly scaled dot-product attention.

    Args:
        tokens: labels, one per position (default: a six-word sentence).
        mask_kind: ``"none"``, ``"causal"``, ``"padding"`` (the last ``T - n_real``
            keys are padding) or ``"combined"`` (causal AND padding).
        temperature: ``tau > 0``.
        n_real: number of real tokens for the padding masks (default ``T - 2``, >= 1).
        q, k: optional ``(T, d_k)`` queries and keys; default random with ``seed``.
        d_k: feature size of the random queries and keys.
        fns: the student's own ``attention_weights``, ``causal_mask``, ``padding_mask``
            or ``combine_masks`` (``{name: function}``) in place of the toolkit's.

    Returns:
        ``(weights (T, T), mask (T, T) bool or None)``.
    """
    f = widget_functions("example_attention", fns, TOOLKIT_FUNCTIONS)
    tokens, n_real, q, k = _example_inputs(tokens, mask_kind, temperature, n_real, q, k, d_k, seed)
    T = len(tokens)
    # Only the functions the chosen mask needs are called: a student who has written
    # attention but no masks yet still sees mask = "none".
    mask = None
    if mask_kind in ("causal", "combined"):
        mask = f.causal_mask(T)  # (T, T)
    if mask_kind in ("padding", "combined"):
        pad = f.padding_mask(torch.tensor([n_real]), T)[0, 0]  # (1, T): keys >= n_real hidden
        mask = pad if mask is None else f.combine_masks(mask, pad)  # broadcast to (T, T)
    if mask is not None:
        mask = mask.expand(T, T)
    scale = 1.0 / (temperature * math.sqrt(q.size(-1)))  # 1 / (tau sqrt(d_k))
    return f.attention_weights(q, k, mask, scale=scale), mask


def plot_attention_example(
    tokens: Sequence[str] | None = None,
    mask_kind: str = "none",
    temperature: float = 1.0,
    n_real: int | None = None,
    *,
    q: Tensor | None = None,
    k: Tensor | None = None,
    fns: dict | None = None,
) -> Figure:
    """The figure :func:`attention_explorer` shows for one setting of its controls
    (``fns`` as in :func:`example_attention`)."""
    tokens = _tokens(tokens)
    weights, _ = example_attention(tokens, mask_kind, temperature, n_real, q=q, k=k, fns=fns)
    labels = list(tokens)
    if mask_kind in ("padding", "combined"):
        n = max(1, len(tokens) - 2) if n_real is None else n_real
        labels = labels[:n] + ["<pad>"] * (len(tokens) - n)
    title = f"mask = {mask_kind}, temperature = {temperature:.2g}"
    return plot_attention_heatmap(weights, labels, title=title)


def attention_explorer(tokens: Sequence[str] | None = None, q=None, k=None, *, fns=None):
    """Interactive heatmap of attention weights with a mask selector and temperature slider.

    Args:
        tokens: labels (default: a six-word sentence).
        q, k: optional ``(T, d_k)`` queries and keys (default: fixed random ones).
        fns: your own functions in place of the toolkit's, by name: ``attention_weights``,
            ``causal_mask``, ``padding_mask``, ``combine_masks``; e.g.
            ``fns={"attention_weights": attention_weights}``.

    Returns:
        an ``ipywidgets.VBox`` (or an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("attention_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("attention_explorer")
    import ipywidgets as w

    tokens, *_ = _example_inputs(tokens, q=q, k=k)  # fail early on bad input
    T = len(tokens)
    controls = {
        "mask_kind": w.Dropdown(
            style=LABEL_STYLE, options=list(MASK_KINDS), value="none", description="mask"
        ),
        "temperature": w.FloatLogSlider(
            style=LABEL_STYLE, value=1.0, base=10, min=-1, max=1, step=0.05,
            description="temperature",
        ),
        "n_real": w.IntSlider(
            style=LABEL_STYLE, value=max(1, T - 2), min=1, max=T, description="real tokens"
        ),
    }

    def draw(mask_kind, temperature, n_real):
        return plot_attention_example(tokens, mask_kind, temperature, n_real, q=q, k=k, fns=fns)

    def note(mask_kind, temperature, n_real):
        return (
            "Each row is a query's distribution over keys and sums to 1 (a row with no "
            "visible key would be all zeros). Scores are divided by "
            f"&tau;&middot;&radic;d<sub>k</sub> with &tau; = {temperature:.2f}."
        )

    return live_figure(controls, draw, note, functions=f)
