"""What each positional scheme adds to the attention score by distance, and ALiBi's heads."""

from __future__ import annotations

import math

import matplotlib
import torch
from matplotlib.figure import Figure

from toolkit import position as P
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    unless_unwritten,
    widget_functions,
)

#: What each widget computes with; a student's own replace them through ``fns``.
SCORE_VS_DISTANCE_FUNCTIONS = {
    "sinusoidal_encoding": P.sinusoidal_encoding,
    "apply_rope": P.apply_rope,
    "alibi_slopes": P.alibi_slopes,
    "t5_relative_position_bucket": P.t5_relative_position_bucket,
}
ALIBI_FUNCTIONS = {"alibi_bias": P.alibi_bias, "alibi_slopes": P.alibi_slopes}

# ---------------------------------------------------------------------------
# Score versus distance, every scheme
# ---------------------------------------------------------------------------


def plot_score_vs_distance(
    max_distance: int = 256,
    d_head: int = 64,
    base: float = 10000.0,
    n_heads: int = 8,
    num_buckets: int = 32,
    t5_max_distance: int = 128,
    *,
    fns: dict | None = None,
) -> Figure:
    """How each scheme's contribution to the score changes with query-key distance ``k``.

    * sinusoidal: ``PE(p) . PE(p + k) / (d/2) = mean_i cos(k w_i)``, the same for every ``p``;
    * RoPE: ``q^T R_k k / d`` for ``q = k = (1, ..., 1)``, RoFormer's long-term decay;
    * ALiBi: the bias ``-m_h k`` of each head;
    * T5: the bucket that the offset falls into (one learned scalar per bucket and head).

    ``fns``: the student's ``sinusoidal_encoding``, ``apply_rope``, ``alibi_slopes`` or
    ``t5_relative_position_bucket``, by name, in place of the toolkit's.
    """
    f = widget_functions("plot_score_vs_distance", fns, SCORE_VS_DISTANCE_FUNCTIONS)
    if not (isinstance(max_distance, int) and max_distance >= 2):
        raise ValueError(f"max_distance must be an int >= 2, got {max_distance!r}")
    k = torch.arange(max_distance + 1)
    fig = Figure(figsize=(11, 7), layout="constrained")
    (ax_sin, ax_rope), (ax_alibi, ax_t5) = fig.subplots(2, 2)

    pe = f.sinusoidal_encoding(max_distance + 1, d_head, base, dtype=torch.float64)
    ax_sin.plot(k.numpy(), (pe[0] @ pe.T / (d_head / 2)).numpy(), color="tab:blue")
    ax_sin.set(xlabel="distance k", ylabel="PE(p)·PE(p+k) / (d/2)", title="sinusoidal (absolute)")

    ones = torch.ones(1, 1, max_distance + 1, d_head, dtype=torch.float64)
    keys = f.apply_rope(ones, k, base=base)  # R_k (1, ..., 1)
    ax_rope.plot(
        k.numpy(), (keys[0, 0].sum(-1) / d_head).numpy(), color="black", label=f"base {base:g}"
    )
    keys_big = f.apply_rope(ones, k, base=base * 50)
    ax_rope.plot(
        k.numpy(),
        (keys_big[0, 0].sum(-1) / d_head).numpy(),
        color="0.6",
        label=f"base {base * 50:g}",
    )
    ax_rope.set(xlabel="distance k", ylabel="qᵀ R_k k / d  (q = k = 1)", title="RoPE (relative)")
    ax_rope.legend(fontsize=8)

    # ALiBi comes last in Assignment 02: until its slopes are written, its panel says so.
    slopes, pending = unless_unwritten(lambda: f.alibi_slopes(n_heads))
    for h, m in enumerate([] if pending else slopes.tolist()):
        ax_alibi.plot(
            k.numpy(),
            (-m * k).numpy(),
            color=matplotlib.colormaps["viridis"](h / max(1, n_heads - 1)),
            label=f"head {h + 1}: m = {m:.3g}",
        )
    ax_alibi.set(
        xlabel="distance i - j", ylabel="bias -m_h (i-j)", title=f"ALiBi ({n_heads} heads)"
    )
    if pending:
        ax_alibi.text(0.5, 0.5, f"ALiBi {pending}", ha="center", va="center", fontsize=9,
                      transform=ax_alibi.transAxes)
    elif n_heads <= 8:
        ax_alibi.legend(fontsize=7)

    # T5's buckets are an exercise of Assignment 08: in a toolkit that leaves that
    # assignment's answers out until it is unlocked, this panel says so.
    rel = torch.arange(-max_distance, max_distance + 1)
    curves, pending = unless_unwritten(lambda: [
        f.t5_relative_position_bucket(rel, bidirectional, num_buckets, t5_max_distance)
        for bidirectional in (True, False)])
    labels = ("bidirectional (encoder)", "tab:purple"), ("causal (decoder)", "tab:olive")
    for buckets, (label, color) in zip([] if pending else curves, labels):
        ax_t5.step(rel.numpy(), buckets.numpy(), where="mid", color=color, label=label)
    ax_t5.set(
        xlabel="relative position j - i",
        ylabel="bucket",
        title=f"T5 buckets ({num_buckets} buckets, max distance {t5_max_distance})",
    )
    if pending:
        ax_t5.text(0.5, 0.5, f"T5 {pending}", ha="center", va="center", fontsize=9,
                   transform=ax_t5.transAxes)
    else:
        ax_t5.legend(fontsize=8)
    fig.suptitle(
        "What each positional scheme adds to the attention score, by distance", fontsize=11
    )
    return fig


def score_vs_distance_explorer(*, fns=None):
    """Distance range, head size, base and ALiBi head count for :func:`plot_score_vs_distance`.

    Args:
        fns: your own functions in place of the toolkit's, by name:
            ``sinusoidal_encoding``, ``apply_rope``, ``alibi_slopes``,
            ``t5_relative_position_bucket``; e.g. ``fns={"apply_rope": apply_rope}``.
    """
    f = widget_functions("score_vs_distance_explorer", fns, SCORE_VS_DISTANCE_FUNCTIONS)
    if is_headless():
        return headless_placeholder("score_vs_distance_explorer")
    import ipywidgets as w

    controls = {
        "max_distance": w.IntSlider(
            style=LABEL_STYLE, value=256, min=16, max=1024, step=16, description="max dist"
        ),
        "d_head": w.Dropdown(
            style=LABEL_STYLE, options=[16, 32, 64, 128], value=64, description="d_head"
        ),
        "base": w.FloatLogSlider(
            style=LABEL_STYLE, value=1e4, base=10, min=2, max=6, step=0.25, description="base"
        ),
        "n_heads": w.IntSlider(
            style=LABEL_STYLE, value=8, min=1, max=16, description="ALiBi heads"
        ),
    }
    def draw(**values):
        return plot_score_vs_distance(**values, fns=fns)

    return live_figure(controls, draw, tight=True, functions=f)


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------


def plot_alibi_heads(
    n_heads: int = 8, seq_len: int = 12, causal: bool = True, *, fns: dict | None = None
) -> Figure:
    """ALiBi's bias matrix ``-m_h (i - j)`` for every head, on one colour scale.

    Masked cells (the future, in the causal case) are left blank. Steep heads
    (large ``m``) only look at the last few tokens; shallow heads see far back.
    ``fns``: the student's ``alibi_bias`` and ``alibi_slopes`` in place of the toolkit's.
    """
    f = widget_functions("plot_alibi_heads", fns, ALIBI_FUNCTIONS)
    bias = f.alibi_bias(n_heads, seq_len, causal=causal)  # (H, T, T), -inf = masked
    slopes = f.alibi_slopes(n_heads)
    shown = bias.masked_fill(torch.isinf(bias), float("nan"))
    vmin = float(torch.nan_to_num(shown, nan=0.0).min())
    ncols = min(4, n_heads)
    nrows = math.ceil(n_heads / ncols)
    fig = Figure(figsize=(2.7 * ncols + 0.8, 2.6 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, ncols, squeeze=False)
    cmap = matplotlib.colormaps["magma"].with_extremes(bad="0.92")
    image = None
    for h, ax in enumerate(axes.flat):
        if h >= n_heads:
            ax.axis("off")
            continue
        image = ax.imshow(shown[h].numpy(), cmap=cmap, vmin=vmin, vmax=0)
        m = float(slopes[h])
        ax.set_title(f"head {h + 1}: m = 2^{math.log2(m):.3g} = {m:.3g}", fontsize=8)
        ax.set_xticks([])
        ax.set_yticks([])
    fig.colorbar(image, ax=axes, shrink=0.8, label="bias added to the score")
    kind = "causal: -m(i-j), future masked" if causal else "bidirectional: -m|i-j|"
    fig.suptitle(
        f"ALiBi, {n_heads} heads ({kind}); rows = queries i, columns = keys j", fontsize=10
    )
    return fig


def alibi_explorer(*, fns=None):
    """Head-count and length sliders plus a causal toggle for :func:`plot_alibi_heads`.

    Args:
        fns: your own ``alibi_bias`` and ``alibi_slopes`` in place of the toolkit's, e.g.
            ``fns={"alibi_bias": alibi_bias, "alibi_slopes": alibi_slopes}``.
    """
    f = widget_functions("alibi_explorer", fns, ALIBI_FUNCTIONS)
    if is_headless():
        return headless_placeholder("alibi_explorer")
    import ipywidgets as w

    controls = {
        "n_heads": w.IntSlider(style=LABEL_STYLE, value=8, min=1, max=16, description="heads"),
        "seq_len": w.IntSlider(style=LABEL_STYLE, value=12, min=2, max=48, description="seq_len"),
        "causal": w.Checkbox(value=True, description="causal"),
    }

    def note(n_heads, seq_len, causal):
        n_pow2 = 2 ** int(math.floor(math.log2(n_heads)))
        if n_pow2 == n_heads:
            rule = f"{n_heads} is a power of two: m_h = 2^(-8h/{n_heads}), h = 1..{n_heads}."
        else:
            rule = (
                f"{n_heads} is not a power of two: the {n_pow2} slopes for {n_pow2} heads, then "
                f"every other slope of the {2 * n_pow2}-head sequence ({n_heads - n_pow2} more)."
            )
        slopes = ", ".join(f"{m:.3g}" for m in f.alibi_slopes(n_heads).tolist())
        return f"{rule}<br>slopes: {slopes}"

    def draw(**values):
        return plot_alibi_heads(**values, fns=fns)

    return live_figure(controls, draw, note, tight=True, functions=f)
