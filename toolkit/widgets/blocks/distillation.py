"""Distillation's temperature: what a softened teacher says, and why the loss has T^2.

:func:`temperature_explorer` shows a teacher's and a student's distributions over a few
words, softened by the temperature ``T``. Low ``T`` leaves the teacher's top word alone;
high ``T`` reveals the ranking of the others, the "dark knowledge" the student learns
from (arXiv 1503.02531). The right panel shows ``KL`` and ``T^2 KL`` against ``T``:
without the ``T^2`` the soft loss (and its gradient) fades as ``T`` grows.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from matplotlib.figure import Figure

from toolkit.arguments import check_temperature
from toolkit.distill import soft_target_loss
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: A made-up next-word example: "the cat sat on the ___".
EXAMPLE_WORDS = ("mat", "floor", "sofa", "roof", "table", "moon", "idea", "seven")
TEACHER_LOGITS = (6.0, 4.6, 4.1, 3.0, 2.7, 0.5, -1.0, -2.0)
STUDENT_LOGITS = (3.0, 3.2, 1.0, 2.5, 0.5, 1.5, 0.0, -0.5)
#: The soft loss the slider plots; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"soft_target_loss": soft_target_loss}


def plot_soft_targets(teacher_logits, student_logits, temperature: float,
                      words: Sequence[str] = EXAMPLE_WORDS,
                      loss_fn: Callable = soft_target_loss) -> Figure:
    """Teacher and student distributions at ``T``, and KL / T^2 KL against ``T``."""
    z_t = torch.as_tensor(teacher_logits, dtype=torch.float64)
    z_s = torch.as_tensor(student_logits, dtype=torch.float64)
    if z_t.shape != z_s.shape or z_t.dim() != 1 or len(words) != len(z_t):
        raise ValueError("teacher_logits, student_logits and words must be 1-D of one length")
    check_temperature(temperature)
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_p, ax_l = fig.subplots(1, 2, width_ratios=[1.4, 1])
    n = len(words)
    for offset, (z, label, color) in enumerate(((z_t, "teacher", "tab:blue"),
                                                (z_s, "student", "tab:orange"))):
        ax_p.bar([i + 0.4 * offset - 0.2 for i in range(n)],
                 torch.softmax(z / temperature, -1).numpy(), 0.4,
                 label=f"{label}, T = {temperature:.2g}", color=color)
    ax_p.plot(range(n), torch.softmax(z_t, -1).numpy(), "k_", ms=14, label="teacher, T = 1")
    ax_p.set_xticks(range(n), words, rotation=30)
    ax_p.set_ylabel("probability")
    ax_p.set_title('"the cat sat on the ___"')
    ax_p.legend(fontsize=8)
    temps = torch.logspace(-0.3, 1.3, 40).tolist()
    with_t2 = [float(loss_fn(z_s[None], z_t[None], t)) for t in temps]
    without = [v / t**2 for v, t in zip(with_t2, temps)]
    ax_l.plot(temps, with_t2, label="T^2 KL (the soft loss)")
    ax_l.plot(temps, without, "--", label="KL alone")
    current = float(loss_fn(z_s[None], z_t[None], temperature))
    ax_l.plot([temperature], [current], "ko")
    ax_l.set_xscale("log")
    ax_l.set_xlabel("temperature T")
    ax_l.set_title(f"soft loss at T = {temperature:.2g}: {current:.3f}")
    ax_l.grid(alpha=0.3)
    ax_l.legend(fontsize=8)
    return fig


def temperature_explorer(teacher_logits=TEACHER_LOGITS, student_logits=STUDENT_LOGITS,
                         words: Sequence[str] = EXAMPLE_WORDS, *, fns=None):
    """A temperature slider over :func:`plot_soft_targets`.

    Args:
        teacher_logits, student_logits, words: the example (default: "the cat sat on the").
        fns: your own soft loss in place of the toolkit's, called as
            ``soft_target_loss(student_logits, teacher_logits, T)`` and returning
            ``T^2 KL``: ``fns={"soft_target_loss": soft_target_loss}``.
    """
    f = widget_functions("temperature_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("temperature_explorer")
    import ipywidgets as w

    controls = {
        "temperature": w.FloatLogSlider(style=LABEL_STYLE, value=1.0, base=10, min=-0.3,
                                        max=1.3, step=0.05, description="temperature T"),
    }

    def draw(temperature):
        return plot_soft_targets(teacher_logits, student_logits, temperature, words,
                                 f.soft_target_loss)

    return live_figure(controls, draw, functions=f)
