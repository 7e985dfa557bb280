"""Sending tokens to their experts and adding the answers back (dispatch and combine).

After routing, token ``t`` has ``k`` (expert, gate) pairs. The layer's output is

    y_t = sum_{j < k} g_tj * E_{i_tj}(x_t),

but running every expert on every token would throw the sparsity away. Each expert
must see only its own tokens, as one batch: that is **dispatch**; adding the gated
answers back at their tokens' rows is **combine**. Two ways give the same numbers:

* :func:`naive_dispatch`: loop over experts; for each, find the tokens that chose it
  with a boolean mask over all ``(token, slot)`` pairs. ``E`` passes over the routing
  table (this is what Hugging Face's Mixtral does in eager mode).
* :func:`sorted_dispatch`: list the ``T k`` assignments, sort them by expert once, and
  cut the sorted list into one contiguous block per expert (``bincount`` gives the
  block sizes). One gather feeds every expert, one ``index_add`` combines. Grouped
  matrix-multiply kernels (MegaBlocks, arXiv 2211.15841) start from this layout.
  ``benchmarks/moe.py`` measures the difference: on a CPU, where every expert's matrix
  multiply runs on its own either way, sorting saves only the bookkeeping, which pays
  with many small experts and not with a few wide ones.

**Capacity.** Training systems give every expert a fixed buffer so that shapes are
static across devices (GShard, Switch):

    capacity = ceil(capacity_factor * k * T / E)

tokens per expert. Assignments beyond it are **dropped**: that expert's contribution
to the token is skipped (the residual connection around the layer carries the token on
unchanged) and the gates of the kept experts are *not* renormalised. Who gets a place
is decided first-come first-served, every token's first choice before any second
choice (GShard's order), and within a choice by token position. A drop is a silent
quality loss, so :func:`apply_capacity` returns how many assignments it dropped.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_capacity_factor, check_dispatch_inputs, check_int, check_routing


def expert_capacity(n_tokens: int, n_experts: int, k: int, capacity_factor: float = 1.0) -> int:
    """Buffer size per expert: ``ceil(capacity_factor * k * n_tokens / n_experts)``.

    Every token takes ``k`` places, so ``k`` has no default: a default of 1 would silently
    give a top-2 layer half the capacity it needs.

    ``capacity_factor = 1`` fits a perfectly even split; Switch trains with 1.0 to 1.25.
    The product is taken exactly, on the factor as written: in floats, ``1.1 * 100 / 10``
    is 11.000000000000002, and its ceiling 12 would give every expert a place too many.
    """
    check_int("n_tokens", n_tokens, minimum=0)
    check_int("n_experts", n_experts)
    check_int("k", k)
    check_capacity_factor(capacity_factor, optional=False)
    factor = Fraction(repr(float(capacity_factor)))  # 1.1 -> 11/10, not 2476979795053773/2**51
    return math.ceil(factor * k * n_tokens / n_experts)


def apply_capacity(indices: Tensor, n_experts: int, capacity: int) -> tuple[Tensor, int]:
    """Which ``(token, slot)`` assignments fit in their expert's buffer.

    Args:
        indices: ``(n_tokens, k)`` experts chosen by each token (slot 0 = first choice).
        n_experts: number of experts ``E``.
        capacity: places per expert (see :func:`expert_capacity`).

    Returns:
        ``(kept, n_dropped)``: ``kept`` is bool ``(n_tokens, k)``, ``True`` where the
        assignment got a place; ``n_dropped`` is the number of ``False`` entries.
        Places go to every token's first choice (in token order), then every second
        choice, and so on.
    """
    check_routing(indices, n_experts)
    check_int("capacity", capacity, minimum=0)
    n_tokens, k = indices.shape
    queue = indices.t().reshape(-1)  # slot-major: all first choices, then all second choices
    one_hot = F.one_hot(queue.long(), n_experts)  # (k * n_tokens, E); one_hot takes int64
    arrival = (one_hot.cumsum(dim=0) * one_hot).sum(-1) - 1  # 0, 1, 2, ... within each expert
    kept = (arrival < capacity).reshape(k, n_tokens).t()  # back to (n_tokens, k)
    return kept, int((~kept).sum())


def naive_dispatch(
    x: Tensor,
    gates: Tensor,
    indices: Tensor,
    experts: Sequence[nn.Module],
    kept: Tensor | None = None,
) -> Tensor:
    """``y_t = sum_j g_tj E_{i_tj}(x_t)`` with one boolean-mask pass per expert.

    Args:
        x: ``(n_tokens, d_model)``.
        gates, indices: ``(n_tokens, k)`` from :func:`toolkit.moe.routing.top_k_gating`.
        experts: the ``E`` expert modules, each ``(n, d_model) -> (n, d_model)``.
        kept: optional bool ``(n_tokens, k)`` from :func:`apply_capacity`; dropped
            assignments contribute nothing.

    Returns:
        ``(n_tokens, d_model)``.
    """
    check_dispatch_inputs(x, gates, indices, len(experts))
    chosen = indices if kept is None else indices.masked_fill(~kept, -1)  # -1 = dropped
    out = torch.zeros_like(x)
    for e, expert in enumerate(experts):
        token, slot = torch.where(chosen == e)  # who picked expert e, in which slot
        if token.numel():
            out = out.index_add(0, token, gates[token, slot, None] * expert(x[token]))
    return out


def sorted_dispatch(
    x: Tensor,
    gates: Tensor,
    indices: Tensor,
    experts: Sequence[nn.Module],
    kept: Tensor | None = None,
) -> Tensor:
    """The same output as :func:`naive_dispatch`, from one sort by expert.

    Args and returns as in :func:`naive_dispatch`.
    """
    check_dispatch_inputs(x, gates, indices, len(experts))
    n_tokens, k = indices.shape
    expert_of = indices.reshape(-1)  # (n_tokens * k,) the expert of each assignment
    token_of = torch.arange(n_tokens, device=x.device).repeat_interleave(k)  # ... its token
    gate_of = gates.reshape(-1)  # ... its gate
    if kept is not None:  # dropped assignments never reach an expert
        keep = kept.reshape(-1)
        expert_of, token_of, gate_of = expert_of[keep], token_of[keep], gate_of[keep]
    order = torch.argsort(expert_of, stable=True)  # group the assignments by expert
    token_of, gate_of = token_of[order], gate_of[order]
    counts = torch.bincount(expert_of, minlength=len(experts)).tolist()  # block sizes
    blocks = x[token_of].split(counts)  # one contiguous (count_e, d_model) block per expert
    answers = torch.cat([expert(block) for expert, block in zip(experts, blocks)])
    return torch.zeros_like(x).index_add(0, token_of, gate_of[:, None] * answers)  # combine
