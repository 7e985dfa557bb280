"""Widgets for positional encoding: RoPE spectra and rotations, ALiBi, extrapolation.

What each one is for
--------------------
* :func:`rope_spectrum_explorer` / :func:`plot_rope_spectrum`: RoPE's pairs turn at
  geometrically spaced speeds ``theta_i = base^(-2i/d)``. The plot shows every pair's
  wavelength ``2 pi / theta_i`` and how each context-extension method rescales it
  for a scale ``s = L_new / L_train``: position interpolation (every band slowed by
  ``s``), NTK-aware (fast bands kept, the slowest slowed by exactly ``s``) and YaRN
  (fast bands kept, slow bands interpolated, a ramp between).
* :func:`rope_rotation_explorer` / :func:`plot_rope_rotation`: one feature pair as a
  2-D vector turning by ``theta_i`` per position; fast pairs spin, slow pairs
  creep. Which two features form the pair depends on the layout.
* :func:`score_vs_distance_explorer` / :func:`plot_score_vs_distance`: what each
  scheme contributes to the attention score as a function of the distance between
  query and key (sinusoidal and RoPE decay, ALiBi's straight lines, T5's buckets).
* :func:`alibi_explorer` / :func:`plot_alibi_heads`: ALiBi's bias matrix per head,
  with the slope rule for any number of heads.
* :func:`train_short_test_long_explorer` / :func:`plot_train_short_test_long`: run a
  RoPE head beyond its training length and see which bands meet rotation angles
  they never saw, and how PI, NTK and YaRN avoid that.

Modules: :mod:`~toolkit.widgets.position.rope` (spectrum, rotation),
:mod:`~toolkit.widgets.position.distance` (score versus distance, ALiBi),
:mod:`~toolkit.widgets.position.extrapolation` (train short, test long) and
:mod:`~toolkit.widgets.position.long_context` (every method against the input length).

Every builder has a matching pure function (``plot_*``) that returns a
``matplotlib.figure.Figure`` without touching pyplot's global state, so tests can
render it headless (Agg). Builders draw to PNG and show it in an
``ipywidgets.Image`` (:func:`toolkit.widgets.display.live_figure`); nothing needs a
network connection. With ``TOOLKIT_HEADLESS=1`` in the environment (set by the
autograder) builders return a small placeholder.
"""


from toolkit.widgets.position.distance import (
    alibi_explorer,
    plot_alibi_heads,
    plot_score_vs_distance,
    score_vs_distance_explorer,
)
from toolkit.widgets.position.extrapolation import (
    plot_train_short_test_long,
    train_short_test_long_explorer,
)
from toolkit.widgets.position.long_context import (
    METHODS,
    extension_inv_freq,
    long_context_explorer,
    longrope_example_factors,
    plot_long_context,
)
from toolkit.widgets.position.measured import (
    context_extension_explorer,
    passkey_table,
    plot_context_extension,
)
from toolkit.widgets.position.rope import (
    METHOD_COLORS,
    plot_rope_rotation,
    plot_rope_spectrum,
    rope_rotation_explorer,
    rope_spectrum_explorer,
)

__all__ = [
    "METHODS",
    "METHOD_COLORS",
    "alibi_explorer",
    "context_extension_explorer",
    "extension_inv_freq",
    "long_context_explorer",
    "longrope_example_factors",
    "passkey_table",
    "plot_alibi_heads",
    "plot_context_extension",
    "plot_long_context",
    "plot_rope_rotation",
    "plot_rope_spectrum",
    "plot_score_vs_distance",
    "plot_train_short_test_long",
    "rope_rotation_explorer",
    "rope_spectrum_explorer",
    "score_vs_distance_explorer",
    "train_short_test_long_explorer",
]
