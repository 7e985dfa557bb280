"""Widgets for Assignment 01: attention weights, masks, the three families, permutations.

What each one is for
--------------------
* :func:`attention_explorer`: the attention matrix ``softmax(q k^T / (tau sqrt(d_k)) +
  mask)`` of a small example as a heatmap. Pick a mask (none, causal, padding, both)
  and watch blocked cells drop to exactly zero while each row still sums to 1. Move
  the temperature ``tau``: small ``tau`` sharpens every row towards one key (large
  scores), large ``tau`` flattens it towards uniform. Forgetting the ``1/sqrt(d_k)``
  factor acts like a temperature of ``1/sqrt(d_k)``: too sharp.
* :func:`families_explorer`: who may attend to whom in each family (arXiv
  1706.03762): the encoder's bidirectional self-attention (BERT-like), the decoder's
  causal self-attention (GPT-like) and the cross-attention that links them (T5-like).
* :func:`permutation_demo`: self-attention has no notion of order. Shuffle the
  input tokens and the outputs come back shuffled the same way, unchanged otherwise
  (``f(P X) = P f(X)``). Add position encodings and the identity breaks: that is
  why every Transformer adds position information somewhere.

Modules: :mod:`~toolkit.widgets.attention.heatmap`,
:mod:`~toolkit.widgets.attention.families`, :mod:`~toolkit.widgets.attention.permutation`.

Every builder has a matching pure function (``plot_*``) that returns a
``matplotlib.figure.Figure`` and never touches pyplot's global state, so tests can
render it with the Agg backend. Builders draw to PNG and show it in an
``ipywidgets.Image`` (:func:`toolkit.widgets.display.live_figure`), which works in any
Jupyter front end without network access. With ``TOOLKIT_HEADLESS=1`` in the
environment (set by the autograder) the builders return a small ``ipywidgets.HTML``
placeholder and draw nothing.
"""

from toolkit.widgets.attention.families import families_explorer, plot_family_patterns
from toolkit.widgets.attention.heatmap import (
    MASK_KINDS,
    attention_explorer,
    example_attention,
    plot_attention_example,
    plot_attention_heatmap,
)
from toolkit.widgets.attention.permutation import (
    permutation_demo,
    permutation_outputs,
    plot_permutation,
)

__all__ = [
    "MASK_KINDS",
    "attention_explorer",
    "example_attention",
    "families_explorer",
    "permutation_demo",
    "permutation_outputs",
    "plot_attention_example",
    "plot_attention_heatmap",
    "plot_family_patterns",
    "plot_permutation",
]
