"""Widget: what one generated token costs with attention + KV cache, a Mamba SSM, or RWKV.

* :func:`decoding_cost_explorer`: memory held per sequence and arithmetic per new token
  for the token-mixing layers of a model (the feed-forward layers cost the same in all
  three, so they are left out), as the context grows from 1k to 1M tokens.

  - **Attention with a KV cache** keeps ``2 n_kv_heads d_head`` numbers per token and
    layer, and a new token reads all of them: memory and time per token grow linearly
    with the context.
  - **Mamba** keeps ``d_inner (d_conv + d_state)`` numbers per layer; **RWKV**'s time
    mixing keeps ``4 d_model`` (last input, ``a``, ``b``, ``p``). Neither grows.

The curves are counted exactly from the shapes (:func:`decoding_costs`); measured
numbers from ``benchmarks/decoding.py`` can be drawn over them (``measured``). The KV
cache is sized by :func:`toolkit.gqa.kv_cache_bytes`, or by the student's own from
Assignment 03: ``decoding_cost_explorer(fns={"kv_cache_bytes": kv_cache_bytes})``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from matplotlib.figure import Figure

from toolkit.gqa import kv_cache_bytes
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What sizes the KV cache; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"kv_cache_bytes": kv_cache_bytes}

DTYPE_BYTES = {"fp32": 4, "fp16 / bf16": 2}
KINDS = ("attention + KV cache", "Mamba", "RWKV")


def decoding_costs(
    seq_lens: Sequence[int],
    d_model: int = 1024,
    n_layers: int = 24,
    n_heads: int = 16,
    n_kv_heads: int | None = None,
    d_state: int = 16,
    d_conv: int = 4,
    expand: int = 2,
    bytes_per_element: int = 2,
    *,
    fns: dict | None = None,
) -> dict[str, dict[str, list[float]]]:
    """State bytes per sequence and FLOPs per new token of the mixing layers, per kind.

    FLOPs count a multiply-add as 2. Returns ``{kind: {"bytes": [...], "flops": [...]}}``
    with one entry per ``seq_lens`` value (the context the new token attends over).
    ``fns``: the student's ``kv_cache_bytes`` in place of the toolkit's.
    """
    f = widget_functions("decoding_costs", fns, TOOLKIT_FUNCTIONS)
    if d_model % n_heads:
        raise ValueError(f"d_model ({d_model}) must be a multiple of n_heads ({n_heads})")
    n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
    d_head, d_inner = d_model // n_heads, expand * d_model
    kv_width = n_kv_heads * d_head
    dt_rank = -(-d_model // 16)
    out = {kind: {"bytes": [], "flops": []} for kind in KINDS}
    for T in seq_lens:
        attention = out["attention + KV cache"]
        # K and V of T tokens: 2 n_layers n_kv_heads d_head T bytes_per_element
        attention["bytes"].append(
            f.kv_cache_bytes(n_layers, n_kv_heads, d_head, T, 1, bytes_per_element))
        # q, o: d x d; k, v: d x kv_width; scores q.k and weighted sum of values over T keys
        attention["flops"].append(n_layers * (4 * d_model**2 + 4 * d_model * kv_width
                                              + 4 * T * d_model))
        mamba = out["Mamba"]
        mamba["bytes"].append(n_layers * d_inner * (d_conv + d_state) * bytes_per_element)
        mamba["flops"].append(n_layers * (
            2 * d_model * 2 * d_inner + 2 * d_inner * d_conv  # in_proj, conv
            + 2 * d_inner * (dt_rank + 2 * d_state) + 2 * dt_rank * d_inner  # x_proj, dt_proj
            + 6 * d_inner * d_state + 2 * d_inner * d_model))  # scan step, out_proj
        rwkv = out["RWKV"]
        rwkv["bytes"].append(n_layers * 4 * d_model * bytes_per_element)
        rwkv["flops"].append(n_layers * (8 * d_model**2 + 20 * d_model))  # r, k, v, output + WKV
    return out


def plot_decoding_costs(
    seq_lens: Sequence[int] = (1024, 4096, 16384, 65536, 262144, 1048576),
    measured: Mapping[str, Mapping[int, tuple[float, float]]] | None = None,
    *,
    fns: dict | None = None,
    **shape,
) -> Figure:
    """Memory (left) and FLOPs per token (right) against context length, log-log.

    Args:
        seq_lens: context lengths.
        measured: optional ``{kind: {T: (seconds per token, state bytes)}}``, e.g. from
            ``benchmarks/decoding.py``; drawn as a third panel.
        fns: the student's ``kv_cache_bytes``, as in :func:`decoding_costs`.
        **shape: passed to :func:`decoding_costs`.
    """
    costs = decoding_costs(seq_lens, **shape, fns=fns)
    fig = Figure(figsize=(11 if measured else 8, 3.6), layout="constrained")
    axes = fig.subplots(1, 3 if measured else 2)
    for kind, colour in zip(KINDS, ("tab:red", "tab:blue", "tab:green")):
        axes[0].plot(seq_lens, [b / 2**20 for b in costs[kind]["bytes"]], "o-", color=colour,
                     label=kind)
        axes[1].plot(seq_lens, [f / 1e6 for f in costs[kind]["flops"]], "o-", color=colour,
                     label=kind)
        if measured and kind in measured:
            points = sorted(measured[kind].items())
            axes[2].plot([t for t, _ in points], [1e3 * s for _, (s, _) in points], "o-",
                         color=colour, label=kind)
    for ax, label in zip(axes, ("state per sequence (MiB)", "MFLOPs per new token",
                                "measured ms per new token")):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("context length (tokens)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7)
    fig.suptitle("Token-mixing layers only (feed-forward layers cost the same in all three)",
                 fontsize=10)
    return fig


def decoding_cost_explorer(measured: Mapping | None = None, *, fns=None):
    """Sliders for the model's width and depth and the dtype over :func:`plot_decoding_costs`.

    Args:
        measured: optional measured points, as in :func:`plot_decoding_costs`.
        fns: your own ``kv_cache_bytes`` (Assignment 03) in place of the toolkit's:
            ``fns={"kv_cache_bytes": kv_cache_bytes}``.

    Returns:
        an ``ipywidgets.VBox`` (an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("decoding_cost_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("decoding_cost_explorer")
    import ipywidgets as w

    d_model = w.SelectionSlider(style=LABEL_STYLE, options=[512, 1024, 2048, 4096], value=1024,
                                description="d_model")
    n_layers = w.IntSlider(style=LABEL_STYLE, value=24, min=1, max=64, description="layers")
    dtype = w.Dropdown(style=LABEL_STYLE, options=list(DTYPE_BYTES), value="fp16 / bf16",
                       description="dtype")

    def draw(d_model, n_layers, dtype):
        return plot_decoding_costs(measured=measured, d_model=d_model, n_layers=n_layers,
                                   n_heads=d_model // 64, bytes_per_element=DTYPE_BYTES[dtype],
                                   fns=fns)

    return live_figure(dict(d_model=d_model, n_layers=n_layers, dtype=dtype), draw, functions=f)
