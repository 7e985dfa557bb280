"""Widgets for the encoder-decoder (Assignment 08), drawn from a trained model.

* :func:`cross_attention_explorer`: decode an input greedily, then see, for every output
  token, where each decoder layer's heads looked in the input (cross-attention weights).
* :func:`beam_explorer`: the hypotheses a beam search keeps as it goes, their normalised
  scores, and how the beam width and the length penalty change the winner.

Modules: :mod:`~toolkit.widgets.seq2seq.cross_attention`,
:mod:`~toolkit.widgets.seq2seq.beams`. Pure plots (``plot_*``) return a matplotlib
``Figure``; with ``TOOLKIT_HEADLESS=1`` the builders return a placeholder.
"""

from toolkit.widgets.seq2seq.beams import beam_explorer, beam_steps, plot_beams
from toolkit.widgets.seq2seq.cross_attention import (
    cross_attention_explorer,
    cross_attention_maps,
    plot_cross_attention,
)

__all__ = [
    "beam_explorer",
    "beam_steps",
    "cross_attention_explorer",
    "cross_attention_maps",
    "plot_beams",
    "plot_cross_attention",
]
