"""Routing tokens to experts: router logits, top-k gates, and the losses that keep it fair.

The router is one linear map with no bias, ``logits = x W_r^T``: a score per expert for
each token, ``(n_tokens, n_experts)``. Each token goes to the ``k`` experts with the
largest logits, and the layer's output is the gate-weighted sum of their answers,
``y = sum_{i in topk} g_i E_i(x)``. Two conventions for the gates ``g`` are in use, and
they give different numbers, so every function here takes the convention by name:

* ``gating="softmax_then_topk"`` (Switch, arXiv 2101.03961; GShard, arXiv 2006.16668;
  DeepSeek-V2; Qwen-MoE): ``p = softmax(logits)`` over **all** experts, then keep the
  ``k`` largest ``p_i`` as gates. They sum to less than 1 unless ``renormalize=True``
  divides them by their sum (GShard's top-2, Hugging Face's ``norm_topk_prob``).
* ``gating="topk_then_softmax"`` (Mixtral, arXiv 2401.04088): keep the ``k`` largest
  logits, then take the softmax over those ``k`` only. The gates sum to 1. This equals
  the first convention *with* renormalisation: ``e^{l_i} / sum_{j in topk} e^{l_j}``
  either way (Hugging Face's Mixtral router computes it that way round).

With ``k = 1`` and no renormalisation the single gate is ``p_i < 1``, which is what lets
the router's weights get a gradient in Switch; with ``topk_then_softmax`` it would be
exactly 1, and the router would learn nothing from the task loss.

Left alone, a router collapses: experts that get more tokens train faster, look
better and get still more. The **load-balancing loss** (Switch, eq. 4-6) pushes
towards uniform use. With ``T`` tokens and ``N`` experts,

    f_i = (1/T) * #{tokens whose top-k contains expert i}     (hard counts, no gradient)
    P_i = (1/T) * sum_t p_i(x_t)                               (mean router probability)
    loss = alpha * N * sum_i f_i P_i

Only ``P`` carries a gradient. With perfectly uniform routing ``f_i = k/N`` and
``P_i = 1/N``, so the loss is ``alpha * k``; the factor ``N`` makes that level
independent of the number of experts. (It is not a strict minimum: ``f`` counts hard
choices, so probability placed away from the top-k choices can score slightly below it.)
Hugging Face's Mixtral ``load_balancing_loss_func`` computes exactly this (with
``alpha`` left to the caller as ``router_aux_loss_coef``), over the tokens of every layer
and skipping padding.

The **router z-loss** (ST-MoE, arXiv 2202.08906, eq. 5) keeps the logits small, which
the softmax in low precision needs: ``L_z = (1/T) sum_t (log sum_i e^{l_ti})^2``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from toolkit.arguments import check_gating, check_top_k


def top_k_gating(
    logits: Tensor,
    k: int,
    gating: str = "topk_then_softmax",
    renormalize: bool = False,
) -> tuple[Tensor, Tensor]:
    """Each token's ``k`` experts and their gates.

    Args:
        logits: ``(..., n_experts)`` router scores.
        k: experts per token, ``1 <= k <= n_experts``.
        gating: ``"topk_then_softmax"`` (Mixtral: softmax over the ``k`` selected logits)
            or ``"softmax_then_topk"`` (Switch/GShard: softmax over all experts, then the
            ``k`` largest probabilities).
        renormalize: with ``"softmax_then_topk"``, divide the ``k`` gates by their sum.
            (``"topk_then_softmax"`` gates already sum to 1.)

    Returns:
        ``(gates, indices)``, both ``(..., k)``, ordered from the largest logit down;
        ``indices`` is int64.
    """
    check_gating(gating)
    check_top_k(k, logits.size(-1))
    top_logits, indices = logits.topk(k, dim=-1)  # the k largest logits of each token
    if gating == "topk_then_softmax":
        gates = torch.softmax(top_logits, dim=-1)  # g = softmax over the k selected logits
    else:
        probs = torch.softmax(logits, dim=-1)  # p = softmax over all n_experts
        gates = probs.gather(-1, indices)  # p_i for each token's own k experts
        if renormalize:
            gates = gates / gates.sum(dim=-1, keepdim=True)  # g_i = p_i / sum_{topk} p_j
    return gates, indices


def flatten_router_logits(router_logits, attention_mask) -> tuple[Tensor, Tensor]:
    """Every layer's router logits as one table, and a weight per row for the averages.

    Args:
        router_logits: ``(n_tokens, n_experts)``, or a tuple or list of them (one per layer).
        attention_mask: ``(batch, seq)`` with 1 for real tokens and 0 for padding
            (``batch * seq`` = each layer's ``n_tokens``), or ``None``.

    Returns:
        ``(logits, weight)``: ``logits`` ``(n_layers * n_tokens, n_experts)``, layer 0's
        tokens first; ``weight`` ``(n_layers * n_tokens,)`` in the dtype of the logits,
        1.0 for a real token and 0.0 for padding (all ones without a mask).
    """
    layers = list(router_logits) if isinstance(router_logits, (tuple, list)) else [router_logits]
    if not layers:
        raise ValueError("router_logits is empty: pass a tensor or a tuple of per-layer tensors")
    logits = torch.cat(layers, dim=0)  # layer-major, as Hugging Face loops over layers
    if logits.dim() != 2:
        raise ValueError(
            f"router logits must be (n_tokens, n_experts), got shape {tuple(logits.shape)}"
        )
    if attention_mask is None:
        return logits, logits.new_ones(logits.size(0))
    weight = attention_mask.reshape(-1).to(logits.dtype).repeat(len(layers))  # 1 = real token
    if weight.numel() != logits.size(0):
        raise ValueError(
            f"attention_mask has {attention_mask.numel()} entries but each layer routes "
            f"{logits.size(0) // len(layers)} tokens: pass the (batch, seq) mask of the batch"
        )
    return logits, weight


def load_balancing_loss(
    router_logits: Tensor | Sequence[Tensor],
    k: int,
    attention_mask: Tensor | None = None,
    alpha: float = 1.0,
) -> Tensor:
    """Switch's auxiliary loss ``alpha * N * sum_i f_i P_i``.

    Equals Hugging Face's ``load_balancing_loss_func(router_logits, N, k, attention_mask)``
    (Mixtral) times ``alpha``; with ``k = 1`` it is Switch's loss as the paper defines it,
    ``f`` and ``P`` taken over the whole batch. (Hugging Face's SwitchTransformers model
    takes them per sequence and averages the per-sequence losses: another number.)

    Args:
        router_logits: ``(n_tokens, n_experts)``, or a tuple of them (one per layer,
            as Hugging Face's models return them); all layers' tokens count together.
        k: experts per token (the top-k that defines ``f``).
        attention_mask: optional ``(batch, seq)``, 1 for real tokens and 0 for padding,
            with ``batch * seq`` equal to each layer's ``n_tokens``. Padding is left out
            of both ``f`` and ``P``.
        alpha: the loss weight (Switch: 0.01).

    Returns:
        a scalar tensor. ``f`` comes from hard top-k counts (no gradient); the gradient
        reaches the router through ``P``.
    """
    logits, weight = flatten_router_logits(router_logits, attention_mask)
    n_experts = logits.size(-1)
    probs = torch.softmax(logits, dim=-1)  # p_i(x_t): (n_tokens, N)
    _, indices = logits.topk(k, dim=-1)  # each token's k experts: (n_tokens, k)
    routed = torch.zeros_like(probs).scatter(-1, indices, 1.0)  # 1 where t is sent to i
    n_real = weight.sum()
    f = (routed * weight[:, None]).sum(0) / n_real  # f_i: share of tokens sent to i
    P = (probs * weight[:, None]).sum(0) / n_real  # P_i: mean router probability of i
    return alpha * n_experts * (f * P).sum()  # alpha * N * sum_i f_i P_i


def router_z_loss(
    router_logits: Tensor | Sequence[Tensor], attention_mask: Tensor | None = None
) -> Tensor:
    """ST-MoE's z-loss ``(1/T) sum_t (logsumexp_i l_ti)^2`` (arXiv 2202.08906, eq. 5).

    Args and padding as in :func:`load_balancing_loss`. Returns a scalar tensor.
    """
    logits, weight = flatten_router_logits(router_logits, attention_mask)
    z = torch.logsumexp(logits, dim=-1)  # log sum_i e^{l_ti}: (n_tokens,)
    return (weight * z.square()).sum() / weight.sum()


def expert_load(indices: Tensor, n_experts: int) -> Tensor:
    """How many (token, slot) assignments each expert receives: int64 ``(n_experts,)``.

    ``indices`` is the ``(..., k)`` output of :func:`top_k_gating`; the counts sum to
    ``n_tokens * k``.
    """
    if indices.numel() and (indices.min() < 0 or indices.max() >= n_experts):
        raise ValueError(f"indices must lie in [0, n_experts={n_experts})")
    return torch.bincount(indices.reshape(-1), minlength=n_experts)
