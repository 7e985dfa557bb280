"""The sparse MoE layer, and what "46.7B parameters, 12.9B active" means.

:class:`SparseMoE` replaces a Transformer block's feed-forward network:

    logits = x W_r^T                        router, no bias   (n_tokens, E)
    gates, experts = top-k(logits)          toolkit.moe.routing.top_k_gating
    y = sum_j g_j E_j(x) + sum_s S_s(x)     routed experts + always-on shared experts

Every expert is a SwiGLU FFN (``gate_proj``, ``up_proj``, ``down_proj``), as in
Mixtral. **Shared experts** (DeepSeekMoE, arXiv 2401.06066; Qwen2-MoE uses one with a
sigmoid gate of its own, :mod:`toolkit.moe.shared_expert`) see every token: they learn
what all tokens need, so the routed experts are free to specialise.

**Total vs active parameters.** A token passes through the attention, the router and
``k`` of the ``E`` experts (plus the shared ones), so the compute per token follows the
*active* count while memory holds the *total*. Mixtral 8x7B (arXiv 2401.04088:
d_model 4096, d_ff 14336, 32 layers, 32 query heads, 8 KV heads, vocabulary 32000,
8 experts, top-2) has 46.7B parameters and 12.9B active; "8x7B" is not 56B, because
only the FFNs are replicated (:func:`moe_parameter_counts`).
"""

from __future__ import annotations

from torch import Tensor, nn

from toolkit.arguments import (
    check_capacity_factor,
    check_gating,
    check_int,
    check_sequence,
    check_top_k,
)
from toolkit.ffn import SwiGLU
from toolkit.moe.dispatch import apply_capacity, expert_capacity, sorted_dispatch
from toolkit.moe.routing import top_k_gating

#: Mixtral 8x7B's shape (arXiv 2401.04088, Table 1), in :func:`moe_parameter_counts` terms.
MIXTRAL_8X7B = dict(
    d_model=4096, d_ff=14336, n_layers=32, n_heads=32, n_kv_heads=8,
    vocab_size=32000, n_experts=8, k=2,
)


class SparseMoE(nn.Module):
    """A mixture-of-experts feed-forward layer with top-k routing.

    Args:
        d_model: model width.
        d_ff: hidden size of each expert (SwiGLU).
        n_experts: routed experts ``E``.
        k: experts per token.
        gating, renormalize: the gate convention, see
            :func:`toolkit.moe.routing.top_k_gating`.
        capacity_factor: ``None`` (no limit, as at inference) or the factor of
            :func:`toolkit.moe.dispatch.expert_capacity`; assignments past the capacity
            are dropped and counted.
        n_shared_experts: always-on experts added to every token (DeepSeekMoE).

    Parameters follow Hugging Face's Mixtral where it has them: ``gate`` (the router,
    ``(E, d_model)``), ``experts.{e}.gate_proj / up_proj / down_proj``.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_experts: int,
        k: int = 2,
        gating: str = "topk_then_softmax",
        renormalize: bool = False,
        capacity_factor: float | None = None,
        n_shared_experts: int = 0,
    ):
        super().__init__()
        for name, size in (("d_model", d_model), ("d_ff", d_ff), ("n_experts", n_experts)):
            check_int(name, size)
        check_int("n_shared_experts", n_shared_experts, minimum=0)
        check_top_k(k, n_experts)
        check_gating(gating)
        check_capacity_factor(capacity_factor)
        self.d_model, self.n_experts, self.k = d_model, n_experts, k
        self.gating, self.renormalize, self.capacity_factor = gating, renormalize, capacity_factor
        self.gate = nn.Linear(d_model, n_experts, bias=False)  # router: logits = x W_r^T
        self.experts = nn.ModuleList(SwiGLU(d_model, d_ff) for _ in range(n_experts))
        self.shared_experts = nn.ModuleList(SwiGLU(d_model, d_ff) for _ in range(n_shared_experts))

    def forward(self, x: Tensor) -> tuple[Tensor, dict]:
        """Route, dispatch, combine.

        Args:
            x: ``(batch, seq, d_model)``.

        Returns:
            ``(y, info)``: ``y`` is ``(batch, seq, d_model)``; ``info`` holds
            ``"router_logits"`` ``(batch * seq, E)`` (for the auxiliary losses) and
            ``"n_dropped"``, the number of assignments the capacity dropped.
        """
        check_sequence("x", x, self.d_model)
        batch, seq, d_model = x.shape
        tokens = x.reshape(batch * seq, d_model)
        logits = self.gate(tokens)  # (n_tokens, E)
        gates, indices = top_k_gating(logits, self.k, self.gating, self.renormalize)
        kept, n_dropped = None, 0
        if self.capacity_factor is not None:
            capacity = expert_capacity(batch * seq, self.n_experts, self.k, self.capacity_factor)
            kept, n_dropped = apply_capacity(indices, self.n_experts, capacity)
        y = sorted_dispatch(tokens, gates, indices, self.experts, kept)
        for shared in self.shared_experts:  # every token, no gate
            y = y + shared(tokens)
        return y.reshape(batch, seq, d_model), {"router_logits": logits, "n_dropped": n_dropped}


def moe_parameter_counts(
    d_model: int,
    d_ff: int,
    n_layers: int,
    n_heads: int,
    n_kv_heads: int,
    vocab_size: int,
    n_experts: int,
    k: int,
    n_shared_experts: int = 0,
    tie_embeddings: bool = False,
) -> dict[str, int]:
    """Total and active parameters of a Mixtral-style decoder (no biases, RMSNorm).

    Per layer: attention ``q, o: d_model^2`` and ``k, v: d_model * n_kv_heads * d_head``;
    a router ``d_model * E``; two norms ``2 d_model``; each expert ``3 d_model d_ff``.
    Plus the embedding, the output head (unless tied) and the final norm.

    >>> counts = moe_parameter_counts(**MIXTRAL_8X7B)
    >>> round(counts["total"] / 1e9, 1), round(counts["active"] / 1e9, 1)
    (46.7, 12.9)
    """
    if d_model % n_heads or n_heads % n_kv_heads:
        raise ValueError("d_model must be a multiple of n_heads, and n_heads of n_kv_heads")
    d_head = d_model // n_heads
    attention = 2 * d_model * d_model + 2 * d_model * n_kv_heads * d_head  # q, o + k, v
    expert = 3 * d_model * d_ff  # gate_proj, up_proj, down_proj
    always = attention + d_model * n_experts + 2 * d_model + n_shared_experts * expert
    outside = vocab_size * d_model * (1 if tie_embeddings else 2) + d_model  # + final norm
    return {
        "total": n_layers * (always + n_experts * expert) + outside,
        "active": n_layers * (always + k * expert) + outside,
    }
