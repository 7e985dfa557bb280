"""How many bytes a real model's KV cache takes under MHA, GQA, MQA and MLA.

Model presets (:data:`MODEL_PRESETS`) use published configurations:

* LLaMA-2 70B: 80 layers, 64 query heads, 8 KV heads, head size 128 (arXiv 2307.09288,
  Table 1 and section 2.2; Hugging Face config ``meta-llama/Llama-2-70b-hf``).
* Mistral 7B: 32 layers, 32 query heads, 8 KV heads, head size 128, window 4096
  (arXiv 2310.06825, Table 1). Its attention sees the last 4096 positions only, so its
  rolling-buffer cache (section 2) never holds more than 4096: past that, every row
  stops growing.
* DeepSeek-V2: 60 layers, 128 heads of size 128, MLA latent ``d_c = 512`` and RoPE key
  ``d_R = 64`` (arXiv 2405.04434, section 3.1.1 and appendix; Hugging Face config
  ``deepseek-ai/DeepSeek-V2``).

Variants a model does not use are hypothetical and labelled so: GQA with 8 KV heads
for DeepSeek-V2, and MLA with DeepSeek-V2's ratios (``d_c = 4 d_head``,
``d_R = d_head / 2``) for the other two.
"""

from __future__ import annotations

import html

from matplotlib.figure import Figure

from toolkit.gqa import kv_cache_bytes
from toolkit.mla import mla_cache_bytes
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    unless_unwritten,
    widget_functions,
)

GIB = 2**30
DTYPE_BYTES = {"fp32": 4, "fp16 / bf16": 2, "fp8": 1}

#: The two cache formulas; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {"kv_cache_bytes": kv_cache_bytes, "mla_cache_bytes": mla_cache_bytes}

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
        "window": 4096,  # sliding-window attention: a rolling buffer of 4096 positions
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


def kv_cache_comparison(
    preset: str = "LLaMA-2 70B",
    n_tokens: int = 4096,
    batch: int = 1,
    bytes_per_element: float = 2,
    *,
    fns: dict | None = None,
) -> list[dict]:
    """KV-cache bytes of one model under MHA, GQA, MQA and MLA.

    A model with a sliding window (Mistral) caches at most ``window`` positions, however
    long the context. ``fns``: the student's ``kv_cache_bytes`` and ``mla_cache_bytes``
    in place of the toolkit's.

    Returns:
        one dict per variant: ``name``, ``bytes``, ``actual`` (the variant the model
        really uses), ``formula`` and ``pending``: ``None``, or, when the formula is an
        exercise not written yet (MLA's comes after the calculator in Assignment 03),
        what it waits for (``bytes`` is then ``None``).
    """
    f = widget_functions("kv_cache_comparison", fns, TOOLKIT_FUNCTIONS)
    if preset not in MODEL_PRESETS:
        raise ValueError(f"preset must be one of {sorted(MODEL_PRESETS)}, got {preset!r}")
    cfg = MODEL_PRESETS[preset]
    L, H, d = cfg["n_layers"], cfg["n_heads"], cfg["d_head"]
    d_c = cfg.get("d_latent", 4 * d)  # DeepSeek-V2's ratio when not given
    d_r = cfg.get("d_rope", d // 2)
    cached = min(n_tokens, cfg.get("window", n_tokens))  # a rolling buffer stops growing
    common = {"n_tokens": cached, "batch": batch, "bytes_per_element": bytes_per_element}
    # MLA's formula is the assignment's last exercise: until it is written, its row waits.
    mla_bytes, pending = unless_unwritten(lambda: f.mla_cache_bytes(L, d_c, d_r, **common))
    rows = [
        ("MHA", f.kv_cache_bytes(L, H, d, **common), f"2 x {L} x {H} x {d}", None),
        (
            f"GQA ({cfg['n_kv_heads']} KV heads)",
            f.kv_cache_bytes(L, cfg["n_kv_heads"], d, **common),
            f"2 x {L} x {cfg['n_kv_heads']} x {d}",
            None,
        ),
        ("MQA", f.kv_cache_bytes(L, 1, d, **common), f"2 x {L} x 1 x {d}", None),
        (
            "MLA" if "d_latent" in cfg else "MLA (DeepSeek-V2 ratios)",
            mla_bytes,
            f"{L} x ({d_c} + {d_r})",
            pending,
        ),
    ]
    return [
        {"name": name, "bytes": b, "actual": name.startswith(cfg["actual"]), "formula": formula,
         "pending": waits, "cached_tokens": cached}
        for name, b, formula, waits in rows
    ]


def plot_kv_cache(
    preset: str = "LLaMA-2 70B",
    n_tokens: int = 4096,
    batch: int = 1,
    bytes_per_element: float = 2,
    *,
    fns: dict | None = None,
) -> Figure:
    """Horizontal bars of KV-cache GiB per variant; the model's real choice is highlighted
    (``fns`` as in :func:`kv_cache_comparison`)."""
    rows = kv_cache_comparison(preset, n_tokens, batch, bytes_per_element, fns=fns)
    fig = Figure(figsize=(8, 3.6), layout="constrained")
    ax = fig.subplots()
    names = [r["name"] + ("  (actual)" if r["actual"] else "") for r in rows]
    gib = [0.0 if r["pending"] else r["bytes"] / GIB for r in rows]
    colors = ["tab:orange" if r["actual"] else "tab:gray" for r in rows]
    bars = ax.barh(names, gib, color=colors)
    ax.invert_yaxis()
    for bar, r in zip(bars, rows):
        # A pending row has no bar, only what it waits for.
        label = r["pending"] or (
            f"{r['bytes'] / GIB:,.3g} GiB  [{r['formula']} elements per token]")
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {label}",
            va="center",
            fontsize=8,
        )
    ax.set_xlim(0, max(gib) * 1.9 if max(gib) > 0 else 1)
    ax.set_xlabel("KV cache (GiB)")
    cached = rows[0]["cached_tokens"]
    window = f" (its window: only the last {cached:,} cached)" if cached < n_tokens else ""
    ax.set_title(f"{preset}: {n_tokens:,} tokens{window} x batch {batch} x "
                 f"{bytes_per_element} B/element")
    return fig


def kv_cache_calculator(*, fns=None):
    """Pick a model, context length, batch and dtype; compare MHA / GQA / MQA / MLA.

    Args:
        fns: your own ``kv_cache_bytes`` and ``mla_cache_bytes`` in place of the
            toolkit's, e.g. ``fns={"kv_cache_bytes": kv_cache_bytes}``.
    """
    f = widget_functions("kv_cache_calculator", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("kv_cache_calculator")
    import ipywidgets as w

    controls = {
        "preset": w.Dropdown(
            style=LABEL_STYLE, options=list(MODEL_PRESETS), value="LLaMA-2 70B",
            description="model",
        ),
        "dtype": w.Dropdown(
            style=LABEL_STYLE, options=list(DTYPE_BYTES), value="fp16 / bf16", description="dtype"
        ),
        "n_tokens": w.SelectionSlider(
            style=LABEL_STYLE, options=[2**p for p in range(10, 18)], value=4096,
            description="tokens",
        ),
        "batch": w.IntSlider(style=LABEL_STYLE, value=1, min=1, max=64, description="batch"),
    }

    def draw(preset, dtype, n_tokens, batch):
        return plot_kv_cache(preset, n_tokens, batch, DTYPE_BYTES[dtype], fns=fns)

    def note(preset, dtype, n_tokens, batch):
        rows = kv_cache_comparison(preset, n_tokens, batch, DTYPE_BYTES[dtype], fns=fns)
        table = "".join(
            f"<tr><td>{r['name']}{' (actual)' if r['actual'] else ''}</td>"
            + (f"<td colspan=2>{html.escape(r['pending'])}</td></tr>" if r["pending"] else
               f"<td style='text-align:right'>{r['bytes']:,.0f}</td>"
               f"<td style='text-align:right'>{r['bytes'] / GIB:,.3f}</td></tr>")
            for r in rows
        )
        return (
            "<table><tr><th>variant</th><th>bytes</th><th>GiB</th></tr>" + table + "</table>"
            f"<small>Config: {MODEL_PRESETS[preset]['source']}. "
            "KV bytes = 2 &times; layers &times; KV heads &times; d_head &times; tokens "
            "&times; batch &times; bytes; MLA = layers &times; (d_c + d_R) &times; tokens "
            "&times; batch &times; bytes."
            + (f" A sliding window caches at most its last {MODEL_PRESETS[preset]['window']:,} "
               "positions (a rolling buffer)." if "window" in MODEL_PRESETS[preset] else "")
            + "</small>"
        )

    c = list(controls.values())
    return live_figure(controls, draw, note, rows=[c[:2], c[2:]], functions=f)
