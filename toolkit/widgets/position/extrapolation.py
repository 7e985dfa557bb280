"""Train short, test long: which RoPE bands meet angles they never saw, and how PI, NTK and
YaRN avoid that."""

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
from toolkit.widgets.position.rope import METHOD_COLORS, SPECTRUM_FUNCTIONS, _scaled_spectra

#: What the widget computes with; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {
    **SPECTRUM_FUNCTIONS,
    "yarn_band_ratios": P.yarn_band_ratios,
    "apply_rope": P.apply_rope,
}


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
    *,
    fns: dict | None = None,
) -> Figure:
    """A RoPE head trained on ``train_len`` tokens, evaluated on ``scale * train_len``.

    Left: the score ``q^T R_k k / sqrt(d)`` of a fixed random "long-range" head (q and
    k non-zero only on the slow pairs, those making less than one turn over the
    training context) as the distance ``k`` grows past the training length, for
    plain RoPE and the three extension methods. YaRN is drawn with its rotation only:
    its temperature multiplies every score by ``(0.1 ln s + 1)^2`` on purpose (to keep
    the softmax as sharp over ``s`` times more keys), which would move its curve out of
    the band for a reason that has nothing to do with unseen angles; the title gives
    that factor. The horizontal band is the range of scores that plain RoPE produced
    during training: plain RoPE leaves it; PI and YaRN stay inside (or within a hair of
    it); NTK, whose slowest pairs are stretched by less than ``s``, strays at many
    settings, if less than plain RoPE. Right: for each band,
    the share of rotation angles at test time that training never produced. Plain
    RoPE pushes its slow bands onto new angles; PI never does (but squeezes fast
    bands); NTK and YaRN keep fast bands and interpolate slow ones.
    Learned absolute positions have no row at all beyond ``train_len`` (an error),
    and ALiBi simply extends its straight lines.

    ``fns``: the student's ``rope_inv_freq``, ``rope_inv_freq_linear``,
    ``rope_inv_freq_ntk``, ``yarn_inv_freq_and_temperature``, ``yarn_band_ratios`` or
    ``apply_rope``, by name, in place of the toolkit's.
    """
    f = widget_functions("plot_train_short_test_long", fns, TOOLKIT_FUNCTIONS)
    if not (isinstance(train_len, int) and train_len >= 8):
        raise ValueError(f"train_len must be an int >= 8, got {train_len!r}")
    test_len = int(round(scale * train_len))
    spectra = _scaled_spectra(f, d_head, base, scale, train_len)
    _, mscale = f.yarn_inv_freq_and_temperature(d_head, base, scale, train_len)
    slow = f.yarn_band_ratios(d_head, base, train_len) < 1  # < 1 turn during training
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
        keys = f.apply_rope(k.expand(1, 1, test_len, d_head), dist, inv_freq=inv)
        score = (keys[0, 0] @ q[0, 0, 0]) / math.sqrt(d_head)  # q^T R_k k / sqrt(d)
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
        title=f"a long-range head ({int(slow.sum())} slow pairs), trained on {train_len}, "
        f"run on {test_len}\n(YaRN's temperature, x{mscale**2:.2f} on every score, left out)",
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


def train_short_test_long_explorer(*, fns=None):
    """Scale and training-length sliders for :func:`plot_train_short_test_long`.

    Args:
        fns: your own functions in place of the toolkit's, by name: ``rope_inv_freq``,
            ``rope_inv_freq_linear``, ``rope_inv_freq_ntk``,
            ``yarn_inv_freq_and_temperature``, ``yarn_band_ratios``, ``apply_rope``.
    """
    f = widget_functions("train_short_test_long_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("train_short_test_long_explorer")
    import ipywidgets as w

    controls = {
        "scale": w.FloatLogSlider(
            style=LABEL_STYLE, value=4, base=2, min=0, max=4, step=0.25, description="scale s"
        ),
        "train_len": w.Dropdown(
            style=LABEL_STYLE, options=[64, 128, 256, 512], value=256, description="L_train"
        ),
        "seed": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed"),
    }
    def draw(**values):
        return plot_train_short_test_long(**values, fns=fns)

    return live_figure(controls, draw, tight=True, functions=f)
