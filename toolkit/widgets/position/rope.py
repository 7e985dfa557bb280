"""RoPE widgets: the spectrum of pair speeds and how extensions rescale it, one pair turning."""

from __future__ import annotations

import math

import torch
from matplotlib.figure import Figure

from toolkit import position as P
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

METHOD_COLORS = {
    "RoPE": "black",
    "PI": "tab:blue",
    "NTK": "tab:orange",
    "YaRN": "tab:green",
    "dynamic NTK": "tab:purple",
}

#: What each widget computes with; a student's own replace them through ``fns``.
SPECTRUM_FUNCTIONS = {
    "rope_inv_freq": P.rope_inv_freq,
    "rope_inv_freq_linear": P.rope_inv_freq_linear,
    "rope_inv_freq_ntk": P.rope_inv_freq_ntk,
    "yarn_inv_freq_and_temperature": P.yarn_inv_freq_and_temperature,
}
ROTATION_FUNCTIONS = {"apply_rope": P.apply_rope, "rope_inv_freq": P.rope_inv_freq}


def _scaled_spectra(
    f, d_head: int, base: float, scale: float, train_len: int, beta_fast=32, beta_slow=1
) -> dict:
    """Angular speeds (float64) of plain RoPE and of each extension method, computed with
    the functions of ``f`` (:func:`~toolkit.widgets.display.widget_functions`)."""
    yarn, _ = f.yarn_inv_freq_and_temperature(d_head, base, scale, train_len, beta_fast, beta_slow)
    return {
        "RoPE": f.rope_inv_freq(d_head, base, dtype=torch.float64),
        "PI": f.rope_inv_freq_linear(d_head, base, scale, dtype=torch.float64),
        "NTK": f.rope_inv_freq_ntk(d_head, base, scale, dtype=torch.float64),
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
    *,
    fns: dict | None = None,
) -> Figure:
    """Per-band wavelength of RoPE and its PI / NTK / YaRN rescalings.

    Left: wavelength ``2 pi / theta_i`` (tokens per turn) for every pair ``i``, with
    the training length ``L`` and the target length ``s L`` as horizontal lines.
    Bands below ``L / beta_fast`` turn many times within the training context; bands
    above ``L / beta_slow`` not even once. Right: ``theta'_i / theta_i``, 1 for an
    untouched band and ``1/s`` for a fully interpolated one. ``fns``: the student's
    ``rope_inv_freq``, ``rope_inv_freq_linear``, ``rope_inv_freq_ntk`` or
    ``yarn_inv_freq_and_temperature``, by name, in place of the toolkit's.
    """
    f = widget_functions("plot_rope_spectrum", fns, SPECTRUM_FUNCTIONS)
    L = original_max_position_embeddings
    spectra = _scaled_spectra(f, d_head, base, scale, L, beta_fast, beta_slow)
    _, mscale = f.yarn_inv_freq_and_temperature(d_head, base, scale, L, beta_fast, beta_slow)
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


def rope_spectrum_explorer(*, fns=None):
    """Scale, base, head size and training length sliders for :func:`plot_rope_spectrum`.

    Args:
        fns: your own functions in place of the toolkit's, by name: ``rope_inv_freq``,
            ``rope_inv_freq_linear``, ``rope_inv_freq_ntk``,
            ``yarn_inv_freq_and_temperature``; e.g. ``fns={"rope_inv_freq": rope_inv_freq}``.
    """
    f = widget_functions("rope_spectrum_explorer", fns, SPECTRUM_FUNCTIONS)
    if is_headless():
        return headless_placeholder("rope_spectrum_explorer")
    import ipywidgets as w

    controls = {
        "scale": w.FloatLogSlider(
            style=LABEL_STYLE, value=4, base=2, min=0, max=5, step=0.25, description="scale s"
        ),
        "d_head": w.Dropdown(
            style=LABEL_STYLE, options=[32, 64, 128], value=64, description="d_head"
        ),
        "base": w.FloatLogSlider(
            style=LABEL_STYLE, value=1e4, base=10, min=3, max=7, step=0.25, description="base"
        ),
        "original_max_position_embeddings": w.Dropdown(
            style=LABEL_STYLE,
            options=[512, 2048, 4096, 8192, 32768],
            value=2048,
            description="L_train",
        ),
    }

    def note(scale, d_head, base, original_max_position_embeddings):
        ntk_base = base * scale ** (d_head / (d_head - 2))
        return (
            f"PI divides every θ_i by s = {scale:.3g}. NTK keeps the formula with base' = "
            f"base·s<sup>d/(d-2)</sup> = {ntk_base:.4g}. YaRN keeps bands with more than 32 "
            "turns in the training context, interpolates those with less than 1, and "
            f"multiplies q and k by 0.1 ln s + 1 = {0.1 * math.log(scale) + 1:.3f}."
        )

    def draw(**values):
        return plot_rope_spectrum(**values, fns=fns)

    return live_figure(controls, draw, note, tight=True, functions=f)


# ---------------------------------------------------------------------------
# RoPE rotation of one pair
# ---------------------------------------------------------------------------


def plot_rope_rotation(
    position: int = 5,
    pair_index: int = 0,
    d_head: int = 16,
    base: float = 10000.0,
    layout: str = "half",
    *,
    fns: dict | None = None,
) -> Figure:
    """One feature pair of a fixed vector as it is rotated for positions ``0 .. position``.

    The rotation is computed with :func:`toolkit.position.apply_rope` (or the student's,
    ``fns={"apply_rope": ...}``, with their ``rope_inv_freq`` likewise) on a vector whose
    only non-zero entries are the two members of the chosen pair. Right panel: the
    cosine of every band's angle at the current position (fast bands on the left).
    """
    f = widget_functions("plot_rope_rotation", fns, ROTATION_FUNCTIONS)
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
    rotated = f.apply_rope(
        x.expand(1, 1, position + 1, d_head), positions, base=base, layout=layout
    )
    pts = rotated[0, 0][:, [a, b]]  # (position+1, 2)
    theta = f.rope_inv_freq(d_head, base, dtype=torch.float64)

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


def rope_rotation_explorer(*, fns=None):
    """A position slider (with a play button) and a pair selector for :func:`plot_rope_rotation`.

    Args:
        fns: your own ``apply_rope`` and ``rope_inv_freq`` in place of the toolkit's, e.g.
            ``fns={"apply_rope": apply_rope, "rope_inv_freq": rope_inv_freq}``.
    """
    f = widget_functions("rope_rotation_explorer", fns, ROTATION_FUNCTIONS)
    if is_headless():
        return headless_placeholder("rope_rotation_explorer")
    import ipywidgets as w

    d_head = 16
    controls = {
        "position": w.IntSlider(
            style=LABEL_STYLE, value=5, min=0, max=200, description="position"
        ),
        "pair_index": w.IntSlider(
            style=LABEL_STYLE, value=0, min=0, max=d_head // 2 - 1, description="pair i"
        ),
        "layout": w.Dropdown(
            style=LABEL_STYLE, options=["half", "interleaved"], value="half", description="layout"
        ),
    }
    play = w.Play(value=5, min=0, max=200, interval=150, description="play")
    w.jslink((play, "value"), (controls["position"], "value"))
    return live_figure(
        controls,
        lambda **values: plot_rope_rotation(d_head=d_head, **values, fns=fns),
        rows=[[play, *controls.values()]],
        tight=True,
        functions=f,
    )
