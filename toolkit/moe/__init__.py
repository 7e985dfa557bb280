"""Mixture of experts: many feed-forward networks, a few of them per token.

A dense Transformer layer runs every token through the same feed-forward network
(FFN). A *sparse mixture-of-experts* (MoE) layer holds ``E`` expert FFNs and a small
**router** that picks ``k`` of them for each token (Shazeer et al., arXiv 1701.06538;
GShard, arXiv 2006.16668; Switch, arXiv 2101.03961; Mixtral, arXiv 2401.04088). The
layer has ``E`` times the FFN parameters but each token pays for only ``k`` experts:
Mixtral 8x7B stores 46.7B parameters and uses 12.9B per token.

The modules, read in this order:

* :mod:`toolkit.moe.routing`: router logits, top-k with both gate conventions, the
  load-balancing loss (Switch; equal to Hugging Face's Mixtral loss) and the router
  z-loss (ST-MoE).
* :mod:`toolkit.moe.dispatch`: expert capacity and dropped tokens, then sending each
  token to its experts and adding the weighted answers back: a naive per-expert loop
  and the sort-based dispatch that gives the same output.
* :mod:`toolkit.moe.layer`: the :class:`SparseMoE` layer (router, experts, shared
  experts as in DeepSeekMoE) and total vs active parameter counts.
* :mod:`toolkit.moe.shared_expert`: Qwen2-MoE's shared expert, scaled per token by a
  sigmoid gate of its own.

Shapes: a layer maps ``(batch, seq, d_model)`` to the same; routing works on the
flattened tokens ``(n_tokens, d_model)`` with ``n_tokens = batch * seq``.
"""

from toolkit.arguments import GATINGS  # the two gate conventions, by name
from toolkit.moe.dispatch import (
    apply_capacity,
    expert_capacity,
    naive_dispatch,
    sorted_dispatch,
)
from toolkit.moe.layer import (
    MIXTRAL_8X7B,
    SparseMoE,
    moe_parameter_counts,
)
from toolkit.moe.routing import (
    expert_load,
    flatten_router_logits,
    load_balancing_loss,
    router_z_loss,
    top_k_gating,
)
from toolkit.moe.shared_expert import GatedSharedExpert, SharedExpertMoE

__all__ = [
    "GATINGS",
    "GatedSharedExpert",
    "MIXTRAL_8X7B",
    "SharedExpertMoE",
    "SparseMoE",
    "apply_capacity",
    "expert_capacity",
    "expert_load",
    "flatten_router_logits",
    "load_balancing_loss",
    "moe_parameter_counts",
    "naive_dispatch",
    "router_z_loss",
    "sorted_dispatch",
    "top_k_gating",
]
