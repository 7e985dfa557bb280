"""Widgets for Assignment 05: the block around attention, BERT's objective, distillation.

What each one is for
--------------------
* :func:`layer_scale_explorer`: a deep stack at initialisation, Post-LN against Pre-LN:
  the size of each block's output and the gradient reaching it. Post-LN's gradients are
  larger than Pre-LN's, more so the deeper the stack: the reason it needs a learning-rate
  warm-up.
* :func:`plot_warmup_runs`: the loss curves of :func:`toolkit.warmup.warmup_experiment`.
* :func:`glu_gate_explorer`: one token through a gated feed-forward network; which hidden
  units the gate opens, for a ReLU, sigmoid, GELU or SiLU gate.
* :func:`mlm_masking_playground`: a sentence masked by BERT's recipe; which tokens were
  selected and what each became, and the shares over 2,000 draws.
* :func:`temperature_explorer`: a teacher's soft targets as the temperature grows, and
  the distillation loss with and without its ``T^2``.
* :func:`finetuning_explorer` (draws a measurement, calls nothing): the accuracy of a
  fine-tuned classifier against the step, pre-trained and from scratch, and what its
  ``[CLS]`` query attends to in every layer and head.

Modules, in reading order: :mod:`~toolkit.widgets.blocks.layers`,
:mod:`~toolkit.widgets.blocks.gates`, :mod:`~toolkit.widgets.blocks.masking`,
:mod:`~toolkit.widgets.blocks.distillation`, :mod:`~toolkit.widgets.blocks.finetuning`.

Builders draw with the student's own class or function, given by its toolkit name
(``layer_scale_explorer(fns={"PreLNBlock": PreLNBlock})``, ``glu_gate_explorer(
fns={"GatedFeedForward": GatedFeedForward})``, ``mlm_masking_playground(
fns={"mask_tokens": mask_tokens})``, ``temperature_explorer(fns={"soft_target_loss":
soft_target_loss})``), redraw with :func:`toolkit.widgets.display.live_figure`, and show
which exercise is missing while one is not written yet. Every builder has a pure
``plot_*`` function returning a ``matplotlib.figure.Figure`` (tests render them with
Agg). With ``TOOLKIT_HEADLESS=1`` builders return a placeholder and draw nothing.
"""

from toolkit.widgets.blocks.distillation import (
    EXAMPLE_WORDS,
    STUDENT_LOGITS,
    TEACHER_LOGITS,
    plot_soft_targets,
    temperature_explorer,
)
from toolkit.widgets.blocks.finetuning import (
    finetuning_explorer,
    finetuning_results,
    plot_finetuning,
)
from toolkit.widgets.blocks.gates import (
    GATE_ACTIVATIONS,
    gate_example,
    glu_gate_explorer,
    plot_glu_gates,
)
from toolkit.widgets.blocks.layers import (
    LAYOUT_COLORS,
    layer_scale_explorer,
    plot_layer_scales,
    plot_layer_scales_at_init,
    plot_warmup_runs,
)
from toolkit.widgets.blocks.masking import (
    OUTCOMES,
    course_vocab,
    masking_example,
    masking_outcomes,
    message_figure,
    mlm_masking_playground,
    outcome_shares,
    plot_mlm_masking,
)

__all__ = [
    "EXAMPLE_WORDS",
    "GATE_ACTIVATIONS",
    "LAYOUT_COLORS",
    "OUTCOMES",
    "STUDENT_LOGITS",
    "TEACHER_LOGITS",
    "course_vocab",
    "finetuning_explorer",
    "finetuning_results",
    "gate_example",
    "glu_gate_explorer",
    "layer_scale_explorer",
    "masking_example",
    "masking_outcomes",
    "message_figure",
    "mlm_masking_playground",
    "outcome_shares",
    "plot_finetuning",
    "plot_glu_gates",
    "plot_layer_scales",
    "plot_layer_scales_at_init",
    "plot_mlm_masking",
    "plot_soft_targets",
    "plot_warmup_runs",
    "temperature_explorer",
]
