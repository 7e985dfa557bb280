"""Widget for Mamba's selectivity: how an input-dependent step ``delta`` gates the state.

* :func:`mamba_selectivity_explorer`: one channel and one state dimension, a sequence of
  *filler* tokens (small values, weak gate input) and one *marked* token (value 1, a
  strong gate input). Mamba computes the step from the token,
  ``delta_t = softplus(bias + selectivity * g_t)``, so the marked token gets a large step
  and the fillers a small one. Top: ``delta_t`` per token, and the share of the state
  kept at each step, ``exp(delta_t A)``. Bottom: the state ``h_t`` of the selective scan,
  against an LTI scan whose ``delta`` is the same for every token (the mean of the
  selective ones). With selectivity the large step *writes* the marked token (and wipes
  what came before), the small steps leave it almost untouched through the fillers; the
  LTI model blurs it with every filler and forgets it at one fixed rate.

The scan is the student's own where given (``mamba_selectivity_explorer(
fns={"selective_scan": selective_scan})``), else :func:`toolkit.ssm.selective_scan`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from toolkit.ssm.selective import selective_scan
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What the widget scans with; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"selective_scan": selective_scan}


def selectivity_inputs(
    length: int = 40, mark_at: int = 10, seed: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(u, g)``, each ``(length,)``: filler values around 0.1 with weak gate inputs near
    -1, and at ``mark_at`` the value 1 with gate input +1."""
    if not 0 <= mark_at < length:
        raise ValueError(f"mark_at must be in [0, {length}), got {mark_at}")
    g = torch.Generator().manual_seed(seed)
    u = 0.1 * torch.randn(length, generator=g, dtype=torch.float64)
    gate = -1.0 + 0.2 * torch.randn(length, generator=g, dtype=torch.float64)
    u[mark_at], gate[mark_at] = 1.0, 1.0
    return u, gate


def selective_states(
    selectivity: float = 4.0,
    bias: float = -1.0,
    a: float = 1.0,
    length: int = 40,
    mark_at: int = 10,
    *,
    fns: dict | None = None,
) -> dict[str, torch.Tensor]:
    """Steps and states of the selective scan and of its LTI counterpart.

    ``delta_t = softplus(bias + selectivity * g_t)``; ``A = -a``; ``B = C = 1``; no ``D``.
    The LTI scan uses ``delta = mean(delta_t)`` at every token.

    Returns:
        ``{"delta", "kept", "selective", "lti", "u"}``, each ``(length,)``: the steps, the
        kept share ``exp(delta_t A)``, both outputs ``y_t = h_t`` and the input.
    """
    f = widget_functions("selective_states", fns, TOOLKIT_FUNCTIONS)
    if not a > 0:
        raise ValueError(f"a must be > 0 (A = -a), got {a}")
    u, gate = selectivity_inputs(length, mark_at)
    delta = F.softplus(bias + selectivity * gate)  # delta_t > 0, larger for a strong gate input
    A_log = torch.full((1, 1), math.log(a), dtype=torch.float64)  # A = -exp(A_log) = -a
    ones = torch.ones(1, length, 1, dtype=torch.float64)

    def scan(steps: torch.Tensor) -> torch.Tensor:
        return f.selective_scan(u[None, :, None], steps[None, :, None], A_log, ones, ones)[0, :, 0]

    return {
        "delta": delta,
        "kept": torch.exp(-a * delta),  # exp(delta_t A)
        "selective": scan(delta),
        "lti": scan(torch.full_like(delta, delta.mean().item())),
        "u": u,
    }


def plot_mamba_selectivity(
    selectivity: float = 4.0,
    bias: float = -1.0,
    a: float = 1.0,
    mark_at: int = 10,
    length: int = 40,
    *,
    fns: dict | None = None,
) -> Figure:
    """Steps and kept shares per token (top), the two scans' states (bottom)."""
    s = selective_states(selectivity, bias, a, length, mark_at, fns=fns)
    t = list(range(length))
    fig = Figure(figsize=(10, 5.2), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    top.bar(t, s["delta"].tolist(), color="C0", alpha=0.6, label="step delta_t")
    top.plot(t, s["kept"].tolist(), "C3.-", label="kept exp(delta_t A)")
    top.set_ylabel("per token")
    top.set_title("delta_t = softplus(bias + selectivity * g_t): the marked token takes a large "
                  "step", fontsize=9)
    top.legend(fontsize=8, loc="upper right")
    bottom.plot(t, s["selective"].tolist(), "C0", lw=2, label="selective (Mamba)")
    bottom.plot(t, s["lti"].tolist(), "C1--", lw=2, label="same delta for every token (LTI)")
    bottom.plot(t, s["u"].tolist(), color="gray", lw=0.8, label="input u_t")
    for ax in (top, bottom):
        ax.axvline(mark_at, ls=":", color="gray")
    bottom.set_xlabel("token t")
    bottom.set_ylabel("state h_t")
    bottom.legend(fontsize=8, loc="upper right")
    return fig


def mamba_selectivity_explorer(*, fns=None):
    """Sliders for the selectivity, the step's bias, ``|A|`` and the marked token.

    Args:
        fns: your own ``selective_scan`` in place of the toolkit's:
            ``fns={"selective_scan": selective_scan}``.

    Returns:
        an ``ipywidgets.VBox`` (an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("mamba_selectivity_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("mamba_selectivity_explorer")
    import ipywidgets as w

    selectivity = w.FloatSlider(style=LABEL_STYLE, value=4.0, min=0.0, max=8.0, step=0.25,
                                description="selectivity")
    bias = w.FloatSlider(style=LABEL_STYLE, value=-1.0, min=-4.0, max=2.0, step=0.25,
                         description="step bias")
    a = w.FloatLogSlider(style=LABEL_STYLE, value=1.0, base=10, min=-1.5, max=1, step=0.1,
                         description="|A|")
    mark = w.IntSlider(style=LABEL_STYLE, value=10, min=0, max=35, description="marked token")

    def draw(selectivity, bias, a, mark_at):
        return plot_mamba_selectivity(selectivity, bias, a, mark_at, fns=fns)

    controls = dict(selectivity=selectivity, bias=bias, a=a, mark_at=mark)
    return live_figure(controls, draw, rows=[[selectivity, bias], [a, mark]], functions=f)
