"""Sampling: reshaping next-token logits before drawing a token.

Applied in this order (as Hugging Face's logits warpers do):

1. **Temperature**: ``softmax(z / t)``. ``t < 1`` sharpens, ``t > 1`` flattens;
   ``t -> 0`` tends to the one-hot argmax (greedy), ``t -> inf`` to uniform.
2. **Top-k** (arXiv 1805.04833): keep the ``k`` largest logits, set the rest to
   ``-inf``.
3. **Top-p / nucleus** (arXiv 1904.09751): keep the *smallest* set of most
   probable tokens whose probabilities sum to at least ``p``. The most probable
   token is always kept, so the set is never empty, however small ``p`` is.

Ties (equal logits) are broken towards the *lower token id*, via stable sorts, so
the filters are deterministic and top-k keeps exactly ``k``. Hugging Face decides ties
otherwise: its top-k keeps every logit equal to the ``k``-th (possibly more than ``k``),
and its top-p keeps whichever tied tokens its sort puts first. Without ties (continuous
logits) both give the same sets.

Shapes: logits ``(B, V)`` (any leading shape for the filters).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """``logits / t``.

    ``t`` must be ``> 0``. As ``t -> 0`` the softmax tends to the one-hot argmax (use
    greedy decoding for exactly ``t = 0``); as ``t -> inf`` it tends to uniform.
    """
    if not temperature > 0 or math.isinf(temperature):
        raise ValueError(
            f"temperature must be a finite number > 0, got {temperature}; use greedy "
            "decoding (temperature=0 in sample_next_token/generate) for the t -> 0 limit"
        )
    return logits / temperature  # softmax(z / t)


def _sort_desc(logits: Tensor) -> tuple[Tensor, Tensor]:
    """Descending sort along the last axis; equal values keep ascending token ids."""
    return torch.sort(logits, dim=-1, descending=True, stable=True)


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep exactly the ``k`` largest logits of each row; set the others to ``-inf``.

    Among equal logits the lower token ids are kept first, so exactly ``k`` entries
    survive even with ties. ``k >= V`` returns the logits unchanged.

    Shapes: ``(..., V)`` -> ``(..., V)``.
    """
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if k >= logits.size(-1):
        return logits
    _, order = _sort_desc(logits)
    keep = torch.zeros_like(logits, dtype=torch.bool)
    keep.scatter_(-1, order[..., :k], True)  # the first k of the sorted order
    return logits.masked_fill(~keep, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest prefix of most probable tokens with mass ``>= p``.

    Token at rank ``r`` is kept iff the probability mass of the tokens ranked
    *before* it is ``< p``. The top token has nothing before it (mass 0 < p), so it
    is always kept and the result is never empty. ``p = 1`` keeps everything.

    Shapes: ``(..., V)`` -> ``(..., V)``.
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"p must be in (0, 1], got {p}")
    if p >= 1.0:
        return logits
    sorted_logits, order = _sort_desc(logits)
    probs = torch.softmax(sorted_logits, dim=-1)
    mass_before = torch.cumsum(probs, dim=-1) - probs  # sum of probabilities ranked higher
    keep_sorted = mass_before < p  # rank 0: mass_before = 0 < p, always kept
    keep_sorted[..., 0] = True  # (and never lost to rounding)
    keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # back to token order
    return logits.masked_fill(~keep, float("-inf"))


def filter_logits(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> Tensor:
    """Temperature, then top-k, then top-p; the result's softmax is the sampling distribution."""
    logits = apply_temperature(logits, temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    return logits


def sample_next_token(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Draw one token per row.

    Args:
        logits: ``(B, V)`` next-token logits.
        temperature: ``> 0``, or ``0`` for greedy (the ``t -> 0`` limit, exactly argmax).
        top_k, top_p: optional filters, applied after the temperature.
        generator: for reproducible draws.

    Returns:
        ``(B,)`` token ids.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, V), got {tuple(logits.shape)}")
    if temperature == 0:
        return logits.argmax(dim=-1)  # first maximal index on ties
    probs = torch.softmax(filter_logits(logits.float(), temperature, top_k, top_p), dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)
