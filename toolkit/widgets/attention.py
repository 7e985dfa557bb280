"""Widgets for Assignment 01: attention weights, masks, the three families, permutations.

What each one is for
--------------------
* :func:`attention_explorer`: the attention matrix ``softmax(q k^T / (tau sqrt(d_k)) +
  mask)`` of a small example as a heatmap. Pick a mask (none, causal, padding, both)
  and watch blocked cells drop to exactly zero while each row still sums to 1. Move
  the temperature ``tau``: small ``tau`` sharpens every row towards one key (large
  scores), large ``tau`` flattens it towards uniform. Forgetting the ``1/sqrt(d_k)``
  factor acts like a temperature of ``1/sqrt(d_k)``: too sharp.
* :func:`families_explorer`: who may attend to whom in each family (arXiv
  1706.03762): the encoder's bidirectional self-attention (BERT-like), the decoder's
  causal self-attention (GPT-like) and the cross-attention that links them (T5-like).
* :func:`permutation_demo`: self-attention has no notion of order. Shuffle the
  input tokens and the outputs come back shuffled the same way, unchanged otherwise
  (``f(P X) = P f(X)``). Add position encodings and the identity breaks: that is
  why every Transformer adds position information somewhere.

Every builder has a matching pure function (``plot_*``) that returns a
``matplotlib.figure.Figure`` and never touches pyplot's global state, so tests can
render it with the Agg backend. Builders draw to PNG and show it in an
``ipywidgets.Image``, which works in any Jupyter front end without network access.
With ``TOOLKIT_HEADLESS=1`` in the environment (set by the autograder) the builders
return a small ``ipywidgets.HTML`` placeholder and draw nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.attention import MultiHeadAttention, attention_weights
from toolkit.masks import causal_mask, combine_masks, padding_mask
from toolkit.transformer import family_attention_patterns
from toolkit.widgets.display import (  # noqa: F401 - re-exported for older imports
    HEADLESS_ENV,
    LABEL_STYLE,
    figure_to_png,
    headless_placeholder,
    is_headless,
)

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

    Returns:
        ``(weights (T, T), mask (T, T) bool or None)``.
    """
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
    causal = causal_mask(T) if mask_kind in ("causal", "combined") else None
    pad = None
    if mask_kind in ("padding", "combined"):
        pad = padding_mask(torch.tensor([n_real]), T)[0, 0]  # (1, T): keys >= n_real hidden
    mask = combine_masks(causal, pad)  # (T, T) or (1, T) -> broadcast
    if mask is not None:
        mask = mask.expand(T, T)
    scale = 1.0 / (temperature * math.sqrt(q.size(-1)))  # 1 / (tau sqrt(d_k))
    return attention_weights(q, k, mask, scale=scale), mask


def plot_attention_example(
    tokens: Sequence[str] | None = None,
    mask_kind: str = "none",
    temperature: float = 1.0,
    n_real: int | None = None,
    *,
    q: Tensor | None = None,
    k: Tensor | None = None,
) -> Figure:
    """The figure :func:`attention_explorer` shows for one setting of its controls."""
    tokens = _tokens(tokens)
    weights, _ = example_attention(tokens, mask_kind, temperature, n_real, q=q, k=k)
    labels = list(tokens)
    if mask_kind in ("padding", "combined"):
        n = max(1, len(tokens) - 2) if n_real is None else n_real
        labels = labels[:n] + ["<pad>"] * (len(tokens) - n)
    title = f"mask = {mask_kind}, temperature = {temperature:.2g}"
    return plot_attention_heatmap(weights, labels, title=title)


def attention_explorer(tokens: Sequence[str] | None = None, q=None, k=None):
    """Interactive heatmap of attention weights with a mask selector and temperature slider.

    Args:
        tokens: labels (default: a six-word sentence).
        q, k: optional ``(T, d_k)`` queries and keys (default: fixed random ones).

    Returns:
        an ``ipywidgets.VBox`` (or an ``ipywidgets.HTML`` placeholder when headless).
    """
    if is_headless():
        return headless_placeholder("attention_explorer")
    import ipywidgets as w

    tokens = _tokens(tokens)
    T = len(tokens)
    example_attention(tokens, q=q, k=k)  # validate the inputs before building anything
    mask = w.Dropdown(style=LABEL_STYLE, options=list(MASK_KINDS), value="none", description="mask")
    temperature = w.FloatLogSlider(
        style=LABEL_STYLE, value=1.0, base=10, min=-1, max=1, step=0.05, description="temperature"
    )
    n_real = w.IntSlider(
        style=LABEL_STYLE, value=max(1, T - 2), min=1, max=T, description="real tokens"
    )
    image = w.Image(format="png")
    note = w.HTML()

    def redraw(_change=None):
        fig = plot_attention_example(tokens, mask.value, temperature.value, n_real.value, q=q, k=k)
        image.value = figure_to_png(fig)
        note.value = (
            "Each row is a query's distribution over keys and sums to 1 (a row with no "
            "visible key would be all zeros). Scores are divided by "
            f"&tau;&middot;&radic;d<sub>k</sub> with &tau; = {temperature.value:.2f}."
        )

    for control in (mask, temperature, n_real):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([mask, temperature, n_real]), image, note])


# ---------------------------------------------------------------------------
# The three families
# ---------------------------------------------------------------------------

_FAMILY_PANELS = (
    ("encoder_self", "Encoder self-attention\n(bidirectional: BERT, encoder of T5)", "src", "src"),
    ("decoder_self", "Decoder self-attention\n(causal: GPT, decoder of T5)", "tgt", "tgt"),
    ("cross", "Cross-attention\n(decoder queries, encoder keys)", "tgt", "src"),
)


def plot_family_patterns(
    T_src: int = 6,
    T_tgt: int = 4,
    src_length: int | None = None,
    *,
    src_tokens: Sequence[str] | None = None,
    tgt_tokens: Sequence[str] | None = None,
) -> Figure:
    """The three boolean attention patterns side by side (dark = may attend).

    Args:
        T_src, T_tgt: source and target lengths.
        src_length: real source tokens; the rest are padding (default: none).
        src_tokens, tgt_tokens: optional labels of lengths ``T_src`` / ``T_tgt``.

    Returns:
        a Figure with three panels from :func:`toolkit.transformer.family_attention_patterns`.
    """
    patterns = family_attention_patterns(T_src, T_tgt, src_length)
    labels = {
        "src": _labels("src_tokens", src_tokens, T_src),
        "tgt": _labels("tgt_tokens", tgt_tokens, T_tgt),
    }
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, title, rows, cols) in zip(axes, _FAMILY_PANELS):
        p = patterns[key]
        ax.imshow(p.float().numpy(), cmap="Blues", vmin=0, vmax=1.3)
        ax.set_xticks(range(p.size(1)), labels[cols], rotation=45, ha="right")
        ax.set_yticks(range(p.size(0)), labels[rows])
        ax.set_xlabel(f"key ({'source' if cols == 'src' else 'target'})")
        ax.set_ylabel(f"query ({'source' if rows == 'src' else 'target'})")
        ax.set_title(f"{title}\n{int(p.sum())} of {p.numel()} pairs", fontsize=9)
    fig.suptitle(
        "Dark = may attend. Encoder-only uses the left panel, decoder-only the "
        "middle one, encoder-decoder all three",
        fontsize=10,
    )
    return fig


def families_explorer():
    """Sliders for source/target length and source padding over :func:`plot_family_patterns`.

    Returns:
        an ``ipywidgets.VBox`` (or an ``ipywidgets.HTML`` placeholder when headless).
    """
    if is_headless():
        return headless_placeholder("families_explorer")
    import ipywidgets as w

    t_src = w.IntSlider(style=LABEL_STYLE, value=6, min=1, max=12, description="T_src")
    t_tgt = w.IntSlider(style=LABEL_STYLE, value=4, min=1, max=12, description="T_tgt")
    pad = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=11, description="src padding")
    image = w.Image(format="png")

    def sync_padding_limit(_change=None):
        pad.max = t_src.value - 1  # keep at least one real source token

    def redraw(_change=None):
        src_length = t_src.value - min(pad.value, t_src.value - 1)
        image.value = figure_to_png(plot_family_patterns(t_src.value, t_tgt.value, src_length))

    t_src.observe(sync_padding_limit, names="value")
    sync_padding_limit()
    for control in (t_src, t_tgt, pad):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([t_src, t_tgt, pad]), image])


# ---------------------------------------------------------------------------
# Permutation equivariance
# ---------------------------------------------------------------------------


def _sinusoidal_positions(T: int, d: int) -> Tensor:
    """``PE(p, 2i) = sin(p / 10000^(2i/d))``, ``PE(p, 2i+1) = cos(...)``: ``(T, d)``."""
    pos = torch.arange(T, dtype=torch.float64)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # 10000^(-2i/d)
    pe = torch.zeros(T, d, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(pos * inv_freq)
    pe[:, 1::2] = torch.cos(pos * inv_freq)
    return pe


def permutation_outputs(
    perm: Sequence[int] | Tensor | None = None,
    with_positions: bool = False,
    *,
    T: int = 6,
    d_model: int = 8,
    n_heads: int = 2,
    seed: int = 0,
) -> dict[str, Tensor | float]:
    """Run one self-attention on ``X`` and on the shuffled ``P X``.

    Without positions ``f(P X) = P f(X)`` up to rounding; with sinusoidal positions
    added to the input (``f(X + PE)``, and ``f(P X + PE)``: positions stay attached to
    *slots*, not tokens) the identity fails.

    Args:
        perm: new order of the ``T`` positions (default: reversed).
        with_positions: add sinusoidal position encodings before attention.

    Returns:
        dict with ``perm`` ``(T,)``, ``out`` = ``f(X)``, ``out_perm`` = ``f(P X)``,
        ``expected`` = ``P f(X)`` (each ``(T, d_model)``) and ``gap`` =
        ``max |f(P X) - P f(X)|``.
    """
    perm = torch.arange(T - 1, -1, -1) if perm is None else torch.as_tensor(perm)
    if perm.dim() != 1 or sorted(perm.tolist()) != list(range(T)):
        raise ValueError(f"perm must be a permutation of 0..{T - 1}, got {perm.tolist()}")
    g = torch.Generator().manual_seed(seed)
    torch_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    mha = MultiHeadAttention(d_model, n_heads).double()
    torch.random.set_rng_state(torch_state)  # leave the caller's RNG untouched
    x = torch.randn(1, T, d_model, generator=g, dtype=torch.float64)
    pe = (
        _sinusoidal_positions(T, d_model)
        if with_positions
        else torch.zeros(T, d_model, dtype=torch.float64)
    )
    with torch.no_grad():
        out = mha(x + pe)[0]  # f(X)
        out_perm = mha(x[:, perm] + pe)[0]  # f(P X): tokens move, positions stay
    expected = out[perm]  # P f(X)
    gap = (out_perm - expected).abs().max().item()
    return {"perm": perm, "out": out, "out_perm": out_perm, "expected": expected, "gap": gap}


def plot_permutation(
    perm: Sequence[int] | Tensor | None = None,
    with_positions: bool = False,
    tokens: Sequence[str] | None = None,
) -> Figure:
    """Three panels: ``f(P X)``, ``P f(X)`` and their difference, rows labelled by token."""
    tokens = _tokens(tokens)
    T = len(tokens)
    r = permutation_outputs(perm, with_positions, T=T)
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
    verdict = "equal: order is invisible" if r["gap"] < 1e-9 else "different: order matters"
    fig.suptitle(f"{where}: max |f(PX) - P f(X)| = {r['gap']:.1e} ({verdict})", fontsize=10)
    return fig


def permutation_demo(tokens: Sequence[str] | None = None):
    """Shuffle the tokens, toggle positions, compare ``f(P X)`` with ``P f(X)``.

    Returns:
        an ``ipywidgets.VBox`` (or an ``ipywidgets.HTML`` placeholder when headless).
    """
    if is_headless():
        return headless_placeholder("permutation_demo")
    import ipywidgets as w

    tokens = _tokens(tokens)
    T = len(tokens)
    shuffle_seed = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="shuffle #")
    positions = w.Checkbox(value=False, description="add positions")
    order = w.HTML()
    image = w.Image(format="png")

    def current_perm() -> Tensor:
        if shuffle_seed.value == 0:
            return torch.arange(T - 1, -1, -1)  # shuffle 0 = reverse
        return torch.randperm(T, generator=torch.Generator().manual_seed(shuffle_seed.value))

    def redraw(_change=None):
        perm = current_perm()
        order.value = "new order: " + " ".join(tokens[i] for i in perm.tolist())
        image.value = figure_to_png(plot_permutation(perm, positions.value, tokens))

    for control in (shuffle_seed, positions):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([shuffle_seed, positions]), order, image])


__all__ = [
    "MASK_KINDS",
    "attention_explorer",
    "example_attention",
    "families_explorer",
    "figure_to_png",
    "headless_placeholder",
    "is_headless",
    "permutation_demo",
    "permutation_outputs",
    "plot_attention_example",
    "plot_attention_heatmap",
    "plot_family_patterns",
    "plot_permutation",
]
