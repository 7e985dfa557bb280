"""Long context, one axis for every RoPE extension method: the input length.

PI, NTK-aware scaling and YaRN are *static*: a model configured for a scale ``s`` runs
with the changed speeds at every length, short inputs included. Two methods look at
the input first:

* **dynamic NTK** (Hugging Face's ``"dynamic"`` rope type) recomputes the NTK base from
  the current length ``T``, so an input within the training length sees plain RoPE
  and a longer one gets just enough slow-down for its own length;
* **LongRoPE** (arXiv 2402.13753) keeps two sets of per-pair factors, ``short`` used
  while ``T <= L_train`` and ``long`` beyond it (Phi-3's ``short_factor`` and
  ``long_factor``).

:func:`plot_long_context` draws, against ``T``, what each method costs and what it
buys: whether some pair meets rotation angles training never produced, and how much
the pairs are slowed down (which short inputs pay for nothing).
"""

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
from toolkit.widgets.position.extrapolation import _unseen_angle_fraction
from toolkit.widgets.position.rope import METHOD_COLORS, SPECTRUM_FUNCTIONS

#: Methods in the order they are drawn; the first five are named as in ``METHOD_COLORS``.
METHODS = ("RoPE", "PI", "NTK", "YaRN", "dynamic NTK", "LongRoPE")
_COLORS = {**METHOD_COLORS, "LongRoPE": "tab:red"}

#: What the widget computes with; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {
    **SPECTRUM_FUNCTIONS,
    "yarn_band_ratios": P.yarn_band_ratios,
    "rope_inv_freq_dynamic_ntk": P.rope_inv_freq_dynamic_ntk,
    "longrope_inv_freq": P.longrope_inv_freq,
}
_STYLES = {"RoPE": "--", "LongRoPE": "-."}  # LongRoPE runs on top of PI and YaRN on the left


def longrope_example_factors(
    d_head: int, base: float, scale: float, original_max_position_embeddings: int, *, fns=None
) -> torch.Tensor:
    """Illustrative LongRoPE ``long`` factors ``lambda_i`` (one per pair), for plots.

    LongRoPE *searches* its factors per model (evolutionary search on perplexity); the
    real ones ship in a checkpoint's config. These have the shape such a search tends
    to find, without claiming to be one: ``1`` for pairs that turn 32 times or more
    over the training context, ``s`` for pairs that turn less than once, and a
    geometric rise in between (linear in ``ln r_i``, ``r_i`` from
    :func:`toolkit.position.yarn_band_ratios`).

    ``fns``: the student's ``yarn_band_ratios`` in place of the toolkit's.

    Returns:
        ``(d_head / 2,)`` float64 tensor of factors ``>= 1``.
    """
    f = widget_functions("longrope_example_factors", fns,
                         {"yarn_band_ratios": P.yarn_band_ratios})
    r = f.yarn_band_ratios(d_head, base, original_max_position_embeddings)  # turns per L_train
    rise = ((math.log(32.0) - r.log()) / math.log(32.0)).clamp(0, 1)  # 0 at r >= 32, 1 at r <= 1
    return scale**rise  # lambda_i = s^rise_i


def extension_inv_freq(
    method: str,
    d_head: int,
    base: float,
    scale: float,
    original_max_position_embeddings: int,
    seq_len: int,
    *,
    fns=None,
) -> torch.Tensor:
    """The angular speeds ``theta'_i`` a method uses for an input of ``seq_len`` tokens.

    ``method`` is one of :data:`METHODS`. The static ones ignore ``seq_len``; dynamic NTK
    and LongRoPE (with ``short`` factors 1 and :func:`longrope_example_factors` as
    ``long``) switch on ``seq_len > original_max_position_embeddings``. ``fns``: the
    student's own, by name, in place of the toolkit's: the seven of :data:`TOOLKIT_FUNCTIONS`.

    Returns:
        ``(d_head / 2,)`` float64 tensor.
    """
    f = widget_functions("extension_inv_freq", fns, TOOLKIT_FUNCTIONS)
    L = original_max_position_embeddings
    if method == "RoPE":
        return f.rope_inv_freq(d_head, base, dtype=torch.float64)
    if method == "PI":
        return f.rope_inv_freq_linear(d_head, base, scale, dtype=torch.float64)
    if method == "NTK":
        return f.rope_inv_freq_ntk(d_head, base, scale, dtype=torch.float64)
    if method == "YaRN":
        return f.yarn_inv_freq_and_temperature(d_head, base, scale, L)[0].double()
    if method == "dynamic NTK":
        return f.rope_inv_freq_dynamic_ntk(d_head, base, seq_len, L, scale, dtype=torch.float64)
    if method == "LongRoPE":
        ratios = {"yarn_band_ratios": f.yarn_band_ratios}
        factors = (longrope_example_factors(d_head, base, scale, L, fns=ratios) if seq_len > L
                   else torch.ones(d_head // 2, dtype=torch.float64))  # long / short set
        return f.longrope_inv_freq(d_head, base, factors, dtype=torch.float64)
    raise ValueError(f"method must be one of {METHODS}, got {method!r}")


def plot_long_context(
    train_len: int = 256, scale: float = 4.0, d_head: int = 32, base: float = 10000.0, *,
    fns=None,
) -> Figure:
    """All six methods against the input length ``T``, from 1 to ``2 s L_train``.

    Left: the worst pair's share of rotation angles at length ``T`` that training (plain
    RoPE on ``L_train`` tokens) never produced; 0 means every angle is familiar. Right:
    the mean slow-down of the pairs, ``mean_i (1 - theta'_i / theta_i)``; 0 means the
    model sees exactly the speeds it was trained with. Static methods pay on the right
    at every length; dynamic NTK and LongRoPE pay only past ``L_train``. On the left,
    PI, YaRN and LongRoPE coincide up to ``s L_train`` (each slows the slowest pairs by
    exactly ``s``), while the NTK base changes let some middle pairs drift onto new
    angles earlier: the weakness YaRN's per-band ramp was designed to remove.

    ``fns``: the student's own functions, by name, in place of the toolkit's (those of
    :data:`TOOLKIT_FUNCTIONS`).
    """
    f = widget_functions("plot_long_context", fns, TOOLKIT_FUNCTIONS)
    if not (isinstance(train_len, int) and train_len >= 8):
        raise ValueError(f"train_len must be an int >= 8, got {train_len!r}")
    lengths = torch.linspace(1, 2 * scale * train_len, 160).round().long().unique().tolist()
    theta = f.rope_inv_freq(d_head, base, dtype=torch.float64)

    fig = Figure(figsize=(11, 4.3), layout="constrained")
    ax_unseen, ax_slow = fig.subplots(1, 2, sharex=True)
    for name in METHODS:
        unseen, slow = [], []
        for T in lengths:
            inv = extension_inv_freq(name, d_head, base, scale, train_len, T, fns=fns)
            unseen.append(float(_unseen_angle_fraction(inv, theta, train_len, T).max()))
            slow.append(float((1 - inv / theta).mean()))  # mean_i (1 - theta'_i / theta_i)
        style = dict(color=_COLORS[name], lw=2 if name in ("dynamic NTK", "LongRoPE") else 1.2,
                     ls=_STYLES.get(name, "-"), label=name)
        ax_unseen.plot(lengths, unseen, **style)
        ax_slow.plot(lengths, slow, **style)
    for ax in (ax_unseen, ax_slow):
        ax.axvline(train_len, color="grey", lw=1, ls=":")
        ax.axvline(scale * train_len, color="red", lw=1, ls=":")
        ax.set_xlabel(f"input length T (grey: L_train = {train_len}, red: s L_train = "
                      f"{int(scale * train_len)})")
    ax_unseen.set(ylim=(-0.03, 1.03), ylabel="worst pair: share of angles never seen",
                  title="does any pair leave the angles it was trained on?")
    ax_slow.set(ylim=(-0.03, 1.03), ylabel="mean slow-down  1 - θ'_i/θ_i",
                title="what it costs: how much the pairs are slowed")
    ax_unseen.legend(fontsize=8)
    fig.suptitle(f"RoPE context extension against input length (s = {scale:g}, d_head = "
                 f"{d_head}; LongRoPE with illustrative factors)", fontsize=10)
    return fig


def long_context_explorer(*, fns=None):
    """Scale, training length and head size for :func:`plot_long_context`.

    Args:
        fns: your own functions in place of the toolkit's, by name: ``rope_inv_freq``,
            ``rope_inv_freq_linear``, ``rope_inv_freq_ntk``, ``yarn_inv_freq_and_temperature``,
            ``yarn_band_ratios``, ``rope_inv_freq_dynamic_ntk``, ``longrope_inv_freq``.
    """
    f = widget_functions("long_context_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("long_context_explorer")
    import ipywidgets as w

    controls = {
        "scale": w.FloatLogSlider(style=LABEL_STYLE, value=4, base=2, min=0, max=4, step=0.25,
                                  description="scale s"),
        "train_len": w.Dropdown(style=LABEL_STYLE, options=[64, 128, 256, 512], value=256,
                                description="L_train"),
        "d_head": w.Dropdown(style=LABEL_STYLE, options=[16, 32, 64, 128], value=32,
                             description="d_head"),
    }

    def note(scale, train_len, **_):
        return (f"Up to {train_len} tokens dynamic NTK and LongRoPE are plain RoPE, while PI, "
                "NTK and YaRN run slowed down at every length. PI, YaRN and LongRoPE keep every "
                f"pair on familiar angles up to {int(scale * train_len)} tokens; the NTK base "
                "changes let some middle pairs drift onto new angles sooner.")

    def draw(**values):
        return plot_long_context(**values, fns=fns)

    return live_figure(controls, draw, note, tight=True, functions=f)
