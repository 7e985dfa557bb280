"""Widgets for Assignments 03 and 04: sparse masks, KV-cache sizes, online softmax, memory.

What each one is for
--------------------
* :func:`mask_gallery`: the sparse attention patterns of :mod:`toolkit.masks`
  (sliding window, band, dilated, global tokens, BigBird) side by side, with the
  exact number of computed cells. Move the window and dilation sliders and watch the
  count grow like ``n x window`` instead of ``n^2``.
* :func:`kv_cache_calculator`: how many bytes the KV cache of a real model takes
  under MHA, GQA, MQA and MLA, for a context length, batch and dtype you choose.
* :func:`online_softmax_stepper`: one query row of FlashAttention processed tile by
  tile: the running max ``m``, the running sum ``l``, the rescale factor
  ``exp(m_old - m_new)`` and the accumulator, which matches ``softmax(s) V`` after
  the last tile.
* :func:`attention_memory_explorer`: extra memory of naive attention (the ``N x N``
  score matrix) against tiled attention (one tile plus O(N) statistics) as the
  sequence grows.

Every builder has a matching pure ``plot_*`` function that returns a
``matplotlib.figure.Figure`` without touching pyplot's global state, so tests can
render it with the Agg backend. With ``TOOLKIT_HEADLESS=1`` (set by the autograder)
builders return a small placeholder and draw nothing.

Model presets (:data:`MODEL_PRESETS`) use published configurations:

* LLaMA-2 70B: 80 layers, 64 query heads, 8 KV heads, head size 128 (arXiv 2307.09288,
  Table 1 and section 2.2; Hugging Face config ``meta-llama/Llama-2-70b-hf``).
* Mistral 7B: 32 layers, 32 query heads, 8 KV heads, head size 128, window 4096
  (arXiv 2310.06825, Table 1).
* DeepSeek-V2: 60 layers, 128 heads of size 128, MLA latent ``d_c = 512`` and RoPE key
  ``d_R = 64`` (arXiv 2405.04434, section 3.1.1 and appendix; Hugging Face config
  ``deepseek-ai/DeepSeek-V2``).

Variants a model does not use are hypothetical and labelled so: GQA with 8 KV heads
for DeepSeek-V2, and MLA with DeepSeek-V2's ratios (``d_c = 4 d_head``,
``d_R = d_head / 2``) for the other two.
"""

from __future__ import annotations

import math

import torch
from matplotlib.figure import Figure

from toolkit.flash import attention_memory_bytes, online_softmax_trace
from toolkit.gqa import kv_cache_bytes
from toolkit.masks import (
    band_mask,
    bigbird_mask,
    causal_mask,
    dilated_mask,
    global_token_mask,
    mask_cell_count,
    sliding_window_mask,
)
from toolkit.mla import mla_cache_bytes
from toolkit.widgets.display import LABEL_STYLE, figure_to_png, headless_placeholder, is_headless

GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "fp16 / bf16": 2, "fp8": 1}

MODEL_PRESETS: dict[str, dict] = {
    "LLaMA-2 70B": {
        "n_layers": 80,
        "n_heads": 64,
        "n_kv_heads": 8,
        "d_head": 128,
        "actual": "GQA",
        "source": "arXiv 2307.09288; HF meta-llama/Llama-2-70b-hf config",
    },
    "Mistral 7B": {
        "n_layers": 32,
        "n_heads": 32,
        "n_kv_heads": 8,
        "d_head": 128,
        "actual": "GQA",
        "source": "arXiv 2310.06825, Table 1",
    },
    "DeepSeek-V2": {
        "n_layers": 60,
        "n_heads": 128,
        "n_kv_heads": 8,  # hypothetical GQA variant for comparison
        "d_head": 128,
        "d_latent": 512,
        "d_rope": 64,
        "actual": "MLA",
        "source": "arXiv 2405.04434, section 3.1.1; HF deepseek-ai/DeepSeek-V2 config",
    },
}


# ---------------------------------------------------------------------------
# Mask gallery
# ---------------------------------------------------------------------------


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

    n = w.IntSlider(style=LABEL_STYLE, value=32, min=8, max=64, step=4, description="n")
    window = w.IntSlider(style=LABEL_STYLE, value=4, min=1, max=16, description="window")
    dilation = w.IntSlider(style=LABEL_STYLE, value=2, min=1, max=6, description="dilation")
    n_global = w.IntSlider(style=LABEL_STYLE, value=1, min=0, max=4, description="global")
    n_random = w.IntSlider(style=LABEL_STYLE, value=1, min=0, max=4, description="random blocks")
    seed = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed")
    image = w.Image(format="png")
    note = w.HTML()

    def redraw(_change=None):
        fig = plot_mask_gallery(
            n.value, window.value, dilation.value, n_global.value, 4, n_random.value, seed.value
        )
        image.value = figure_to_png(fig)
        note.value = (
            f"A sliding window costs about n &times; w = {n.value * min(window.value, n.value)} "
            f"cells instead of n&sup2; = {n.value**2}. Stacking L window layers lets "
            "information travel about L &times; w tokens (Mistral: 32 &times; 4096 = 131,072)."
        )

    for control in (n, window, dilation, n_global, n_random, seed):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([n, window, dilation]), w.HBox([n_global, n_random, seed]), image, note])


# ---------------------------------------------------------------------------
# KV-cache calculator
# ---------------------------------------------------------------------------


def kv_cache_comparison(
    preset: str = "LLaMA-2 70B",
    n_tokens: int = 4096,
    batch: int = 1,
    bytes_per_element: float = 2,
) -> list[dict]:
    """KV-cache bytes of one model under MHA, GQA, MQA and MLA.

    Returns:
        one dict per variant: ``name``, ``bytes``, ``actual`` (the variant the model
        really uses) and ``formula``.
    """
    if preset not in MODEL_PRESETS:
        raise ValueError(f"preset must be one of {sorted(MODEL_PRESETS)}, got {preset!r}")
    cfg = MODEL_PRESETS[preset]
    L, H, d = cfg["n_layers"], cfg["n_heads"], cfg["d_head"]
    d_c = cfg.get("d_latent", 4 * d)  # DeepSeek-V2's ratio when not given
    d_r = cfg.get("d_rope", d // 2)
    common = {"n_tokens": n_tokens, "batch": batch, "bytes_per_element": bytes_per_element}
    rows = [
        ("MHA", kv_cache_bytes(L, H, d, **common), f"2 x {L} x {H} x {d}"),
        (
            f"GQA ({cfg['n_kv_heads']} KV heads)",
            kv_cache_bytes(L, cfg["n_kv_heads"], d, **common),
            f"2 x {L} x {cfg['n_kv_heads']} x {d}",
        ),
        ("MQA", kv_cache_bytes(L, 1, d, **common), f"2 x {L} x 1 x {d}"),
        (
            "MLA" if "d_latent" in cfg else "MLA (DeepSeek-V2 ratios)",
            mla_cache_bytes(L, d_c, d_r, **common),
            f"{L} x ({d_c} + {d_r})",
        ),
    ]
    return [
        {"name": name, "bytes": b, "actual": name.startswith(cfg["actual"]), "formula": f}
        for name, b, f in rows
    ]


def plot_kv_cache(
    preset: str = "LLaMA-2 70B",
    n_tokens: int = 4096,
    batch: int = 1,
    bytes_per_element: float = 2,
) -> Figure:
    """Horizontal bars of KV-cache GiB per variant; the model's real choice is highlighted."""
    rows = kv_cache_comparison(preset, n_tokens, batch, bytes_per_element)
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    ax = fig.subplots()
    names = [r["name"] + ("  (actual)" if r["actual"] else "") for r in rows]
    gib = [r["bytes"] / GIB for r in rows]
    colors = ["tab:orange" if r["actual"] else "tab:gray" for r in rows]
    bars = ax.barh(names, gib, color=colors)
    ax.invert_yaxis()
    for bar, r in zip(bars, rows):
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {r['bytes'] / GIB:,.3g} GiB  [{r['formula']} per token]",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, max(gib) * 1.9 if max(gib) > 0 else 1)
    ax.set_xlabel("KV cache (GiB)")
    ax.set_title(f"{preset}: {n_tokens:,} tokens x batch {batch} x {bytes_per_element} B/element")
    return fig


def kv_cache_calculator():
    """Pick a model, context length, batch and dtype; compare MHA / GQA / MQA / MLA."""
    if is_headless():
        return headless_placeholder("kv_cache_calculator")
    import ipywidgets as w

    preset = w.Dropdown(
        style=LABEL_STYLE, options=list(MODEL_PRESETS), value="LLaMA-2 70B", description="model"
    )
    tokens = w.SelectionSlider(
        style=LABEL_STYLE, options=[2**p for p in range(10, 18)], value=4096, description="tokens"
    )
    batch = w.IntSlider(style=LABEL_STYLE, value=1, min=1, max=64, description="batch")
    dtype = w.Dropdown(
        style=LABEL_STYLE, options=list(DTYPE_BYTES), value="fp16 / bf16", description="dtype"
    )
    image = w.Image(format="png")
    note = w.HTML()

    def redraw(_change=None):
        nbytes = DTYPE_BYTES[dtype.value]
        fig = plot_kv_cache(preset.value, tokens.value, batch.value, nbytes)
        image.value = figure_to_png(fig)
        rows = kv_cache_comparison(preset.value, tokens.value, batch.value, nbytes)
        table = "".join(
            f"<tr><td>{r['name']}{' (actual)' if r['actual'] else ''}</td>"
            f"<td style='text-align:right'>{r['bytes']:,.0f}</td>"
            f"<td style='text-align:right'>{r['bytes'] / GIB:,.3f}</td></tr>"
            for r in rows
        )
        note.value = (
            "<table><tr><th>variant</th><th>bytes</th><th>GiB</th></tr>" + table + "</table>"
            f"<small>Config: {MODEL_PRESETS[preset.value]['source']}. "
            "KV bytes = 2 &times; layers &times; KV heads &times; d_head &times; tokens "
            "&times; batch &times; bytes; MLA = layers &times; (d_c + d_R) &times; tokens "
            "&times; batch &times; bytes.</small>"
        )

    for control in (preset, tokens, batch, dtype):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([preset, dtype]), w.HBox([tokens, batch]), image, note])


# ---------------------------------------------------------------------------
# Online softmax stepper
# ---------------------------------------------------------------------------


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
) -> Figure:
    """The online softmax after ``step + 1`` tiles (default: all tiles).

    Left: the scores, tiles already read in blue, the current one in orange, the
    running max ``m`` as a line. Middle: ``m`` and ``l`` after each tile so far.
    Right: the current normalised output ``acc / l`` beside the exact
    ``softmax(scores) @ values``; they coincide after the last tile.
    """
    if scores is None or values is None:
        scores, values = example_row()
    scores = torch.as_tensor(scores, dtype=torch.float64)
    values = torch.as_tensor(values, dtype=torch.float64)
    trace = online_softmax_trace(scores, values, block)
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


def online_softmax_stepper(n: int = 16, d_v: int = 3, seed: int = 0):
    """Step through one query row tile by tile; change the tile size."""
    if is_headless():
        return headless_placeholder("online_softmax_stepper")
    import ipywidgets as w

    scores, values = example_row(n, d_v, seed)
    block = w.IntSlider(style=LABEL_STYLE, value=4, min=1, max=n, description="tile size")
    step = w.IntSlider(
        style=LABEL_STYLE, value=0, min=0, max=math.ceil(n / 4) - 1, description="tile"
    )
    image = w.Image(format="png")
    note = w.HTML()

    resizing = {"active": False}

    def redraw(_change=None):
        if resizing["active"]:  # step's range is being updated; draw once afterwards
            return
        trace = online_softmax_trace(scores, values, block.value)
        cur = trace[step.value]
        image.value = figure_to_png(plot_online_softmax(scores, values, block.value, step.value))
        note.value = (
            f"m: {cur['m_prev']:.3f} &rarr; {cur['m']:.3f}; the sum and accumulator so far are "
            f"multiplied by exp(m_old &minus; m_new) = {cur['rescale']:.4f} before the new "
            f"tile is added; l = {cur['l']:.4f}."
        )

    def on_block(_change=None):
        resizing["active"] = True
        try:
            n_tiles = math.ceil(n / block.value)
            step.value = min(step.value, n_tiles - 1)
            step.max = n_tiles - 1
        finally:
            resizing["active"] = False
        redraw()

    block.observe(on_block, names="value")
    step.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([block, step]), image, note])


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
) -> Figure:
    """Extra forward memory (log-log) of naive vs tiled attention as the sequence grows."""
    n_values = [2**p for p in range(8, 18)] if n_values is None else list(n_values)
    if not n_values or min(n_values) < 1:
        raise ValueError("n_values must be a non-empty list of positive sequence lengths")
    common = {"batch": batch, "heads": heads, "bytes_per_element": bytes_per_element}
    naive = [attention_memory_bytes(n, d, tiled=False, **common) for n in n_values]
    tiled = [
        attention_memory_bytes(n, d, tiled=True, block_q=block, block_k=block, **common)
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


def attention_memory_explorer():
    """Sliders for heads, head size, tile size and dtype over the naive/tiled memory plot."""
    if is_headless():
        return headless_placeholder("attention_memory_explorer")
    import ipywidgets as w

    heads = w.IntSlider(style=LABEL_STYLE, value=32, min=1, max=128, description="heads")
    d = w.SelectionSlider(
        style=LABEL_STYLE, options=[32, 64, 128, 256], value=128, description="d_head"
    )
    block = w.SelectionSlider(
        style=LABEL_STYLE, options=[16, 32, 64, 128, 256], value=128, description="tile"
    )
    dtype = w.Dropdown(
        style=LABEL_STYLE, options=list(DTYPE_BYTES), value="fp16 / bf16", description="dtype"
    )
    image = w.Image(format="png")
    note = w.HTML()

    def redraw(_change=None):
        nbytes = DTYPE_BYTES[dtype.value]
        image.value = figure_to_png(
            plot_attention_memory(None, d.value, heads.value, 1, block.value, nbytes)
        )
        per_head = attention_memory_bytes(4096, d.value, bytes_per_element=nbytes)
        note.value = (
            f"At N = 4096 one head's score matrix is {per_head / 1e6:.1f} MB; "
            f"{heads.value} heads need {heads.value * per_head / 1e9:.2f} GB. FlashAttention "
            "keeps one tile on chip and saves only the logsumexp per row."
        )

    for control in (heads, d, block, dtype):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox([heads, d]), w.HBox([block, dtype]), image, note])
