"""Widgets for Assignments 03 and 04: sparse masks, KV-cache sizes, online softmax, memory.

What each one is for
--------------------
* :func:`mask_gallery`: the sparse attention patterns of :mod:`toolkit.masks`
  (sliding window, band, dilated, global tokens, BigBird) side by side, with the
  exact number of computed cells. Move the window and dilation sliders and watch the
  count grow like ``n x window`` instead of ``n^2``.
* :func:`kv_cache_calculator`: how many bytes the KV cache of a real model takes
  under MHA, GQA, MQA and MLA, for a context length, batch and dtype you choose.
* :func:`linear_attention_explorer`: linear attention with a feature map of your
  choice: the running ``d x d`` state that replaces the ``T x T`` scores, and how far
  the outputs are from softmax attention's as ``T`` grows.
* :func:`mla_explorer`: MLA's latent size against cache bytes and how much of the
  keys and values it keeps, beside MHA, GQA and MQA.
* :func:`differential_explorer`: differential attention on a sequence with
  distractors: the two maps, their difference and the output's quality as you move
  ``lambda``.
* :func:`online_softmax_stepper`: one query row of FlashAttention processed tile by
  tile: the running max ``m``, the running sum ``l``, the rescale factor
  ``exp(m_old - m_new)`` and the accumulator, which matches ``softmax(s) V`` after
  the last tile.
* :func:`attention_memory_explorer`: extra memory of naive attention (the ``N x N``
  score matrix) against tiled attention (one tile plus O(N) statistics) as the
  sequence grows.

Every builder has a matching pure ``plot_*`` function that returns a
``matplotlib.figure.Figure`` without touching pyplot's global state, so tests can
render it with the Agg backend. With ``TOOLKIT_HEADLESS=1`` (set by the autograder)
builders return a small placeholder and draw nothing.

Modules: :mod:`~toolkit.widgets.efficient.masks`, :mod:`~toolkit.widgets.efficient.kv_cache`
(with the model presets and their sources), :mod:`~toolkit.widgets.efficient.linear`,
:mod:`~toolkit.widgets.efficient.latent`, :mod:`~toolkit.widgets.efficient.differential`,
:mod:`~toolkit.widgets.efficient.flash`.
"""

from toolkit.widgets.efficient.differential import (
    differential_explorer,
    differential_maps,
    distractor_example,
    plot_differential_maps,
)
from toolkit.widgets.efficient.flash import (
    attention_memory_explorer,
    example_row,
    online_softmax_stepper,
    plot_attention_memory,
    plot_online_softmax,
)
from toolkit.widgets.efficient.kv_cache import (
    DTYPE_BYTES,
    GIB,
    MODEL_PRESETS,
    kv_cache_calculator,
    kv_cache_comparison,
    plot_kv_cache,
)
from toolkit.widgets.efficient.latent import latent_tradeoff, mla_explorer, plot_latent_tradeoff
from toolkit.widgets.efficient.linear import (
    FEATURE_MAPS,
    linear_attention_explorer,
    linear_vs_softmax,
    plot_linear_attention,
    running_state,
)
from toolkit.widgets.efficient.masks import gallery_masks, mask_gallery, plot_mask_gallery

__all__ = [
    "DTYPE_BYTES",
    "FEATURE_MAPS",
    "GIB",
    "MODEL_PRESETS",
    "attention_memory_explorer",
    "differential_explorer",
    "differential_maps",
    "distractor_example",
    "example_row",
    "gallery_masks",
    "kv_cache_calculator",
    "kv_cache_comparison",
    "latent_tradeoff",
    "linear_attention_explorer",
    "linear_vs_softmax",
    "mask_gallery",
    "mla_explorer",
    "online_softmax_stepper",
    "plot_attention_memory",
    "plot_differential_maps",
    "plot_kv_cache",
    "plot_latent_tradeoff",
    "plot_linear_attention",
    "plot_mask_gallery",
    "plot_online_softmax",
    "running_state",
]
