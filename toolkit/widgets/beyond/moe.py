"""Widget for mixture-of-experts routing: expert collapse, the balancing loss, dropped tokens.

* :func:`router_load_explorer`: a toy router learns to send 256 tokens to 8 experts
  (or as many as you choose), twice: once with the task loss alone and once with the
  load-balancing loss added. The bars show how many tokens each expert receives at the
  end, the dashed line its capacity for the chosen capacity factor, and the red part
  of a bar the assignments that overflow it and are dropped.

The toy's "task" stands in for real training dynamics: every expert has a skill that
grows with the tokens it was trained on, and the router is rewarded for sending tokens
to skilled experts. Experts that start slightly ahead get more tokens, grow more
skilled and attract still more: **expert collapse**. The balancing loss ``alpha N sum
f_i P_i`` pushes back. Both runs start from the same weights.

The routing and the loss are the student's own where given: ``router_load_explorer(
fns={"top_k_gating": top_k_gating, "load_balancing_loss": load_balancing_loss})``. The
drops need no exercise: an expert given ``load`` assignments keeps ``capacity`` of them
and drops the rest, however the kept ones are chosen.
"""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from toolkit.arguments import check_top_k
from toolkit.moe import expert_capacity, expert_load, load_balancing_loss, top_k_gating
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What the toy router trains with; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {"top_k_gating": top_k_gating, "load_balancing_loss": load_balancing_loss}


def simulate_router(
    n_experts: int = 8,
    k: int = 2,
    alpha: float = 0.0,
    steps: int = 40,
    n_tokens: int = 256,
    d_model: int = 8,
    seed: int = 0,
    lr: float = 2.0,
    skill_growth: float = 30.0,
    *,
    fns: dict | None = None,
) -> dict:
    """Train a toy router with ``task + alpha * balance_loss`` by gradient descent.

    The gates use ``"softmax_then_topk"`` (Switch): with it the task loss reaches the
    router even for ``k = 1``. ``fns``: the student's ``top_k_gating`` and
    ``load_balancing_loss`` in place of the toolkit's.

    Returns:
        dict with ``"load"`` int64 ``(steps, n_experts)`` (assignments per expert at each
        step), ``"indices"`` ``(n_tokens, k)`` (the last routing) and ``"balance_loss"``
        (a list, one value per step).
    """
    f = widget_functions("simulate_router", fns, TOOLKIT_FUNCTIONS)
    check_top_k(k, n_experts)
    if alpha < 0 or steps < 1:
        raise ValueError(f"alpha must be >= 0 and steps >= 1, got {alpha} and {steps}")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n_tokens, d_model, generator=g)  # the tokens' hidden states
    W = (0.1 * torch.randn(n_experts, d_model, generator=g)).requires_grad_(True)  # router
    skill = 0.05 * torch.randn(n_experts, generator=g)  # how good each expert is so far
    loads, balance = [], []
    for _ in range(steps):
        logits = x @ W.T
        gates, indices = f.top_k_gating(logits, k, "softmax_then_topk")  # (n_tokens, k) each
        load = expert_load(indices, n_experts)  # (n_experts,)
        aux = f.load_balancing_loss(logits, k)
        task = -(gates * skill[indices]).sum(-1).mean()  # reward: gate-weighted skill
        (grad,) = torch.autograd.grad(task + alpha * aux, W)
        with torch.no_grad():
            W -= lr * grad
        # Experts learn from the tokens they receive: the rich get richer.
        skill = skill + skill_growth * load.float() / (n_tokens * k * steps)
        loads.append(load)
        balance.append(float(aux.detach()))
    return {"load": torch.stack(loads), "indices": indices.detach(), "balance_loss": balance}


def plot_router_load(
    without: dict, with_balance: dict, capacity_factor: float = 1.25, alpha: float | None = None
) -> Figure:
    """Final load per expert without / with the balancing loss, capacity and drops."""
    fig = Figure(figsize=(11, 3.6), layout="constrained")
    axes = fig.subplots(1, 3, gridspec_kw={"width_ratios": [1, 1, 1.1]})
    n_tokens, k = without["indices"].shape
    n_experts = without["load"].size(1)
    capacity = expert_capacity(n_tokens, n_experts, k, capacity_factor)
    runs = (("task loss only", without, "tab:gray"),
            (f"+ balancing loss (alpha = {alpha:g})" if alpha is not None else "+ balancing loss",
             with_balance, "tab:blue"))
    top = max(int(r["load"][-1].max()) for _, r, _ in runs)
    for ax, (title, run, colour) in zip(axes[:2], runs):
        load = run["load"][-1]
        dropped = (load - capacity).clamp(min=0)  # each expert keeps `capacity`, drops the rest
        experts = range(n_experts)
        ax.bar(experts, (load - dropped).tolist(), color=colour, label="routed")
        ax.bar(experts, dropped.tolist(), bottom=(load - dropped).tolist(), color="tab:red",
               label="dropped")
        ax.axhline(capacity, ls="--", color="black", lw=1, label=f"capacity {capacity}")
        ax.axhline(n_tokens * k / n_experts, ls=":", color="tab:green", lw=1, label="even split")
        # Head room above the tallest bar for the legend's two rows, so it never covers one.
        ax.set_ylim(0, max(top, capacity) * 1.6)
        ax.set_xlabel("expert")
        ax.set_ylabel("assignments")
        ax.set_title(f"{title}\n{int(dropped.sum())} of {n_tokens * k} dropped", fontsize=9)
        ax.legend(fontsize=7, loc="upper center", ncol=2)
    ax = axes[2]
    for title, run, colour in runs:
        share = run["load"].max(1).values.float() / (n_tokens * k)
        ax.plot(share.tolist(), color=colour, label=title)
    ax.axhline(1 / n_experts, ls=":", color="tab:green", lw=1, label="even split")
    ax.set_xlabel("training step")
    ax.set_ylabel("busiest expert's share")
    ax.set_title("collapse over training", fontsize=9)
    ax.legend(fontsize=7)
    fig.suptitle(f"{n_tokens} tokens, {n_experts} experts, top-{k}, capacity factor "
                 f"{capacity_factor:g}", fontsize=10)
    return fig


def router_load_explorer(*, fns=None):
    """Sliders for experts, k, the balancing weight alpha and the capacity factor.

    Args:
        fns: your own functions in place of the toolkit's, by name: ``top_k_gating``
            (``(logits, k, gating) -> (gates, indices)``) and ``load_balancing_loss``
            (``(router_logits, k) -> loss``); e.g. ``fns={"top_k_gating": top_k_gating,
            "load_balancing_loss": load_balancing_loss}``.

    Returns:
        an ``ipywidgets.VBox`` (an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("router_load_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("router_load_explorer")
    import ipywidgets as w

    n_experts = w.IntSlider(style=LABEL_STYLE, value=8, min=2, max=16, description="experts")
    k = w.IntSlider(style=LABEL_STYLE, value=2, min=1, max=4, description="top-k")
    alpha = w.FloatLogSlider(style=LABEL_STYLE, value=1.0, base=10, min=-3, max=1, step=0.1,
                             description="alpha")
    factor = w.FloatSlider(style=LABEL_STYLE, value=1.25, min=0.5, max=2.5, step=0.05,
                           description="capacity factor")

    def draw(n_experts, k, alpha, capacity_factor):
        k = min(k, n_experts)
        runs = [simulate_router(n_experts, k, a, fns=fns) for a in (0.0, alpha)]
        return plot_router_load(*runs, capacity_factor, alpha)

    controls = dict(n_experts=n_experts, k=k, alpha=alpha, capacity_factor=factor)
    return live_figure(controls, draw, rows=[[n_experts, k], [alpha, factor]], functions=f)
