"""Argument checks: norms, feed-forward networks, masked language modelling and
distillation."""

from __future__ import annotations

import torch
from torch import Tensor

# --------------------------------------------------------------------------------------
# Norms and feed-forward networks
# --------------------------------------------------------------------------------------


def check_eps(eps) -> None:
    """A norm's ``eps``: a number ``>= 0`` (added to the variance inside the square root)."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a number >= 0 (1e-5 and 1e-6 are usual), got {eps!r}")


def check_features(name: str, x: Tensor, d_model: int) -> None:
    """A tensor ``(..., d_model)`` whose last axis holds a token's features."""
    if x.dim() == 0 or x.size(-1) != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model} (the features), "
                         f"got shape {tuple(x.shape)}")


def check_activation(activation, choices) -> None:
    """``activation`` names one of ``choices`` (e.g. the keys of ``toolkit.ffn.ACTIVATIONS``)."""
    if activation not in choices:
        raise ValueError(f"activation must be one of {sorted(choices)}, got {activation!r}")


# --------------------------------------------------------------------------------------
# Masked language modelling and distillation
# --------------------------------------------------------------------------------------


def check_token_ids(name: str, ids: Tensor, dims: int | None = None) -> None:
    """Integer token ids (``int64`` or ``int32``), with ``dims`` axes when given."""
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if dims is not None and ids.dim() != dims:
        raise ValueError(f"{name} must have {dims} axes ((N, T) for 2), got {tuple(ids.shape)}")


def check_mlm_probabilities(mlm_probability, mask_replace_prob, random_replace_prob) -> None:
    """BERT's masking rates: each in ``[0, 1]`` and ``mask + random <= 1`` (the rest stay).

    The sum is compared with a little slack, as Hugging Face's collator does: in floating
    point 1 - 0.8 is 0.19999999999999996, and (0.8, 0.2) must pass."""
    if not (0 <= mlm_probability <= 1 and 0 <= mask_replace_prob <= 1
            and 0 <= random_replace_prob <= 1
            and mask_replace_prob + random_replace_prob <= 1 + 1e-9):
        raise ValueError("probabilities must lie in [0, 1], with mask_replace_prob + "
                         f"random_replace_prob <= 1; got mlm_probability={mlm_probability}, "
                         f"mask_replace_prob={mask_replace_prob}, "
                         f"random_replace_prob={random_replace_prob}")


def check_same_shape(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    """Two tensors compared position by position (a student's and a teacher's logits)."""
    if a.shape != b.shape:
        raise ValueError(f"{name_a} {tuple(a.shape)} and {name_b} {tuple(b.shape)} must have "
                         "the same shape")


def check_temperature(temperature) -> None:
    """A softmax temperature ``T > 0`` (``T = 1`` leaves the distribution as it is)."""
    if isinstance(temperature, bool) or not (isinstance(temperature, (int, float))
                                             and temperature > 0):
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")


