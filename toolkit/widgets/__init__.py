"""Interactive widgets for the course notebooks, one package per topic.

* :mod:`toolkit.widgets.attention` (Assignment 01): attention heatmaps and masks, the
  three families, permutation equivariance;
* :mod:`toolkit.widgets.position` (02): RoPE spectrum and rotation, score versus
  distance, ALiBi heads, train short / test long;
* :mod:`toolkit.widgets.efficient` (03, 04): sparse-mask gallery, KV-cache calculator,
  online-softmax stepper, attention memory;
* :mod:`toolkit.widgets.blocks` (05): Post-LN vs Pre-LN layer scales and warm-up runs, a
  GLU gate explorer, an MLM masking playground, a distillation temperature slider;
* :mod:`toolkit.widgets.beyond` (06): expert load and collapse, SSM kernel and memory,
  RWKV decay per channel, decoding cost per token;
* :mod:`toolkit.widgets.generation` (07): loss curves, sampling playground, two models
  side by side;
* :mod:`toolkit.widgets.display`: how they all draw (PNG via Agg) and redraw
  (:func:`~toolkit.widgets.display.live_figure`).

Each package offers pure plotting functions that return a ``matplotlib.figure.Figure``
(so tests can render them headless with the Agg backend) and builder functions that
return an ``ipywidgets`` widget wiring those plots to sliders and selectors. Nothing
here needs a network connection.

When the environment variable ``TOOLKIT_HEADLESS=1`` is set (the autograder sets it
while executing notebooks), builders return a small placeholder instead of drawing.
"""
