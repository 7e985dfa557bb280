"""Counting parameters, and matching the two recipes' sizes for a fair comparison."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch import nn

from toolkit.models.config import GPTConfig
from toolkit.models.gpt import GPT


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameter scalars; a tied tensor is counted once."""
    seen: set[int] = set()
    total = 0
    for _, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in seen:  # lm_head.weight is wte.weight when tied
            seen.add(id(p))
            total += p.numel()
    return total


def _count_config(config: GPTConfig, model_class: type[nn.Module]) -> int:
    with torch.device("meta"):  # builds the modules without allocating memory
        return count_parameters(model_class(config))


def parameter_matched_configs(
    vocab_size: int = 256,
    d_model: int = 128,
    n_layers: int = 4,
    n_heads: int = 4,
    n_kv_heads: int | None = None,
    max_seq_len: int = 256,
    multiple_of: int = 8,
    model_class: type[nn.Module] = GPT,
    **common,
) -> tuple[GPTConfig, GPTConfig]:
    """A classic and a modern config of about the same parameter count.

    Both share width, depth, heads and vocabulary. The modern recipe saves
    parameters (no position table, no biases, RMSNorm, fewer KV heads), and the
    difference is given back to its SwiGLU hidden size: its parameter count is
    ``P_0 + 3 d d_ff L``, linear in ``d_ff``, so ``d_ff`` is solved for and
    rounded to a multiple of ``multiple_of``.

    The counts come from models built on the ``meta`` device (no memory) by
    ``model_class(config)``: the toolkit's :class:`GPT`, or a notebook's own.

    Returns:
        ``(classic, modern)``; ``count_parameters`` of the two models differ by less
        than ``3 d L multiple_of / 2``.
    """
    shared = dict(
        vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        max_seq_len=max_seq_len, **common,
    )
    classic = GPTConfig.classic(**shared)
    modern = GPTConfig.modern(n_kv_heads=n_kv_heads, d_ff=multiple_of, **shared)
    target, base = _count_config(classic, model_class), _count_config(modern, model_class)
    # Parameters per extra hidden unit: 3 d L (gate, up, down each gain d weights).
    wider = _count_config(replace(modern, d_ff=2 * multiple_of), model_class)
    per_unit = (wider - base) / multiple_of
    d_ff = multiple_of + (target - base) / per_unit
    d_ff = max(multiple_of, multiple_of * round(d_ff / multiple_of))
    return classic, replace(modern, d_ff=int(d_ff))
