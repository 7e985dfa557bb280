"""Widget for state-space models: the impulse response, and how far back a model remembers.

* :func:`ssm_kernel_explorer`: one SSM channel with a few state dimensions
  ``A = -(a, 2a, 4a, ...)`` (negative: the memory fades), discretised with step
  ``delta``. Left, the kernel ``K_l = C A_bar^l B_bar``: the weight of the input ``l``
  steps back, the output's response to a single impulse. Each state dimension decays
  like ``exp(delta A)^l``, so it forgets ``1 - 1/e`` of a token within about
  ``1 / (delta |A|)`` steps; the dotted line marks where the slowest one has fallen to
  1% (:func:`memory_horizon`). Small ``delta`` or small ``|A|``: a long memory.
  Right, what selectivity adds: an input pulse at token 5 is held in the state, and
  Mamba can *wipe* it by taking one large step ``delta`` at a chosen token (its
  ``delta`` depends on the input); the LTI model cannot.

The discretisation is the student's own where given (``ssm_kernel_explorer(
fns={"discretize_zoh": discretize_zoh})``), else :func:`toolkit.ssm.lti.discretize_zoh`.
"""

from __future__ import annotations

import math

import torch
from matplotlib.figure import Figure

from toolkit.ssm.lti import discretize_zoh
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: How the widget discretises; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"discretize_zoh": discretize_zoh}


def memory_horizon(delta: float, A: float, tol: float = 0.01) -> int:
    """Steps until ``exp(delta A)^l`` falls below ``tol``: ``ceil(ln tol / (delta A))`` (A < 0)."""
    if not A < 0 or not delta > 0 or not 0 < tol < 1:
        raise ValueError(f"need A < 0, delta > 0 and 0 < tol < 1, got {A}, {delta}, {tol}")
    return math.ceil(math.log(tol) / (delta * A))


def ssm_impulse_response(
    delta: float,
    a: float = 1.0,
    n_state: int = 3,
    length: int = 64,
    *,
    fns: dict | None = None,
) -> dict:
    """The kernel of one channel with ``A = -(a, 2a, 4a, ...)``, ``B = C = 1``, discretised
    with ``fns["discretize_zoh"]`` (default the toolkit's).

    Returns:
        dict with ``"A"`` ``(n_state,)``, ``"kernel"`` ``(length,)`` (discrete,
        ``K_l = C A_bar^l B_bar``), ``"continuous"`` ``(length,)`` (``delta C e^{A l delta}
        B``, the continuous impulse response at the same times, scaled by the step) and
        ``"horizon"`` (:func:`memory_horizon` of the slowest state).
    """
    f = widget_functions("ssm_impulse_response", fns, TOOLKIT_FUNCTIONS)
    if not a > 0:
        raise ValueError(f"a (the size of A) must be > 0, got {a}")
    A = -a * 2.0 ** torch.arange(n_state, dtype=torch.float64)  # (N,)
    ones = torch.ones_like(A)
    A_bar, B_bar = f.discretize_zoh(delta, A, ones)  # (N,) each
    steps = torch.arange(length, dtype=torch.float64)
    kernel = (A_bar[:, None] ** steps * B_bar[:, None]).sum(0)  # sum_n C_n A_bar_n^l B_bar_n
    continuous = delta * torch.exp(A[:, None] * steps * delta).sum(0)
    return {"A": A, "kernel": kernel, "continuous": continuous,
            "horizon": memory_horizon(delta, float(A.max()))}


def selective_forgetting(
    delta: float,
    a: float = 1.0,
    reset_at: int = 20,
    length: int = 48,
    reset_delta: float | None = None,
    *,
    fns: dict | None = None,
) -> dict:
    """A pulse at token 5 held in a one-dimensional state, without and with a reset step.

    Returns ``{"lti": (length,), "selective": (length,), "reset_delta": float}``: the
    state ``h_t`` when every step is ``delta``, and when token ``reset_at`` takes
    ``reset_delta`` instead. By default the reset step is large enough to keep at most
    1% of the state, ``exp(-a * reset_delta) <= 0.01``: ``max(5, ln(100) / a)``
    (``fns`` as in :func:`ssm_impulse_response`).
    """
    f = widget_functions("selective_forgetting", fns, TOOLKIT_FUNCTIONS)
    if reset_delta is None:
        reset_delta = max(5.0, math.log(100) / a)
    A, B = torch.tensor([-a], dtype=torch.float64), torch.ones(1, dtype=torch.float64)
    u = torch.zeros(length, dtype=torch.float64)
    u[5] = 1.0
    traces = {}
    for name, big in (("lti", delta), ("selective", reset_delta)):
        h, trace = torch.zeros(1, dtype=torch.float64), []
        for t in range(length):
            A_bar, B_bar = f.discretize_zoh(big if t == reset_at else delta, A, B)
            h = A_bar * h + B_bar * u[t]
            trace.append(float(h[0]))
        traces[name] = torch.tensor(trace)
    traces["reset_delta"] = reset_delta
    return traces


def plot_ssm_kernel(
    delta: float = 0.1,
    a: float = 0.5,
    n_state: int = 3,
    length: int = 96,
    reset_at: int = 20,
    *,
    fns: dict | None = None,
) -> Figure:
    """Kernel / impulse response (left) and selective forgetting (right) (``fns`` as in
    :func:`ssm_impulse_response`)."""
    r = ssm_impulse_response(delta, a, n_state, length, fns=fns)
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    left, right = fig.subplots(1, 2)
    left.stem(range(length), r["kernel"].tolist(), basefmt=" ", label="K_l = C A_bar^l B_bar")
    left.plot(range(length), r["continuous"].tolist(), color="tab:orange",
              label="delta C e^{A l delta} B (continuous)")
    if r["horizon"] < length:
        left.axvline(r["horizon"], ls=":", color="black", label=f"1% after {r['horizon']} steps")
    left.set_xlabel("l (steps back)")
    left.set_ylabel("weight of the input l steps back")
    a_list = ", ".join(f"{x:g}" for x in r["A"].tolist())
    left.set_title(f"delta = {delta:g}, A = ({a_list}): remembers ~{r['horizon']} steps",
                   fontsize=9)
    left.legend(fontsize=7)
    trace = selective_forgetting(delta, a, reset_at, fns=fns)
    right.plot(trace["lti"].tolist(), label="same delta at every token (LTI)")
    right.plot(trace["selective"].tolist(),
               label=f"delta = {trace['reset_delta']:.3g} at token {reset_at} (selective)")
    right.axvline(5, ls=":", color="gray")
    right.set_xlabel("token t")
    right.set_ylabel("state h_t")
    right.set_title("a pulse at token 5, held in the state", fontsize=9)
    right.legend(fontsize=7)
    return fig


def ssm_kernel_explorer(*, fns=None):
    """Sliders for ``delta``, ``|A|``, the number of state dimensions and the reset token.

    Args:
        fns: your own ``discretize_zoh`` (``(delta, A, B) -> (A_bar, B_bar)``) in place of
            the toolkit's: ``fns={"discretize_zoh": discretize_zoh}``.

    Returns:
        an ``ipywidgets.VBox`` (an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("ssm_kernel_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("ssm_kernel_explorer")
    import ipywidgets as w

    delta = w.FloatLogSlider(style=LABEL_STYLE, value=0.1, base=10, min=-2.5, max=0.5, step=0.05,
                             description="delta")
    a = w.FloatLogSlider(style=LABEL_STYLE, value=0.5, base=10, min=-2, max=1, step=0.05,
                         description="|A| (slowest)")
    n_state = w.IntSlider(style=LABEL_STYLE, value=3, min=1, max=6, description="state size N")
    reset = w.IntSlider(style=LABEL_STYLE, value=20, min=6, max=47, description="reset at token")

    def draw(delta, a, n_state, reset_at):
        return plot_ssm_kernel(delta, a, n_state, reset_at=reset_at, fns=fns)

    controls = dict(delta=delta, a=a, n_state=n_state, reset_at=reset)
    return live_figure(controls, draw, rows=[[delta, a], [n_state, reset]], functions=f)
