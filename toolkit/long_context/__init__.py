"""Running a model past its training length, and measuring what happens.

A model trained on windows of ``L`` tokens is asked to read ``2L``, ``4L``, ``8L``. RoPE
models can be rescaled without retraining (PI, NTK, dynamic NTK, YaRN:
:mod:`toolkit.position.rope_scaling`), a learned table simply ends at ``L``, ALiBi's
linear penalty is defined at every distance, and a model with no positions at all (NoPE)
reads order only from its causal mask. This package measures it on models small enough
to train on a CPU in minutes:

* :mod:`toolkit.long_context.models`: small GPTs (the capstone's modern recipe, in plain
  PyTorch) with RoPE (at chosen speeds), learned positions, ALiBi or none;
* :mod:`toolkit.long_context.passkey`: the passkey probe, a number hidden in filler text;
* :mod:`toolkit.long_context.evaluation`: loss by position, passkey accuracy, and the
  speeds each extension method gives a RoPE model (Assignment 02's references);
* :mod:`toolkit.long_context.experiment`: training the four models once (cached) and the
  measurement over every model and method.
"""

from toolkit.long_context.evaluation import (
    EXTENSIONS,
    loss_by_position,
    passkey_accuracy,
    rope_extension,
)
from toolkit.long_context.experiment import (
    MEASUREMENTS,
    ExperimentConfig,
    cached_measurement,
    cached_models,
    check_measurements_written,
    held_out_windows,
    measure,
    model_variants,
    results_table,
    train_position_model,
    trained_models,
)
from toolkit.long_context.models import (
    POSITIONS,
    PositionBlock,
    PositionedAttention,
    PositionGPT,
    PositionModelConfig,
    RMSNormGain,
    SwiGLUFeedForward,
    position_model,
    rope_speeds,
    use_position_functions,
)
from toolkit.long_context.passkey import (
    DIGITS,
    FILLER,
    KEY_LINE,
    QUESTION,
    passkey_batch,
    passkey_text,
    passkey_tokens,
)

__all__ = [
    "EXTENSIONS",
    "loss_by_position",
    "passkey_accuracy",
    "rope_extension",
    "MEASUREMENTS",
    "ExperimentConfig",
    "cached_measurement",
    "cached_models",
    "check_measurements_written",
    "held_out_windows",
    "measure",
    "model_variants",
    "results_table",
    "train_position_model",
    "trained_models",
    "POSITIONS",
    "PositionBlock",
    "PositionedAttention",
    "PositionGPT",
    "PositionModelConfig",
    "RMSNormGain",
    "SwiGLUFeedForward",
    "position_model",
    "rope_speeds",
    "use_position_functions",
    "DIGITS",
    "FILLER",
    "KEY_LINE",
    "QUESTION",
    "passkey_batch",
    "passkey_text",
    "passkey_tokens",
]
