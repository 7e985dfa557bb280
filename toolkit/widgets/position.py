"""Widgets for positional encoding: RoPE spectra and rotations, ALiBi, extrapolation.

What each one is for
--------------------
* :func:`rope_spectrum_explorer` / :func:`plot_rope_spectrum`: RoPE's pairs turn at
  geometrically spaced speeds ``theta_i = base^(-2i/d)``. The plot shows every pair's
  wavelength ``2 pi / theta_i`` and how each context-extension method rescales it
  for a scale ``s = L_new / L_train``: position interpolation (every band slowed by
  ``s``), NTK-aware (fast bands kept, the slowest slowed by exactly ``s``) and YaRN
  (fast bands kept, slow bands interpolated, a ramp between).
* :func:`rope_rotation_explorer` / :func:`plot_rope_rotation`: one feature pair as a
  2-D vector turning by ``theta_i`` per position; fast pairs spin, slow pairs
  creep. Which two features form the pair depends on the layout.
* :func:`score_vs_distance_explorer` / :func:`plot_score_vs_distance`: what each
  scheme contributes to the attention score as a function of the distance between
  query and key (sinusoidal and RoPE decay, ALiBi's straight lines, T5's buckets).
* :func:`alibi_explorer` / :func:`plot_alibi_heads`: ALiBi's bias matrix per head,
  with the slope rule for any number of heads.
* :func:`train_short_test_long_explorer` / :func:`plot_train_short_test_long`: run a
  RoPE head beyond its training length and see which bands meet rotation angles
  they never saw, and how PI, NTK and YaRN avoid that.

Every builder has a matching pure function (``plot_*``) that returns a
``matplotlib.figure.Figure`` without touching pyplot's global state, so tests can
render it headless (Agg). Builders draw to PNG and show it in an
``ipywidgets.Image``; nothing needs a network connection. With ``TOOLKIT_HEADLESS=1``
in the environment (set by the autograder) builders return a small placeholder.
"""

from __future__ import annotations

import math

import matplotlib
import torch
from matplotlib.figure import Figure

from toolkit import position as P
from toolkit.widgets.display import (  # noqa: F401 - HEADLESS_ENV re-exported
    HEADLESS_ENV,
    LABEL_STYLE,
    figure_to_png,
    headless_placeholder,
    is_headless,
)

METHOD_COLORS = {
    "RoPE": "black",
    "PI": "tab:blue",
    "NTK": "tab:orange",
    "YaRN": "tab:green",
    "dynamic NTK": "tab:purple",
}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _png(fig: Figure, dpi: int = 110) -> bytes:
    return figure_to_png(fig, dpi=dpi, tight=True)


def _wire(controls: list, draw, note=None):
    """VBox of controls + image; ``draw(**values)`` returns a Figure (and optional note)."""
    import ipywidgets as w

    image = w.Image(format="png")
    text = w.HTML()

    def redraw(_change=None):
        values = {c.description_key: c.value for c in controls}
        image.value = _png(draw(**values))
        if note is not None:
            text.value = note(**values)

    for control in controls:
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([w.HBox(controls), image, text])


def _control(widget, key: str):
    widget.description_key = key  # the keyword argument of the plot function it feeds
    return widget


def _scaled_spectra(
    d_head: int, base: float, scale: float, train_len: int, beta_fast=32, beta_slow=1
) -> dict:
    """Angular speeds (float64) of plain RoPE and of each extension method."""
    yarn, _ = P.yarn_inv_freq_and_temperature(d_head, base, scale, train_len, beta_fast, beta_slow)
    return {
        "RoPE": P.rope_inv_freq(d_head, base, dtype=torch.float64),
        "PI": P.rope_inv_freq_linear(d_head, base, scale, dtype=torch.float64),
        "NTK": P.rope_inv_freq_ntk(d_head, base, scale, dtype=torch.float64),
        "YaRN": yarn.double(),
    }


# ---------------------------------------------------------------------------
# RoPE spectrum
# ---------------------------------------------------------------------------


def plot_rope_spectrum(
    d_head: int = 64,
    base: float = 10000.0,
    scale: float = 4.0,
    original_max_position_embeddings: int = 2048,
    beta_fast: float = 32,
    beta_slow: float = 1,
) -> Figure:
    """Per-band wavelength of RoPE and its PI / NTK / YaRN rescalings.

    Left: wavelength ``2 pi / theta_i`` (tokens per turn) for every pair ``i``, with
    the training length ``L`` and the target length ``s L`` as horizontal lines.
    Bands below ``L / beta_fast`` turn many times within the training context; bands
    above ``L / beta_slow`` not even once. Right: ``theta'_i / theta_i``, 1 for an
    untouched band and ``1/s`` for a fully interpolated one.
    """
    L = original_max_position_embeddings
    spectra = _scaled_spectra(d_head, base, scale, L, beta_fast, beta_slow)
    _, mscale = P.yarn_inv_freq_and_temperature(d_head, base, scale, L, beta_fast, beta_slow)
    bands = range(d_head // 2)
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax_wave, ax_ratio = fig.subplots(1, 2)
    for name, inv in spectra.items():
        style = "--" if name == "RoPE" else "-"
        ax_wave.plot(
            bands, (2 * math.pi / inv).numpy(), style, color=METHOD_COLORS[name], label=name
        )
        ax_ratio.plot(
            bands, (inv / spectra["RoPE"]).numpy(), style, color=METHOD_COLORS[name], label=name
        )
    ax_wave.axhline(L, color="grey", lw=1, ls=":")
    ax_wave.text(0, L, f" L_train = {L}", va="bottom", fontsize=8, color="grey")
    ax_wave.axhline(scale * L, color="red", lw=1, ls=":")
    ax_wave.text(0, scale * L, f" L_new = {int(scale * L)}", va="bottom", fontsize=8, color="red")
    ax_wave.axhspan(1, L / beta_fast, color="tab:green", alpha=0.08)
    ax_wave.axhspan(L / beta_slow, ax_wave.get_ylim()[1] * 10, color="tab:red", alpha=0.06)
    ax_wave.set_yscale("log")
    ax_wave.set_ylim(1, None)
    ax_wave.set(
        xlabel="pair index i", ylabel="wavelength 2π/θ_i (tokens per turn)", title="RoPE spectrum"
    )
    ax_wave.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.93))
    ax_ratio.axhline(1 / scale, color="grey", lw=1, ls=":")
    ax_ratio.set_yscale("log")
    ax_ratio.set(
        xlabel="pair index i",
        ylabel="θ'_i / θ_i",
        title=f"rescaling per band (s = {scale:g}; YaRN √(1/t) = {mscale:.3f})",
    )
    ax_ratio.legend(fontsize=8)
    fig.suptitle(
        f"d_head = {d_head}, base = {base:g}: green = many turns in training (kept by NTK/YaRN), "
        "red = less than one turn (interpolated)",
        fontsize=9,
    )
    return fig


def rope_spectrum_explorer():
    """Scale, base, head size and training length sliders for :func:`plot_rope_spectrum`."""
    if is_headless():
        return headless_placeholder("rope_spectrum_explorer")
    import ipywidgets as w

    controls = [
        _control(
            w.FloatLogSlider(
                style=LABEL_STYLE, value=4, base=2, min=0, max=5, step=0.25, description="scale s"
            ),
            "scale",
        ),
        _control(
            w.Dropdown(style=LABEL_STYLE, options=[32, 64, 128], value=64, description="d_head"),
            "d_head",
        ),
        _control(
            w.FloatLogSlider(
                style=LABEL_STYLE, value=1e4, base=10, min=3, max=7, step=0.25, description="base"
            ),
            "base",
        ),
        _control(
            w.Dropdown(
                style=LABEL_STYLE,
                options=[512, 2048, 4096, 8192, 32768],
                value=2048,
                description="L_train",
            ),
            "original_max_position_embeddings",
        ),
    ]

    def note(scale, d_head, base, original_max_position_embeddings):
        ntk_base = base * scale ** (d_head / (d_head - 2))
        return (
            f"PI divides every θ_i by s = {scale:.3g}. NTK keeps the formula with base' = "
            f"base·s<sup>d/(d-2)</sup> = {ntk_base:.4g}. YaRN keeps bands with more than 32 "
            "turns in the training context, interpolates those with less than 1, and "
            f"multiplies q and k by 0.1 ln s + 1 = {0.1 * math.log(scale) + 1:.3f}."
        )

    return _wire(controls, plot_rope_spectrum, note)


# ---------------------------------------------------------------------------
# RoPE rotation of one pair
# ---------------------------------------------------------------------------


def plot_rope_rotation(
    position: int = 5,
    pair_index: int = 0,
    d_head: int = 16,
    base: float = 10000.0,
    layout: str = "half",
) -> Figure:
    """One feature pair of a fixed vector as it is rotated for positions ``0 .. position``.

    The rotation is computed with :func:`toolkit.position.apply_rope` on a vector whose
    only non-zero entries are the two members of the chosen pair. Right panel: the
    cosine of every band's angle at the current position (fast bands on the left).
    """
    if not (isinstance(position, int) and 0 <= position <= 100_000):
        raise ValueError(f"position must be an int in [0, 100000], got {position!r}")
    if not (isinstance(pair_index, int) and 0 <= pair_index < d_head // 2):
        raise ValueError(
            f"pair_index must be an int in [0, d_head/2 = {d_head // 2}), got {pair_index!r}"
        )
    if layout == "half":
        a, b = pair_index, pair_index + d_head // 2
    else:
        a, b = 2 * pair_index, 2 * pair_index + 1
    x = torch.zeros(1, 1, 1, d_head, dtype=torch.float64)
    x[..., a], x[..., b] = 1.0, 0.35
    positions = torch.arange(position + 1)
    rotated = P.apply_rope(
        x.expand(1, 1, position + 1, d_head), positions, base=base, layout=layout
    )
    pts = rotated[0, 0][:, [a, b]]  # (position+1, 2)
    theta = P.rope_inv_freq(d_head, base, dtype=torch.float64)

    fig = Figure(figsize=(10, 4.5), layout="constrained")
    ax, ax_all = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    radius = float(pts[0].norm())
    circle = torch.linspace(0, 2 * math.pi, 200)
    ax.plot(
        (radius * torch.cos(circle)).numpy(),
        (radius * torch.sin(circle)).numpy(),
        color="0.85",
        lw=1,
    )
    shown = pts[-64:].numpy()  # the trail of the last positions
    ax.scatter(shown[:, 0], shown[:, 1], c=range(len(shown)), cmap="Blues", s=14, zorder=2)
    ax.annotate(
        "",
        xy=(float(pts[-1, 0]), float(pts[-1, 1])),
        xytext=(0, 0),
        arrowprops={"arrowstyle": "->", "color": "tab:red", "lw": 2},
    )
    ax.annotate(
        "",
        xy=(float(pts[0, 0]), float(pts[0, 1])),
        xytext=(0, 0),
        arrowprops={"arrowstyle": "->", "color": "0.6", "lw": 1},
    )
    ax.set_aspect("equal")
    lim = 1.25 * radius
    ax.set(xlim=(-lim, lim), ylim=(-lim, lim), xlabel=f"x[{a}]", ylabel=f"x[{b}]")
    speed = float(theta[pair_index])
    angle = position * speed
    ax.set_title(
        f"pair {pair_index} = features ({a}, {b}) [{layout}]\n"
        f"θ = {speed:.3g} rad/token, wavelength {2 * math.pi / speed:.4g}, "
        f"angle = {math.degrees(angle) % 360:.0f}°",
        fontsize=9,
    )
    cosines = torch.cos(position * theta)
    colors = ["tab:red" if i == pair_index else "tab:blue" for i in range(d_head // 2)]
    ax_all.bar(range(d_head // 2), cosines.numpy(), color=colors)
    ax_all.set(
        ylim=(-1.05, 1.05),
        xlabel="pair index i (fast → slow)",
        ylabel="cos(p θ_i)",
        title=f"all pairs at position p = {position}",
    )
    return fig


def rope_rotation_explorer():
    """A position slider (with a play button) and a pair selector for :func:`plot_rope_rotation`."""
    if is_headless():
        return headless_placeholder("rope_rotation_explorer")
    import ipywidgets as w

    d_head = 16
    position = _control(
        w.IntSlider(style=LABEL_STYLE, value=5, min=0, max=200, description="position"), "position"
    )
    play = w.Play(value=5, min=0, max=200, interval=150, description="play")
    w.jslink((play, "value"), (position, "value"))
    controls = [
        position,
        _control(
            w.IntSlider(
                style=LABEL_STYLE, value=0, min=0, max=d_head // 2 - 1, description="pair i"
            ),
            "pair_index",
        ),
        _control(
            w.Dropdown(
                style=LABEL_STYLE,
                options=["half", "interleaved"],
                value="half",
                description="layout",
            ),
            "layout",
        ),
    ]
    box = _wire(controls, lambda **kw: plot_rope_rotation(d_head=d_head, **kw))
    box.children = (w.HBox([play, *controls]), *box.children[1:])
    return box


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
) -> Figure:
    """How each scheme's contribution to the score changes with query-key distance ``k``.

    * sinusoidal: ``PE(p) . PE(p + k) / (d/2) = mean_i cos(k w_i)``, the same for every ``p``;
    * RoPE: ``q^T R_k k / d`` for ``q = k = (1, ..., 1)``, RoFormer's long-term decay;
    * ALiBi: the bias ``-m_h k`` of each head;
    * T5: the bucket that the offset falls into (one learned scalar per bucket and head).
    """
    if not (isinstance(max_distance, int) and max_distance >= 2):
        raise ValueError(f"max_distance must be an int >= 2, got {max_distance!r}")
    k = torch.arange(max_distance + 1)
    fig = Figure(figsize=(11, 7), layout="constrained")
    (ax_sin, ax_rope), (ax_alibi, ax_t5) = fig.subplots(2, 2)

    pe = P.sinusoidal_encoding(max_distance + 1, d_head, base, dtype=torch.float64)
    ax_sin.plot(k.numpy(), (pe[0] @ pe.T / (d_head / 2)).numpy(), color="tab:blue")
    ax_sin.set(xlabel="distance k", ylabel="PE(p)·PE(p+k) / (d/2)", title="sinusoidal (absolute)")

    ones = torch.ones(1, 1, max_distance + 1, d_head, dtype=torch.float64)
    keys = P.apply_rope(ones, k, base=base)  # R_k (1, ..., 1)
    ax_rope.plot(
        k.numpy(), (keys[0, 0].sum(-1) / d_head).numpy(), color="black", label=f"base {base:g}"
    )
    keys_big = P.apply_rope(ones, k, base=base * 50)
    ax_rope.plot(
        k.numpy(),
        (keys_big[0, 0].sum(-1) / d_head).numpy(),
        color="0.6",
        label=f"base {base * 50:g}",
    )
    ax_rope.set(xlabel="distance k", ylabel="qᵀ R_k k / d  (q = k = 1)", title="RoPE (relative)")
    ax_rope.legend(fontsize=8)

    slopes = P.alibi_slopes(n_heads)
    for h, m in enumerate(slopes.tolist()):
        ax_alibi.plot(
            k.numpy(),
            (-m * k).numpy(),
            color=matplotlib.colormaps["viridis"](h / max(1, n_heads - 1)),
            label=f"head {h + 1}: m = {m:.3g}",
        )
    ax_alibi.set(
        xlabel="distance i - j", ylabel="bias -m_h (i-j)", title=f"ALiBi ({n_heads} heads)"
    )
    if n_heads <= 8:
        ax_alibi.legend(fontsize=7)

    rel = torch.arange(-max_distance, max_distance + 1)
    for bidirectional, color in ((True, "tab:purple"), (False, "tab:olive")):
        buckets = P.t5_relative_position_bucket(rel, bidirectional, num_buckets, t5_max_distance)
        label = "bidirectional (encoder)" if bidirectional else "causal (decoder)"
        ax_t5.step(rel.numpy(), buckets.numpy(), where="mid", color=color, label=label)
    ax_t5.set(
        xlabel="relative position j - i",
        ylabel="bucket",
        title=f"T5 buckets ({num_buckets} buckets, max distance {t5_max_distance})",
    )
    ax_t5.legend(fontsize=8)
    fig.suptitle(
        "What each positional scheme adds to the attention score, by distance", fontsize=11
    )
    return fig


def score_vs_distance_explorer():
    """Distance range, head size, base and ALiBi head count for :func:`plot_score_vs_distance`."""
    if is_headless():
        return headless_placeholder("score_vs_distance_explorer")
    import ipywidgets as w

    controls = [
        _control(
            w.IntSlider(
                style=LABEL_STYLE, value=256, min=16, max=1024, step=16, description="max dist"
            ),
            "max_distance",
        ),
        _control(
            w.Dropdown(
                style=LABEL_STYLE, options=[16, 32, 64, 128], value=64, description="d_head"
            ),
            "d_head",
        ),
        _control(
            w.FloatLogSlider(
                style=LABEL_STYLE, value=1e4, base=10, min=2, max=6, step=0.25, description="base"
            ),
            "base",
        ),
        _control(
            w.IntSlider(style=LABEL_STYLE, value=8, min=1, max=16, description="ALiBi heads"),
            "n_heads",
        ),
    ]
    return _wire(controls, plot_score_vs_distance)


# ---------------------------------------------------------------------------
# ALiBi
# ---------------------------------------------------------------------------


def plot_alibi_heads(n_heads: int = 8, seq_len: int = 12, causal: bool = True) -> Figure:
    """ALiBi's bias matrix ``-m_h (i - j)`` for every head, on one colour scale.

    Masked cells (the future, in the causal case) are left blank. Steep heads
    (large ``m``) only look at the last few tokens; shallow heads see far back.
    """
    bias = P.alibi_bias(n_heads, seq_len, causal=causal)  # (H, T, T), -inf = masked
    slopes = P.alibi_slopes(n_heads)
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


def alibi_explorer():
    """Head-count and length sliders plus a causal toggle for :func:`plot_alibi_heads`."""
    if is_headless():
        return headless_placeholder("alibi_explorer")
    import ipywidgets as w

    controls = [
        _control(
            w.IntSlider(style=LABEL_STYLE, value=8, min=1, max=16, description="heads"), "n_heads"
        ),
        _control(
            w.IntSlider(style=LABEL_STYLE, value=12, min=2, max=48, description="seq_len"),
            "seq_len",
        ),
        _control(w.Checkbox(value=True, description="causal"), "causal"),
    ]

    def note(n_heads, seq_len, causal):
        n_pow2 = 2 ** int(math.floor(math.log2(n_heads)))
        if n_pow2 == n_heads:
            rule = f"{n_heads} is a power of two: m_h = 2^(-8h/{n_heads}), h = 1..{n_heads}."
        else:
            rule = (
                f"{n_heads} is not a power of two: the {n_pow2} slopes for {n_pow2} heads, then "
                f"every other slope of the {2 * n_pow2}-head sequence ({n_heads - n_pow2} more)."
            )
        slopes = ", ".join(f"{m:.3g}" for m in P.alibi_slopes(n_heads).tolist())
        return f"{rule}<br>slopes: {slopes}"

    return _wire(controls, plot_alibi_heads, note)


# ---------------------------------------------------------------------------
# Train short, test long
# ---------------------------------------------------------------------------


def _unseen_angle_fraction(
    inv_freq: torch.Tensor, theta: torch.Tensor, train_len: int, test_len: int
) -> torch.Tensor:
    """Per band: the share of the angles met at test time that training never reached.

    Training covers the arc ``[0, (L-1) theta_i]`` (the whole circle once it exceeds
    ``2 pi``); testing sweeps ``[0, (L_new-1) theta'_i]``.
    """
    seen = torch.clamp((train_len - 1) * theta, max=2 * math.pi)
    swept = torch.clamp((test_len - 1) * inv_freq, max=2 * math.pi)
    return torch.clamp(swept - seen, min=0) / swept.clamp(min=1e-12)


def plot_train_short_test_long(
    train_len: int = 256,
    scale: float = 4.0,
    d_head: int = 32,
    base: float = 10000.0,
    seed: int = 0,
) -> Figure:
    """A RoPE head trained on ``train_len`` tokens, evaluated on ``scale * train_len``.

    Left: the score ``q^T R_k k / sqrt(d)`` of a fixed random "long-range" head (q and
    k non-zero only on the slow pairs, those making less than one turn over the
    training context) as the distance ``k`` grows past the training length, for
    plain RoPE and the three extension methods (YaRN including its temperature).
    The horizontal band is the range of scores that plain RoPE produced during
    training; plain RoPE leaves it, the others stay close. Right: for each band,
    the share of rotation angles at test time that training never produced. Plain
    RoPE pushes its slow bands onto new angles; PI never does (but squeezes fast
    bands); NTK and YaRN keep fast bands and interpolate slow ones.
    Learned absolute positions have no row at all beyond ``train_len`` (an error),
    and ALiBi simply extends its straight lines.
    """
    if not (isinstance(train_len, int) and train_len >= 8):
        raise ValueError(f"train_len must be an int >= 8, got {train_len!r}")
    test_len = int(round(scale * train_len))
    spectra = _scaled_spectra(d_head, base, scale, train_len)
    _, mscale = P.yarn_inv_freq_and_temperature(d_head, base, scale, train_len)
    slow = P.yarn_band_ratios(d_head, base, train_len) < 1  # < 1 turn during training
    if not bool(slow.any()):
        slow = torch.arange(d_head // 2) >= (3 * d_head) // 8  # fall back: slowest quarter
    features = torch.cat((slow, slow)).double()  # "half" layout: pair i = (i, i + d/2)
    g = torch.Generator().manual_seed(seed)
    q, k = torch.randn(2, 1, 1, 1, d_head, generator=g, dtype=torch.float64) * features
    dist = torch.arange(test_len)

    fig = Figure(figsize=(11, 4.3), layout="constrained")
    ax_score, ax_bands = fig.subplots(1, 2)
    ax_score.axvspan(0, train_len, color="0.9", label="training length")
    for name, inv in spectra.items():
        keys = P.apply_rope(k.expand(1, 1, test_len, d_head), dist, inv_freq=inv)
        score = (keys[0, 0] @ q[0, 0, 0]) / math.sqrt(d_head)  # q^T R_k k / sqrt(d)
        if name == "YaRN":
            score = score * mscale**2  # temperature on q and k: logits times its square
        if name == "RoPE":
            seen = score[:train_len]
            ax_score.axhspan(
                float(seen.min()),
                float(seen.max()),
                color="gold",
                alpha=0.25,
                label="scores seen in training",
            )
        ax_score.plot(
            dist.numpy(),
            score.numpy(),
            color=METHOD_COLORS[name],
            lw=1.5 if name == "RoPE" else 1,
            label=name,
        )
    ax_score.set(
        xlabel="distance k",
        ylabel="score qᵀR_k k / √d",
        title=f"a long-range head ({int(slow.sum())} slow pairs), "
        f"trained on {train_len}, run on {test_len}",
    )
    ax_score.legend(fontsize=7, ncol=2)

    theta = spectra["RoPE"]
    for name, inv in spectra.items():
        frac = _unseen_angle_fraction(inv, theta, train_len, test_len)
        ax_bands.plot(
            range(d_head // 2), frac.numpy(), "o-", ms=3, color=METHOD_COLORS[name], label=name
        )
    ax_bands.set(
        ylim=(-0.03, 1.03),
        xlabel="pair index i (fast → slow)",
        ylabel="share of test angles never seen in training",
        title="out-of-distribution rotation angles per band",
    )
    ax_bands.legend(fontsize=8)
    fig.suptitle(
        f"Train short, test long (s = {scale:g}). Learned positions: no row beyond "
        f"{train_len}, an error. ALiBi: the same straight line, extended.",
        fontsize=10,
    )
    return fig


def train_short_test_long_explorer():
    """Scale and training-length sliders for :func:`plot_train_short_test_long`."""
    if is_headless():
        return headless_placeholder("train_short_test_long_explorer")
    import ipywidgets as w

    controls = [
        _control(
            w.FloatLogSlider(
                style=LABEL_STYLE, value=4, base=2, min=0, max=4, step=0.25, description="scale s"
            ),
            "scale",
        ),
        _control(
            w.Dropdown(
                style=LABEL_STYLE, options=[64, 128, 256, 512], value=256, description="L_train"
            ),
            "train_len",
        ),
        _control(
            w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed"), "seed"
        ),
    ]
    return _wire(controls, plot_train_short_test_long)
