"""Training the capstone model: the loop, checkpoints, a command line.

The loop is the standard recipe of GPT-style pre-training, at toy scale:

* :mod:`toolkit.train.loop`: next-token cross-entropy, AdamW, warm-up + cosine
  decay, gradient clipping, held-out evaluation (:func:`train`, :func:`train_step`);
* :mod:`toolkit.train.checkpoint`: safetensors checkpoints holding weights and config;
* :mod:`toolkit.train.cli`: ``python -m toolkit.train --recipe modern --steps 200
  --corpus FILE --out ckpt.safetensors``.

Every public name is importable from this package: ``from toolkit.train import
train_step``.
"""

from toolkit.train.checkpoint import load_checkpoint, save_checkpoint
from toolkit.train.cli import main
from toolkit.train.loop import (
    TrainConfig,
    TrainHistory,
    configure_optimizer,
    estimate_loss,
    grad_norm,
    lr_schedule,
    train,
    train_step,
)

__all__ = [
    "TrainConfig",
    "TrainHistory",
    "configure_optimizer",
    "estimate_loss",
    "grad_norm",
    "load_checkpoint",
    "lr_schedule",
    "main",
    "save_checkpoint",
    "train",
    "train_step",
]
