"""Hybrid models (attention layers interleaved with Mamba layers) and the recall task that
tells them apart.

* :mod:`toolkit.hybrid.mqar`: multi-query associative recall (Zoology, arXiv 2312.04927),
  the batch generator and the recall metric scored at the query positions only.
* :mod:`toolkit.hybrid.model`: :class:`HybridLM`, a small language model whose layers
  follow a pattern such as ``"MAMM"`` (``A`` attention, ``M`` Mamba), every pattern the
  same width and, at equal depth, the same parameter count.
* :mod:`toolkit.hybrid.checkpoint`: a trained model saved with the arguments that rebuild
  it (:func:`save_hybrid`, :func:`load_hybrid`; assignment 06 hands one in).
* :mod:`toolkit.hybrid.experiment`: pure attention, pure Mamba and a hybrid trained on MQAR
  at equal size, recall measured against the number of pairs
  (``python -m toolkit.hybrid`` prints the table).
"""

from toolkit.hybrid.checkpoint import load_hybrid, save_hybrid
from toolkit.hybrid.model import (
    LAYER_KINDS,
    CausalAttentionMixer,
    HybridLM,
    ResidualMixer,
    check_pattern,
    parameter_count,
    state_numbers,
)
from toolkit.hybrid.mqar import IGNORE, mqar_batch, recall_accuracy

__all__ = [
    "IGNORE",
    "LAYER_KINDS",
    "CausalAttentionMixer",
    "HybridLM",
    "ResidualMixer",
    "check_pattern",
    "load_hybrid",
    "mqar_batch",
    "parameter_count",
    "recall_accuracy",
    "save_hybrid",
    "state_numbers",
]
