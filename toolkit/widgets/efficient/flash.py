"""FlashAttention's bookkeeping: the online softmax tile by tile, and naive vs tiled memory."""

from __future__ import annotations

import math

import torch
from matplotlib.figure import Figure

from toolkit.flash import attention_memory_bytes, online_softmax_trace
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)
from toolkit.widgets.efficient.kv_cache import DTYPE_BYTES

#: What each widget computes with; a student's own replace them through ``fns``.
ONLINE_SOFTMAX_FUNCTIONS = {"online_softmax_trace": online_softmax_trace}
MEMORY_FUNCTIONS = {"attention_memory_bytes": attention_memory_bytes}


def example_row(n: int = 16, d_v: int = 3, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Scores ``(n,)`` whose maximum comes late (so rescaling shows) and values ``(n, d_v)``."""
    if n < 2:
        raise ValueError(f"n must be >= 2, got {n}")
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(n, generator=g, dtype=torch.float64)
    scores[(3 * n) // 4] = scores.max() + 2.0  # a new maximum in a late tile
    values = torch.randn(n, d_v, generator=g, dtype=torch.float64)
    return scores, values


def plot_online_softmax(
    scores: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    block: int = 4,
    step: int | None = None,
    *,
    fns: dict | None = None,
) -> Figure:
    """The online softmax after ``step + 1`` tiles (default: all tiles).

    Left: the scores, tiles already read in blue, the current one in orange, the
    running max ``m`` as a line. Middle: ``m`` and ``l`` after each tile so far.
    Right: the current normalised output ``acc / l`` beside the exact
    ``softmax(scores) @ values``; they coincide after the last tile. ``fns``: the
    student's ``online_softmax_trace`` in place of the toolkit's.
    """
    f = widget_functions("plot_online_softmax", fns, ONLINE_SOFTMAX_FUNCTIONS)
    if scores is None or values is None:
        scores, values = example_row()
    scores = torch.as_tensor(scores, dtype=torch.float64)
    values = torch.as_tensor(values, dtype=torch.float64)
    trace = f.online_softmax_trace(scores, values, block)
    step = len(trace) - 1 if step is None else step
    if not 0 <= step < len(trace):
        raise ValueError(f"step must be in [0, {len(trace) - 1}], got {step}")
    cur = trace[step]
    exact = torch.softmax(scores, 0) @ values

    fig = Figure(figsize=(12, 3.6), layout="constrained")
    ax_s, ax_ml, ax_o = fig.subplots(1, 3)
    n = scores.shape[0]
    colors = [
        "tab:orange"
        if cur["start"] <= j < cur["stop"]
        else ("tab:blue" if j < cur["start"] else "lightgray")
        for j in range(n)
    ]
    ax_s.bar(range(n), scores.numpy(), color=colors)
    ax_s.axhline(cur["m"], color="tab:red", ls="--", label=f"m = {cur['m']:.2f}")
    for t in trace:
        ax_s.axvline(t["start"] - 0.5, color="k", lw=0.5, alpha=0.3)
    ax_s.set_title(f"scores, tile {step + 1}/{len(trace)}")
    ax_s.set_xlabel("key j")
    ax_s.legend(loc="lower left", fontsize=8)

    tiles = range(1, step + 2)
    ax_ml.plot(tiles, [t["m"] for t in trace[: step + 1]], "o-", label="m (running max)")
    ax_ml.plot(tiles, [t["l"] for t in trace[: step + 1]], "s-", label="l (running sum)")
    ax_ml.set_xlabel("tiles read")
    ax_ml.set_title(f"rescale exp(m_old - m_new) = {cur['rescale']:.3f}")
    ax_ml.legend(fontsize=8)

    idx = torch.arange(values.shape[1], dtype=torch.float64)
    ax_o.bar((idx - 0.2).numpy(), cur["out"].numpy(), width=0.4, label="acc / l so far")
    ax_o.bar((idx + 0.2).numpy(), exact.numpy(), width=0.4, label="exact softmax(s) V")
    ax_o.set_xlabel("output feature")
    ax_o.set_title("output")
    ax_o.legend(fontsize=8)
    return fig


def online_softmax_stepper(n: int = 16, d_v: int = 3, seed: int = 0, *, fns=None):
    """Step through one query row tile by tile; change the tile size.

    Args:
        n, d_v, seed: the row's length, value size and random seed (:func:`example_row`).
        fns: your own ``online_softmax_trace`` in place of the toolkit's.
    """
    f = widget_functions("online_softmax_stepper", fns, ONLINE_SOFTMAX_FUNCTIONS)
    if is_headless():
        return headless_placeholder("online_softmax_stepper")
    import ipywidgets as w

    scores, values = example_row(n, d_v, seed)
    controls = {
        "block": w.IntSlider(style=LABEL_STYLE, value=4, min=1, max=n, description="tile size"),
        "step": w.IntSlider(
            style=LABEL_STYLE, value=0, min=0, max=math.ceil(n / 4) - 1, description="tile"
        ),
    }

    def fit_step_to_tiles(change):
        # Registered before the redraw: the step is in range again when the figure is drawn.
        n_tiles = math.ceil(n / change["new"])
        controls["step"].value = min(controls["step"].value, n_tiles - 1)
        controls["step"].max = n_tiles - 1

    controls["block"].observe(fit_step_to_tiles, names="value")

    def draw(block, step):
        return plot_online_softmax(scores, values, block, step, fns=fns)

    def note(block, step):
        cur = f.online_softmax_trace(scores, values, block)[step]
        return (
            f"m: {cur['m_prev']:.3f} &rarr; {cur['m']:.3f}; the sum and accumulator so far are "
            f"multiplied by exp(m_old &minus; m_new) = {cur['rescale']:.4f} before the new "
            f"tile is added; l = {cur['l']:.4f}."
        )

    return live_figure(controls, draw, note, functions=f)


# ---------------------------------------------------------------------------
# Naive vs tiled memory
# ---------------------------------------------------------------------------


def plot_attention_memory(
    n_values=None,
    d: int = 128,
    heads: int = 32,
    batch: int = 1,
    block: int = 128,
    bytes_per_element: float = 2,
    *,
    fns: dict | None = None,
) -> Figure:
    """Extra forward memory (log-log) of naive vs tiled attention as the sequence grows
    (``fns``: the student's ``attention_memory_bytes`` in place of the toolkit's)."""
    f = widget_functions("plot_attention_memory", fns, MEMORY_FUNCTIONS)
    n_values = [2**p for p in range(8, 18)] if n_values is None else list(n_values)
    if not n_values or min(n_values) < 1:
        raise ValueError("n_values must be a non-empty list of positive sequence lengths")
    common = {"batch": batch, "heads": heads, "bytes_per_element": bytes_per_element}
    naive = [f.attention_memory_bytes(n, d, tiled=False, **common) for n in n_values]
    tiled = [
        f.attention_memory_bytes(n, d, tiled=True, block_q=block, block_k=block, **common)
        for n in n_values
    ]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.subplots()
    ax.loglog(n_values, naive, "o-", label="naive: N x N scores (O(N^2))")
    ax.loglog(n_values, tiled, "s-", label=f"tiled: {block}x{block} tile + O(N) stats")
    ax.axhline(80e9, color="tab:red", ls=":", label="80 GB (one large GPU)")
    ax.set_xlabel("sequence length N")
    ax.set_ylabel("extra bytes")
    ax.set_title(f"Attention memory, batch {batch} x {heads} heads, d = {d}")
    ax.legend(fontsize=8)
    return fig


def attention_memory_explorer(*, fns=None):
    """Sliders for heads, head size, tile size and dtype over the naive/tiled memory plot.

    Args:
        fns: your own ``attention_memory_bytes`` in place of the toolkit's.
    """
    f = widget_functions("attention_memory_explorer", fns, MEMORY_FUNCTIONS)
    if is_headless():
        return headless_placeholder("attention_memory_explorer")
    import ipywidgets as w

    controls = {
        "heads": w.IntSlider(style=LABEL_STYLE, value=32, min=1, max=128, description="heads"),
        "d": w.SelectionSlider(
            style=LABEL_STYLE, options=[32, 64, 128, 256], value=128, description="d_head"
        ),
        "block": w.SelectionSlider(
            style=LABEL_STYLE, options=[16, 32, 64, 128, 256], value=128, description="tile"
        ),
        "dtype": w.Dropdown(
            style=LABEL_STYLE, options=list(DTYPE_BYTES), value="fp16 / bf16", description="dtype"
        ),
    }

    def draw(heads, d, block, dtype):
        return plot_attention_memory(None, d, heads, 1, block, DTYPE_BYTES[dtype], fns=fns)

    def note(heads, d, block, dtype):
        per_head = f.attention_memory_bytes(4096, d, bytes_per_element=DTYPE_BYTES[dtype])
        return (
            f"At N = 4096 one head's score matrix is {per_head / 1e6:.1f} MB; "
            f"{heads} heads need {heads * per_head / 1e9:.2f} GB. FlashAttention "
            "keeps one tile on chip and saves only the logsumexp per row."
        )

    c = list(controls.values())
    return live_figure(controls, draw, note, rows=[c[:2], c[2:]], functions=f)
