"""Interactive widgets for the course notebooks, one package per topic.

* :mod:`toolkit.widgets.attention` (Assignment 01): attention heatmaps and masks, the
  three families, permutation equivariance;
* :mod:`toolkit.widgets.position` (02): RoPE spectrum and rotation, score versus
  distance, ALiBi heads, train short / test long, every context-extension method
  against the input length;
* :mod:`toolkit.widgets.efficient` (03, 04): sparse-mask gallery, KV-cache calculator,
  linear attention's state and error, MLA's latent against GQA and MQA, differential
  attention's two maps, online-softmax stepper, attention memory;
* :mod:`toolkit.widgets.blocks` (05): Post-LN vs Pre-LN layer scales and warm-up runs, a
  GLU gate explorer, an MLM masking playground, a distillation temperature slider,
  fine-tuning curves and what ``[CLS]`` attends to;
* :mod:`toolkit.widgets.beyond` (06): expert load and collapse, SSM kernel and memory,
  RWKV decay per channel, decoding cost per token;
* :mod:`toolkit.widgets.generation` (07): loss curves, sampling playground, two models
  side by side;
* :mod:`toolkit.widgets.seq2seq` (08): cross-attention over the input per decoded token,
  beam search step by step;
* :mod:`toolkit.widgets.display`: how they all draw (PNG via Agg) and redraw
  (:func:`~toolkit.widgets.display.live_figure`).

Each package offers pure plotting functions that return a ``matplotlib.figure.Figure``
(so tests can render them headless with the Agg backend) and builder functions that
return an ``ipywidgets`` widget wiring those plots to sliders and selectors. Nothing
here needs a network connection.

Every builder takes the student's own functions as ``fns={toolkit name: function}``
(``attention_explorer(fns={"attention_weights": attention_weights})``) and draws with them
in place of the toolkit's. A function that is not written yet never breaks a widget: it
shows which one it needs and where to write it, keeps its controls, and draws once the
function is written.

When the environment variable ``TOOLKIT_HEADLESS=1`` is set (the autograder sets it
while executing notebooks), builders return a small placeholder instead of drawing.
"""

#: Every widget builder, by package (``toolkit.widgets.<package>.<name>``).
BUILDERS = {
    "attention": ("attention_explorer", "families_explorer", "permutation_demo"),
    "position": (
        "rope_spectrum_explorer",
        "rope_rotation_explorer",
        "score_vs_distance_explorer",
        "alibi_explorer",
        "train_short_test_long_explorer",
        "long_context_explorer",
    ),
    "efficient": (
        "mask_gallery",
        "kv_cache_calculator",
        "linear_attention_explorer",
        "mla_explorer",
        "differential_explorer",
        "online_softmax_stepper",
        "attention_memory_explorer",
    ),
    "blocks": (
        "layer_scale_explorer",
        "glu_gate_explorer",
        "mlm_masking_playground",
        "temperature_explorer",
    ),
    "beyond": (
        "router_load_explorer",
        "ssm_kernel_explorer",
        "rwkv_decay_explorer",
        "mamba_selectivity_explorer",
        "gau_explorer",
        "decoding_cost_explorer",
    ),
    "generation": ("sampling_playground", "side_by_side_generation"),
    "seq2seq": ("cross_attention_explorer", "beam_explorer"),
}

#: Widgets that draw what the student measured (a ``results`` dict their own evaluation
#: functions made) rather than calling their functions, by package.
RESULT_VIEWERS = {
    "position": ("context_extension_explorer",),
    "beyond": ("recall_explorer",),
    "blocks": ("finetuning_explorer",),
}
