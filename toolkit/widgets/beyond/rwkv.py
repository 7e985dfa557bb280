"""Widget for RWKV: per-channel decay and what the WKV state keeps over time.

* :func:`rwkv_decay_explorer`: eight channels with decay rates ``w`` spread
  log-uniformly between two values you choose. Left, the weight ``e^{-(d-1) w}`` a
  token keeps ``d >= 1`` steps later in each channel (the recurrence adds a token to the
  state undecayed and decays it from the next step on; at ``d = 0`` the token is the
  current one and gets the bonus ``e^u`` instead): fast channels (large ``w``) see only the last
  few tokens, slow ones average over hundreds. Right, a sequence whose values are 0
  except at one *marked* token (value 1, key ``k_mark``); every other key is 0, so
  ``wkv_t`` is exactly the share of the marked token in channel ``c``'s weighted
  average at time ``t``. It jumps at the marked token (weighted by the bonus
  ``e^{u + k}``), then fades at each channel's own rate as later tokens dilute it.

The WKV recurrence is the student's own where given (``rwkv_decay_explorer(
fns={"wkv_recurrent": wkv_recurrent})``), else :func:`toolkit.rwkv.wkv_recurrent`.
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from toolkit.rwkv import wkv_recurrent
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What the widget computes ``wkv_t`` with; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"wkv_recurrent": wkv_recurrent}


def channel_decays(w_min: float = 0.01, w_max: float = 2.0, n_channels: int = 8) -> torch.Tensor:
    """``n_channels`` decay rates spaced log-uniformly from ``w_min`` to ``w_max``: ``(C,)``."""
    if not 0 < w_min <= w_max:
        raise ValueError(f"need 0 < w_min <= w_max, got {w_min} and {w_max}")
    return torch.logspace(torch.log10(torch.tensor(w_min)).item(),
                          torch.log10(torch.tensor(w_max)).item(), n_channels, dtype=torch.float64)


def wkv_trace(
    w: torch.Tensor,
    u: float = 0.5,
    mark_at: int = 8,
    k_mark: float = 2.0,
    length: int = 64,
    *,
    fns: dict | None = None,
) -> torch.Tensor:
    """``wkv_t`` per channel for values ``v = 1`` at ``mark_at`` and 0 elsewhere: ``(length, C)``.

    All keys are 0 except ``k_mark`` at the marked token, so the output is the marked
    token's share of each channel's weighted average. ``fns``: the student's
    ``wkv_recurrent`` in place of the toolkit's.
    """
    f = widget_functions("wkv_trace", fns, TOOLKIT_FUNCTIONS)
    if not 0 <= mark_at < length:
        raise ValueError(f"mark_at must be in [0, {length}), got {mark_at}")
    C = w.numel()
    k = torch.zeros(1, length, C, dtype=torch.float64)
    v = torch.zeros(1, length, C, dtype=torch.float64)
    k[:, mark_at], v[:, mark_at] = k_mark, 1.0
    u = torch.full((C,), float(u), dtype=torch.float64)
    return f.wkv_recurrent(k, v, w.to(torch.float64), u)[0]  # (length, C)


def plot_rwkv_decay(
    w_min: float = 0.01,
    w_max: float = 2.0,
    u: float = 0.5,
    mark_at: int = 8,
    k_mark: float = 2.0,
    length: int = 64,
    *,
    fns: dict | None = None,
) -> Figure:
    """Decay ``e^{-(d-1) w_c}`` of a token ``d >= 1`` steps back, per channel (left), and the
    marked token's share over time (right) (``fns`` as in :func:`wkv_trace`)."""
    w = channel_decays(w_min, w_max)
    trace = wkv_trace(w, u, mark_at, k_mark, length, fns=fns)
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    distance = torch.arange(1, length, dtype=torch.float64)  # d = 0 is the current token
    colours = [f"C{i}" for i in range(w.numel())]
    for c, (rate, colour) in enumerate(zip(w.tolist(), colours)):
        left.plot(distance.tolist(), torch.exp(-(distance - 1) * rate).tolist(), color=colour,
                  label=f"w = {rate:.3g}")
        right.plot(trace[:, c].tolist(), color=colour)
    left.set_xlabel("d (steps back)")
    left.set_ylabel("weight kept, e^{-(d-1) w}")
    left.set_title("per-channel decay", fontsize=9)
    left.legend(fontsize=7, ncol=2)
    right.axvline(mark_at, ls=":", color="gray")
    right.set_ylim(-0.02, 1.02)
    right.set_xlabel("token t")
    right.set_ylabel("share of the marked token in wkv_t")
    right.set_title(f"marked token at {mark_at} (key {k_mark:g}, bonus u = {u:g})", fontsize=9)
    return fig


def rwkv_decay_explorer(*, fns=None):
    """Sliders for the decay range, the bonus ``u``, the marked token and its key.

    Args:
        fns: your own ``wkv_recurrent`` (``(k, v, w, u) -> wkv``) in place of the
            toolkit's: ``fns={"wkv_recurrent": wkv_recurrent}``.

    Returns:
        an ``ipywidgets.VBox`` (an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("rwkv_decay_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("rwkv_decay_explorer")
    import ipywidgets as w

    w_range = w.FloatLogSlider(style=LABEL_STYLE, value=0.01, base=10, min=-3, max=0, step=0.1,
                               description="slowest w")
    w_top = w.FloatLogSlider(style=LABEL_STYLE, value=2.0, base=10, min=-1, max=1, step=0.1,
                             description="fastest w")
    u = w.FloatSlider(style=LABEL_STYLE, value=0.5, min=-3, max=3, step=0.1, description="bonus u")
    mark = w.IntSlider(style=LABEL_STYLE, value=8, min=0, max=40, description="marked token")
    k_mark = w.FloatSlider(style=LABEL_STYLE, value=2.0, min=-3, max=6, step=0.25,
                           description="its key")

    def draw(w_slow, w_fast, u, mark_at, k_mark):
        low, high = sorted((w_slow, w_fast))
        return plot_rwkv_decay(low, high, u, mark_at, k_mark, fns=fns)

    controls = dict(w_slow=w_range, w_fast=w_top, u=u, mark_at=mark, k_mark=k_mark)
    return live_figure(controls, draw, rows=[[w_range, w_top, u], [mark, k_mark]], functions=f)
