"""Widget for the gated attention unit: its one squared-ReLU head and its gate.

* :func:`gau_explorer`: a small unit (``d_model = 8``, ``e = 16``, ``s = 4``) on a random
  sequence of ``T`` tokens. Left, the attention ``A = relu(Q K^T / n + b)^2`` (``n = T``
  bidirectional, ``i + 1`` for row ``i`` of a causal unit): no softmax, so rows do not
  sum to 1 and many weights are exactly 0; ``Q`` and ``K`` come from one shared ``Z``
  with their own scales and offsets, so ``A`` is not symmetric. Middle, the gate
  ``U = silu(X W_u)`` per token and channel, which multiplies the mixed values ``A V``
  elementwise: where ``U`` is near 0 that channel of the token ignores the attention.
  Right, the unit's output ``(U * A V) W_o`` per token and channel, computed by the
  student's ``GatedAttentionUnit`` where given.

``A`` and ``U`` are read from the unit's parameters with the formulas above; the output
is the unit's own forward pass (``gau_explorer(fns={"GatedAttentionUnit":
GatedAttentionUnit})``, else :class:`toolkit.gau.GatedAttentionUnit`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from matplotlib.figure import Figure

from toolkit.gau import GatedAttentionUnit
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What the widget builds; a student's own class replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"GatedAttentionUnit": GatedAttentionUnit}

D_MODEL, EXPANSION, D_QK = 8, 2.0, 4


def gau_internals(T: int = 10, causal: bool = False, seed: int = 0, *,
                  fns: dict | None = None) -> dict[str, torch.Tensor]:
    """The attention ``A (T, T)``, the gate ``U (T, e)`` and the output ``(T, d_model)`` of a
    small unit with random parameters (``seed``) on a random input."""
    f = widget_functions("gau_internals", fns, TOOLKIT_FUNCTIONS)
    if T < 1:
        raise ValueError(f"T must be >= 1, got {T}")
    torch.manual_seed(seed)
    unit = f.GatedAttentionUnit(D_MODEL, EXPANSION, D_QK, causal=causal).double().eval()
    with torch.no_grad():
        for p in (unit.q_gamma, unit.q_beta, unit.k_gamma, unit.k_beta):
            p.copy_(2.0 * torch.randn_like(p))  # distinct scales and offsets, as after training
        for layer in (unit.u_proj, unit.v_proj, unit.z_proj, unit.o_proj):
            layer.bias.zero_()  # the picture shows the mixing, not constant offsets
        x = 3.0 * torch.randn(1, T, D_MODEL, dtype=torch.float64)
        out = unit(x)[0]
        u = F.silu(unit.u_proj(x))[0]  # the gate U
        z = F.silu(unit.z_proj(x))[0]
        q, k = z * unit.q_gamma + unit.q_beta, z * unit.k_gamma + unit.k_beta
        n = torch.arange(1, T + 1, dtype=torch.float64)[:, None] if causal else float(T)
        A = F.relu(q @ k.T / n).square()  # relu(Q K^T / n)^2
        if causal:
            A = A.tril()  # future keys weigh exactly 0
    return {"A": A, "U": u, "out": out}


def plot_gau(T: int = 10, causal: bool = False, seed: int = 0, *,
             fns: dict | None = None) -> Figure:
    """The attention, the gate and the output of :func:`gau_internals`."""
    parts = gau_internals(T, causal, seed, fns=fns)
    fig = Figure(figsize=(12, 3.8), layout="constrained")
    left, middle, right = fig.subplots(1, 3)
    image = left.imshow(parts["A"].numpy(), cmap="viridis")
    fig.colorbar(image, ax=left, shrink=0.8)
    row_sums = parts["A"].sum(-1)
    left.set_title(f"A = relu(QK^T/n)^2 ({'causal' if causal else 'bidirectional'}); row sums "
                   f"{row_sums.min().item():.2g} to {row_sums.max().item():.2g}", fontsize=8)
    left.set_xlabel("key j")
    left.set_ylabel("query i")
    image = middle.imshow(parts["U"].numpy(), cmap="magma", aspect="auto")
    fig.colorbar(image, ax=middle, shrink=0.8)
    middle.set_title("gate U = silu(X W_u), multiplies A V", fontsize=8)
    middle.set_xlabel("channel of U")
    middle.set_ylabel("token")
    image = right.imshow(parts["out"].numpy(), cmap="coolwarm", aspect="auto")
    fig.colorbar(image, ax=right, shrink=0.8)
    right.set_title("output (U * A V) W_o of the unit", fontsize=8)
    right.set_xlabel("channel")
    right.set_ylabel("token")
    return fig


def gau_explorer(*, fns=None):
    """Sliders for the length and the seed, and a causal switch.

    Args:
        fns: your own class in place of the toolkit's:
            ``fns={"GatedAttentionUnit": GatedAttentionUnit}``.

    Returns:
        an ``ipywidgets.VBox`` (an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("gau_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("gau_explorer")
    import ipywidgets as w

    T = w.IntSlider(style=LABEL_STYLE, value=10, min=2, max=24, description="tokens T")
    causal = w.Checkbox(value=False, description="causal")
    seed = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=20, description="seed")

    def draw(T, causal, seed):
        return plot_gau(T, causal, seed, fns=fns)

    controls = dict(T=T, causal=causal, seed=seed)
    return live_figure(controls, draw, rows=[[T, causal, seed]], functions=f)
