"""The capstone GPT on its fast paths: :class:`FastGPT`, the same model computed faster.

:class:`toolkit.models.GPT` is the model of the capstone, one readable path. ``FastGPT``
is that model with every layer swapped for its fast twin, each a subclass of the
teaching layer with the same parameters and the same function:

=====================================  ===============================================
teaching layer (:class:`GPT`)          fast twin (:class:`FastGPT`)
=====================================  ===============================================
``LayerNorm``, ``RMSNorm``             ``FusedLayerNorm``, ``FusedRMSNorm``
                                       (:mod:`toolkit.models.fused`)
``FeedForward``, ``SwiGLU``            ``FusedFeedForward`` (the activation's kernel),
                                       ``FusedSwiGLU`` (the gate in fewer tensors)
``CausalSelfAttention``                ``FastCausalSelfAttention``
                                       (:mod:`toolkit.models.fast_attention`): one
                                       stored QKV projection, RoPE from a table, the
                                       attention of ``config.attention_backend``
                                       (:mod:`toolkit.models.backends`)
=====================================  ===============================================

The state dict is :class:`GPT`'s, key for key and shape for shape (the joint QKV
projection saves and loads as ``q_proj``, ``k_proj``, ``v_proj``), so a checkpoint of
one model loads into the other. ``FastGPT(config)`` builds and initialises the teaching
model first, then moves its tensors into the fast layers (built on the ``meta``
device: no memory, no random draws): from one seed, ``GPT`` and ``FastGPT`` start from
the same weights and leave the random generator in the same state. Outputs, losses,
gradients and cached decoding equal :class:`GPT`'s to float rounding (tested).
"""

from __future__ import annotations

import torch
from torch import nn

from toolkit.ffn import FeedForward, SwiGLU
from toolkit.models.attention import CausalSelfAttention
from toolkit.models.config import GPTConfig
from toolkit.models.fast_attention import FastCausalSelfAttention
from toolkit.models.fused import FusedFeedForward, FusedLayerNorm, FusedRMSNorm, FusedSwiGLU
from toolkit.models.gpt import GPT
from toolkit.norm import LayerNorm, RMSNorm


def fast_twin(layer: nn.Module, config: GPTConfig) -> nn.Module:
    """The fast layer that computes what the teaching ``layer`` of a :class:`GPT` built
    from ``config`` computes, holding ``layer``'s own tensors (no copy; the joint QKV
    projection is the one new tensor). A layer without a twin (``nn.Identity``) is
    returned as it is."""
    d, hidden, bias = config.d_model, config.ffn_hidden, config.use_bias
    with torch.device("meta"):  # no memory, no random draws: the tensors come from `layer`
        if isinstance(layer, CausalSelfAttention):
            twin: nn.Module = FastCausalSelfAttention(config, layer.layer_idx)
        elif isinstance(layer, LayerNorm):
            twin = FusedLayerNorm(d, eps=config.norm_eps, bias=bias)
        elif isinstance(layer, RMSNorm):
            twin = FusedRMSNorm(d, eps=config.norm_eps)
        elif isinstance(layer, SwiGLU):
            twin = FusedSwiGLU(d, hidden, bias=bias)
        elif isinstance(layer, FeedForward):
            twin = FusedFeedForward(d, hidden, activation=config.mlp_type, bias=bias)
        else:
            return layer
    twin.load_state_dict(layer.state_dict(), assign=True)
    return twin.train(layer.training)


class FastGPT(GPT):
    """:class:`toolkit.models.GPT` on fused kernels: same state dict, same function.

    Module names and the forward pass are :class:`GPT`'s; only the layers inside the
    blocks and the final norm are the fast twins (:func:`fast_twin`). Train and generate
    with this one; :meth:`GPT.load_state_dict` and this class's take each other's
    checkpoints.
    """

    def __init__(self, config: GPTConfig):
        super().__init__(config)  # the teaching model, initialised: GPT's weights
        for block in self.blocks:
            block.ln_1, block.ln_2 = fast_twin(block.ln_1, config), fast_twin(block.ln_2, config)
            block.attn = fast_twin(block.attn, config)
            block.mlp = fast_twin(block.mlp, config)
        self.ln_f = fast_twin(self.ln_f, config)
