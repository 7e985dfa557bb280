"""The capstone GPT: embedding, pre-norm blocks, final norm, tied output head.

The model students read and write in the capstone, one path from top to bottom: every
layer is the teaching one (:mod:`toolkit.norm`, :mod:`toolkit.ffn`,
:class:`toolkit.models.CausalSelfAttention`), whatever ``config.attention_backend``
says. :class:`toolkit.models.FastGPT` (:mod:`toolkit.models.fast_gpt`) is the same model
on fused kernels, with the same state dict: train with it, read this one.

Weight tying (arXiv 1608.05859, 1611.01462). The embedding ``E`` is ``(V, d)``:
row ``v`` is token ``v``'s vector. The unembedding ``W_U`` maps ``d -> V``, so it
is ``(d, V)``, and tying sets ``W_U = E^T``: ``logits = h @ E^T``, i.e. the logit
of token ``v`` is the dot product of ``h`` with ``v``'s own embedding.
``nn.Linear(d, V)`` stores its weight as ``(V, d)`` and computes ``h @ weight^T``,
so tying is ``lm_head.weight = wte.weight``: the *same* Parameter object, not a
copy and not a transpose. GPT-2 small saves 50257 x 768 = 38.6M parameters.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.ffn import FeedForward, SwiGLU
from toolkit.models.attention import CausalSelfAttention
from toolkit.models.config import GPTConfig
from toolkit.models.kv_cache import StaticKVCache
from toolkit.norm import LayerNorm, RMSNorm


def _make_norm(config: GPTConfig) -> nn.Module:
    """LayerNorm (gamma, beta) for the classic recipe, RMSNorm (gamma) for the modern one."""
    if config.norm_type == "layernorm":
        return LayerNorm(config.d_model, eps=config.norm_eps, bias=config.use_bias)
    return RMSNorm(config.d_model, eps=config.norm_eps)


class Block(nn.Module):
    """One Transformer block: attention then MLP, each in a residual connection.

    Pre-norm: ``x = x + Attn(ln_1(x)); x = x + MLP(ln_2(x))``.
    Post-norm: ``x = ln_1(x + Attn(x)); x = ln_2(x + MLP(x))``.
    Module names follow GPT-2 (``ln_1``, ``attn``, ``ln_2``, ``mlp``). The MLP is
    ``W_down (silu(x W_gate) * x W_up)`` for SwiGLU, ``W_2 act(x W_1 + b_1) + b_2`` otherwise.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.ln_1 = _make_norm(config)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = _make_norm(config)
        if config.mlp_type == "swiglu":
            self.mlp: nn.Module = SwiGLU(config.d_model, config.ffn_hidden, bias=config.use_bias)
        else:
            self.mlp = FeedForward(
                config.d_model, config.ffn_hidden, activation=config.mlp_type, bias=config.use_bias
            )
        self.drop = nn.Dropout(config.dropout)

    def forward(
        self, x: Tensor, positions: Tensor, cache: StaticKVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        if self.pre_norm:
            x = x + self.drop(self.attn(self.ln_1(x), positions, cache, start_pos))  # x + F(LN(x))
            x = x + self.drop(self.mlp(self.ln_2(x)))
        else:
            x = self.ln_1(x + self.drop(self.attn(x, positions, cache, start_pos)))  # LN(x + F(x))
            x = self.ln_2(x + self.drop(self.mlp(x)))
        return x


class GPT(nn.Module):
    """Decoder-only language model; see the module docstring for the two recipes.

    Module names: ``wte`` (token embedding ``E``, ``(V, d)``), ``wpe`` (learned
    positions, classic only), ``blocks``, ``ln_f`` (final norm), ``lm_head``.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)  # E: (V, d)
        self.wpe = (
            nn.Embedding(config.max_seq_len, config.d_model)
            if config.position_type == "learned"
            else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layers))
        # Pre-norm leaves the stream un-normalised, so one final norm before the head.
        self.ln_f = _make_norm(config) if config.norm_placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # weight (V, d)
        if config.tie_weights:
            # W_U = E^T: nn.Linear computes h @ weight^T, so weight must be E itself.
            self.lm_head.weight = self.wte.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 initialisation: N(0, 0.02) for matrices, zeros for biases, ones for
        norm gains, and N(0, 0.02 / sqrt(2L)) for the projections that write into
        the residual stream (``o_proj``, ``fc2`` / ``down_proj``), so the stream's
        variance does not grow with depth (2 residual writes per block)."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (LayerNorm, RMSNorm)):
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        residual_std = std / math.sqrt(2 * self.config.n_layers)
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "fc2.weight", "down_proj.weight")):
                nn.init.normal_(p, mean=0.0, std=residual_std)

    def new_cache(self) -> StaticKVCache:
        """An empty :class:`StaticKVCache` sized for this model."""
        return StaticKVCache(self.config.n_layers, self.config.max_seq_len)

    def unembed(self, h: Tensor) -> Tensor:
        """``(B, T, d)`` -> ``(B, T, V)`` logits: ``h @ W_U``, ``W_U = E^T`` when tied."""
        return self.lm_head(h)  # h @ lm_head.weight^T = h @ E^T

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        cache: StaticKVCache | None = None,
        start_pos: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """
        Args:
            idx: ``(B, T)`` token ids at absolute positions ``start_pos .. start_pos+T-1``.
            targets: ``(B, T)`` next-token ids (``-100`` = ignored), or ``None``.
            cache: a :class:`StaticKVCache` from :meth:`new_cache`; the keys and values of
                these positions are written into it and the queries attend to
                everything it holds before ``start_pos``.
            start_pos: absolute position of ``idx[:, 0]``. With a cache it must be
                ``<= cache.length`` (equal to append; smaller rewinds).

        Returns:
            ``(logits (B, T, V), loss)``; ``loss`` is the mean cross-entropy over
            non-ignored targets, or ``None`` without targets.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        B, T = idx.shape
        if start_pos < 0:
            raise ValueError(f"start_pos must be >= 0, got {start_pos}")
        if start_pos + T > self.config.max_seq_len:
            raise ValueError(
                f"idx: positions up to {start_pos + T} exceed max_seq_len="
                f"{self.config.max_seq_len}; shorten the input or raise max_seq_len"
            )
        if cache is not None and start_pos > cache.length:
            raise ValueError(
                f"start_pos={start_pos} leaves a gap: the cache holds {cache.length} positions"
            )
        positions = torch.arange(start_pos, start_pos + T, device=idx.device)  # (T,)
        x = self.wte(idx)  # (B, T, d): rows of E
        if self.wpe is not None:
            x = x + self.wpe(positions)  # + P[pos], broadcast over the batch
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, positions, cache, start_pos)
        h = self.ln_f(x)
        logits = self.unembed(h)  # (B, T, V)
        if cache is not None:
            cache.length = start_pos + T
        loss = None
        if targets is not None:
            if targets.shape != idx.shape:
                raise ValueError(
                    f"targets must have shape {tuple(idx.shape)}, got {tuple(targets.shape)}"
                )
            # mean over positions of -log softmax(logits)[target]
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss
