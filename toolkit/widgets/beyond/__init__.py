"""Widgets for Assignment 06: experts, state-space models, RWKV, and what decoding costs.

What each one is for
--------------------
* :func:`router_load_explorer`: a toy router trained with and without the
  load-balancing loss; the load per expert shows expert collapse, the capacity line
  and the dropped assignments at a capacity factor you choose.
* :func:`ssm_kernel_explorer`: the impulse response (convolution kernel) of a
  discretised SSM as ``delta`` and ``|A|`` move: how far back the model remembers, and
  how Mamba's input-dependent step can wipe the memory at a chosen token.
* :func:`rwkv_decay_explorer`: RWKV's per-channel decay and one marked token's share of
  the WKV average over time.
* :func:`mamba_selectivity_explorer`: Mamba's input-dependent step ``delta_t`` per token,
  the share of the state each step keeps, and the state of the selective scan against an
  LTI scan with one step for every token.
* :func:`gau_explorer`: the gated attention unit's squared-ReLU attention, its gate ``U``
  and its output.
* :func:`decoding_cost_explorer`: memory and arithmetic per generated token of attention
  with a KV cache, Mamba and RWKV as the context grows.
* :func:`recall_explorer`: the MQAR experiment measured (pure attention, pure Mamba and a
  hybrid at equal size): recall against the number of pairs, and the state each keeps.

Each builder draws with the student's own functions where given, by their toolkit names:
``router_load_explorer(fns={"top_k_gating": top_k_gating, "load_balancing_loss":
load_balancing_loss})``, ``ssm_kernel_explorer(fns={"discretize_zoh": discretize_zoh})``,
``rwkv_decay_explorer(fns={"wkv_recurrent": wkv_recurrent})``,
``mamba_selectivity_explorer(fns={"selective_scan": selective_scan})``,
``gau_explorer(fns={"GatedAttentionUnit": GatedAttentionUnit})``, and
``decoding_cost_explorer(fns={"kv_cache_bytes": kv_cache_bytes})`` (Assignment 03).

Every builder has a matching pure ``plot_*`` function that returns a
``matplotlib.figure.Figure``, so tests render it with the Agg backend; builders redraw
through :func:`toolkit.widgets.display.live_figure`. With ``TOOLKIT_HEADLESS=1`` (set by
the autograder) builders return a small placeholder and draw nothing.

Modules: :mod:`~toolkit.widgets.beyond.moe`, :mod:`~toolkit.widgets.beyond.ssm`,
:mod:`~toolkit.widgets.beyond.selectivity`, :mod:`~toolkit.widgets.beyond.rwkv`,
:mod:`~toolkit.widgets.beyond.gau`, :mod:`~toolkit.widgets.beyond.decoding_cost`,
:mod:`~toolkit.widgets.beyond.recall`.
"""

from toolkit.widgets.beyond.decoding_cost import (
    decoding_cost_explorer,
    decoding_costs,
    plot_decoding_costs,
)
from toolkit.widgets.beyond.gau import gau_explorer, gau_internals, plot_gau
from toolkit.widgets.beyond.moe import plot_router_load, router_load_explorer, simulate_router
from toolkit.widgets.beyond.recall import plot_recall, recall_explorer
from toolkit.widgets.beyond.rwkv import (
    channel_decays,
    plot_rwkv_decay,
    rwkv_decay_explorer,
    wkv_trace,
)
from toolkit.widgets.beyond.selectivity import (
    mamba_selectivity_explorer,
    plot_mamba_selectivity,
    selective_states,
    selectivity_inputs,
)
from toolkit.widgets.beyond.ssm import (
    memory_horizon,
    plot_ssm_kernel,
    selective_forgetting,
    ssm_impulse_response,
    ssm_kernel_explorer,
)

__all__ = [
    "channel_decays",
    "gau_explorer",
    "gau_internals",
    "mamba_selectivity_explorer",
    "plot_gau",
    "plot_mamba_selectivity",
    "plot_recall",
    "recall_explorer",
    "selective_states",
    "selectivity_inputs",
    "decoding_cost_explorer",
    "decoding_costs",
    "memory_horizon",
    "plot_decoding_costs",
    "plot_router_load",
    "plot_rwkv_decay",
    "plot_ssm_kernel",
    "router_load_explorer",
    "rwkv_decay_explorer",
    "selective_forgetting",
    "simulate_router",
    "ssm_impulse_response",
    "ssm_kernel_explorer",
    "wkv_trace",
]
