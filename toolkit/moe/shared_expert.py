"""Shared experts with a gate of their own: Qwen2-MoE's variant of DeepSeekMoE's idea.

A *shared* expert sees every token, beside the ``k`` routed ones. DeepSeekMoE
(arXiv 2401.06066) simply adds it, as :class:`toolkit.moe.SparseMoE` does with
``n_shared_experts``. Qwen2-MoE (arXiv 2407.10671) lets each token decide how much of it
to take, with one sigmoid gate:

    y = routed(x) + sigmoid(x w_s) * S(x)        w_s: (d_model,), one number per token

The gate is a single logit per token, not a softmax over experts: it does not compete with
the routed experts' weights, and it can close (sigmoid -> 0) for tokens that the routed
experts serve well. :class:`SharedExpertMoE` puts the two together with Qwen2-MoE's
routing (softmax over all experts, then top-k; renormalised only if asked), and equals
Hugging Face's ``Qwen2MoeSparseMoeBlock`` (tested).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toolkit.arguments import check_int, check_sequence
from toolkit.ffn import SwiGLU
from toolkit.moe.layer import SparseMoE


class GatedSharedExpert(nn.Module):
    """``sigmoid(x w_s) * SwiGLU(x)``: a shared expert that each token scales by its gate.

    Args:
        d_model: model width.
        d_ff: the shared expert's hidden size (Qwen2-MoE makes it larger than a routed
            expert's).

    Shapes: ``(..., d_model)`` -> ``(..., d_model)``.
    """

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        check_int("d_model", d_model)
        check_int("d_ff", d_ff)
        self.expert = SwiGLU(d_model, d_ff)
        self.gate = nn.Linear(d_model, 1, bias=False)  # w_s: one logit per token

    def forward(self, x: Tensor) -> Tensor:
        return torch.sigmoid(self.gate(x)) * self.expert(x)  # (..., 1) * (..., d_model)


class SharedExpertMoE(nn.Module):
    """Routed experts plus one gated shared expert, as in Qwen2-MoE.

    Args:
        d_model: model width.
        d_ff: hidden size of each routed expert.
        n_experts: routed experts ``E``.
        k: routed experts per token.
        d_shared: the shared expert's hidden size.
        renormalize: rescale the ``k`` gates to sum to 1 (Qwen2-MoE's ``norm_topk_prob``).
        capacity_factor: see :class:`toolkit.moe.SparseMoE` (``None``: no limit).

    Returns from ``forward``: ``(y, info)`` as :meth:`toolkit.moe.SparseMoE.forward`.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        k: int,
        d_shared: int,
        renormalize: bool = False,
        capacity_factor: float | None = None,
    ):
        super().__init__()
        self.routed = SparseMoE(d_model, d_ff, n_experts, k, gating="softmax_then_topk",
                                renormalize=renormalize, capacity_factor=capacity_factor)
        self.shared = GatedSharedExpert(d_model, d_shared)

    def forward(self, x: Tensor) -> tuple[Tensor, dict]:
        """``x``: ``(batch, seq, d_model)`` -> ``(y, info)``, ``y`` of the same shape."""
        check_sequence("x", x, self.routed.d_model)
        y, info = self.routed(x)
        return y + self.shared(x), info
