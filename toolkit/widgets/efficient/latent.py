"""MLA's latent against GQA and MQA: cache bytes per token against what each keeps of K and V.

Multi-head latent attention (DeepSeek-V2, arXiv 2405.04434) caches one latent ``c`` of
``d_c`` numbers per token (plus a small RoPE key of ``d_R``) and rebuilds every head's key
and value from it; GQA and MQA cache fewer heads. Each is a way of keeping less of the
full multi-head ``[K ; V]``. This widget measures how much of it each one keeps, on one
layer of random tokens whose key and value projections have a decaying spectrum (as
trained projections do; the numbers depend on that assumption, the ordering is the
point):

* MLA with latent ``d_c``: the best rank-``d_c`` reconstruction of ``[K ; V]`` (an SVD:
  no learned latent can do better with that many numbers);
* GQA with ``g`` KV heads: each group's keys and values replaced by their mean over the
  group's heads (how Ainslie et al., arXiv 2305.13245, convert an MHA checkpoint);
* MQA: one group.

Cache bytes come from ``kv_cache_bytes`` and ``mla_cache_bytes`` (yours if you pass them).
"""

from __future__ import annotations

from functools import lru_cache

import torch
from matplotlib.figure import Figure

from toolkit.gqa import kv_cache_bytes
from toolkit.mla import mla_cache_bytes
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

TOOLKIT_FUNCTIONS = {"kv_cache_bytes": kv_cache_bytes, "mla_cache_bytes": mla_cache_bytes}

#: The toy layer: model width, heads and head width, tokens, RoPE key width (as MLA's d_R).
D_MODEL, N_HEADS, D_HEAD, N_TOKENS, D_ROPE = 128, 8, 16, 256, 8


@lru_cache(maxsize=16)
def _kv(decay: float, seed: int) -> torch.Tensor:
    """``[K ; V]`` of one layer, ``(N_TOKENS, 2 * N_HEADS * D_HEAD)``, float64."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N_TOKENS, D_MODEL, generator=g, dtype=torch.float64)
    u, _ = torch.linalg.qr(torch.randn(D_MODEL, D_MODEL, generator=g, dtype=torch.float64))
    spectrum = torch.arange(D_MODEL, dtype=torch.float64).mul(-decay).exp()  # sigma_i = e^{-ai}
    w = (u * spectrum) @ torch.randn(D_MODEL, 2 * N_HEADS * D_HEAD, generator=g,
                                     dtype=torch.float64) / D_MODEL**0.5
    return x @ w


@lru_cache(maxsize=16)
def _svd(decay: float, seed: int):
    return torch.linalg.svd(_kv(decay, seed), full_matrices=False)


def _relative_error(approx: torch.Tensor, exact: torch.Tensor) -> float:
    return float((approx - exact).norm() / exact.norm())


def latent_tradeoff(d_latent: int = 32, decay: float = 0.05, seed: int = 0, *,
                    fns=None) -> list[dict]:
    """One row per scheme: ``name``, cache ``bytes`` per token and layer (fp16) and the
    relative error of the K and V it keeps, ``|approx - [K ; V]| / |[K ; V]|``."""
    f = widget_functions("latent_tradeoff", fns, TOOLKIT_FUNCTIONS)
    kv = _kv(decay, seed)
    heads = kv.view(N_TOKENS, 2, N_HEADS, D_HEAD)
    rows = []
    for n_kv in (N_HEADS, 4, 2, 1):
        grouped = heads.view(N_TOKENS, 2, n_kv, N_HEADS // n_kv, D_HEAD)
        pooled = grouped.mean(dim=3, keepdim=True).expand_as(grouped).reshape_as(kv)
        name = {N_HEADS: "MHA", 1: "MQA"}.get(n_kv, f"GQA ({n_kv} KV heads)")
        rows.append({"name": name, "bytes": f.kv_cache_bytes(1, n_kv, D_HEAD, 1),
                     "error": _relative_error(pooled, kv)})
    u, s, vh = _svd(decay, seed)
    for d_c in sorted({4, 8, 16, 32, 64, 128, d_latent}):
        rank = min(d_c, s.numel())
        approx = (u[:, :rank] * s[:rank]) @ vh[:rank]
        rows.append({"name": f"MLA d_c={d_c}", "bytes": f.mla_cache_bytes(1, d_c, D_ROPE, 1),
                     "error": _relative_error(approx, kv), "latent": d_c,
                     "chosen": d_c == d_latent})
    return rows


def plot_latent_tradeoff(d_latent=32, decay=0.05, seed=0, *, fns=None) -> Figure:
    """Bytes per token against the error of the keys and values kept, MLA's curve beside
    MHA, GQA and MQA; the chosen latent size in red."""
    rows = latent_tradeoff(d_latent, decay, seed, fns=fns)
    fig = Figure(figsize=(11, 4), layout="constrained")
    ax, ax_bar = fig.subplots(1, 2, width_ratios=[3, 2])
    mla = [r for r in rows if "latent" in r]
    ax.plot([r["bytes"] for r in mla], [r["error"] for r in mla], "o-", color="tab:purple",
            label="MLA (best rank-d_c latent)")
    for r in rows:
        if "latent" not in r:
            ax.plot(r["bytes"], r["error"], "s", markersize=8, label=r["name"])
    chosen = next(r for r in mla if r["chosen"])
    ax.plot(chosen["bytes"], chosen["error"], "o", color="tab:red", markersize=11,
            label=f"your d_c = {d_latent}")
    ax.set_xscale("log")
    ax.set_xlabel("cache bytes per token and layer (fp16)")
    ax.set_ylabel("|kept - [K ; V]| / |[K ; V]|")
    ax.set_title(f"{N_HEADS} heads of {D_HEAD}; MLA also caches a RoPE key of {D_ROPE}",
                 fontsize=9)
    ax.legend(fontsize=8)
    shown = [r for r in rows if "latent" not in r] + [chosen]
    ax_bar.barh([r["name"] for r in shown], [r["bytes"] for r in shown],
                color=["tab:grey"] * (len(shown) - 1) + ["tab:red"])
    ax_bar.set_xlabel("bytes per token and layer")
    ax_bar.invert_yaxis()
    for i, r in enumerate(shown):
        ax_bar.text(r["bytes"], i, f" {r['bytes']:,} B, error {r['error']:.2f}", va="center",
                    fontsize=8)
    ax_bar.set_xlim(0, max(r["bytes"] for r in shown) * 1.9)
    return fig


def mla_explorer(*, fns=None):
    """Sliders for MLA's latent size, how fast the projections' spectrum decays, and the seed.

    Args:
        fns: your ``kv_cache_bytes`` and ``mla_cache_bytes`` in place of the toolkit's.
    """
    f = widget_functions("mla_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("mla_explorer")
    import ipywidgets as w

    controls = {
        "d_latent": w.SelectionSlider(style=LABEL_STYLE, options=[4, 8, 16, 24, 32, 48, 64, 96,
                                                                  128], value=32,
                                      description="latent d_c"),
        "decay": w.FloatSlider(style=LABEL_STYLE, value=0.05, min=0.0, max=0.2, step=0.01,
                               description="spectrum decay"),
        "seed": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed"),
    }

    def draw(d_latent, decay, seed):
        return plot_latent_tradeoff(d_latent, decay, seed, fns=fns)

    def note(decay, **_):
        return ("With a flat spectrum (decay 0) every direction of [K ; V] matters and no "
                "small cache keeps it; the faster the spectrum decays, the more a small latent "
                "keeps. GQA's mean over a group is one particular low-rank choice, MLA's "
                "latent is learned.")

    return live_figure(controls, draw, note, functions=f)
