"""Widgets for the capstone: watching a model train, and watching it choose tokens.

What each one is for
--------------------
* :class:`LiveLossPlot`: a callback for :func:`toolkit.train.train` that redraws
  the training and validation loss every few steps while the cell runs. The
  dashed line is ``ln V``, the loss of a uniform guess: a model starts there
  and should quickly fall below it. A validation curve that turns up while the
  training curve keeps falling is over-fitting.
* :func:`sampling_playground`: the next-token distribution of a prompt under
  temperature, top-k and top-p (applied in that order). Bars of tokens the
  filters cut are grey; the dots show the renormalised distribution that is
  actually sampled. Push ``p`` towards 0: the top token always survives.
* :func:`side_by_side_generation`: the same prompt, seed and sampling settings
  for two models (e.g. the classic and the modern recipe after equal steps),
  text shown in two columns.

Modules: :mod:`~toolkit.widgets.generation.training`,
:mod:`~toolkit.widgets.generation.sampling`, :mod:`~toolkit.widgets.generation.comparison`.

Every builder has a pure function (``plot_*``) that returns a
``matplotlib.figure.Figure`` without touching pyplot's global state, so tests can
render it with the Agg backend. Builders show PNGs in an ``ipywidgets.Image`` and
need no network. With ``TOOLKIT_HEADLESS=1`` (set by the autograder) they return
a small ``ipywidgets.HTML`` placeholder and draw nothing.
"""

from toolkit.widgets.generation.comparison import (
    compare_generations,
    plot_side_by_side,
    side_by_side_generation,
)
from toolkit.widgets.generation.sampling import (
    CUT_COLOR,
    KEPT_COLOR,
    next_token_distribution,
    plot_next_token_distribution,
    sampling_playground,
)
from toolkit.widgets.generation.training import LiveLossPlot, plot_loss_curves

__all__ = [
    "CUT_COLOR",
    "KEPT_COLOR",
    "LiveLossPlot",
    "compare_generations",
    "next_token_distribution",
    "plot_loss_curves",
    "plot_next_token_distribution",
    "plot_side_by_side",
    "sampling_playground",
    "side_by_side_generation",
]
