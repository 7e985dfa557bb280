# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Assignment 07: Capstone, a mini-GPT
#
# Everything from the earlier assignments comes together here: you build a small
# decoder-only language model in the *modern* recipe (RoPE, RMSNorm, SwiGLU, grouped-query
# attention, tied embeddings), give it a KV cache for fast decoding, write the samplers
# that turn its logits into text, train it on a corpus that ships with Python, and hand in
# the trained weights.
#
# | part | you write | points |
# |---|---|---|
# | 1 | `StaticKVCache.update`: the per-layer key/value store | 2 |
# | 2 | `CausalSelfAttention.forward`: RoPE at absolute positions, GQA, causal mask, cache | 3 |
# | 3 | `GPT`: weight tying, `unembed`, `forward` | 4 |
# | 4 | `apply_temperature`, `top_k_filter`, `top_p_filter` | 4 |
# | 5 | `generate`: decoding one token per step with the KV cache | 3 |
# | 6 | `train_step`: one AdamW step with gradient clipping | 2 |
# | 7 | your trained checkpoint `capstone.safetensors` (validation loss) | 4 |
# | 10 | a short written answer: why did decoder-only models win? | 3 (read by a person) |
#
# **How this notebook is graded.** The test cell after each exercise runs quick visible
# checks. The grader runs its own hidden checks on other inputs and scores each part by the
# fraction that pass. It does **not** run cells marked "not run while grading" (training,
# widgets): your model is never retrained by the grader. Instead you hand in the file
# `capstone.safetensors` that the training section writes next to this notebook; the
# grader loads it into *your* `GPT` class and measures its loss on held-out text (part 7).
#
# While the hidden checks run, the toolkit's own `StaticKVCache`, `CausalSelfAttention`, `GPT`,
# samplers, `generate` and `train_step` (and PyTorch's fused attention) are switched off:
# calling them fails the check. The building blocks of earlier assignments (`apply_rope`,
# `repeat_kv`, `causal_mask`, `scaled_dot_product_attention`, the norms and feed-forward
# layers) are imported below and are yours to use.
#
# **Time.** Training the default model takes a few minutes on a laptop CPU (about two on
# two cores) and seconds on a GPU; everything else runs in seconds.
#
# **Conventions.** Token ids `idx` are `(B, T)`; activations `(B, T, d)`; attention tensors
# `(B, heads, T, d_head)`; logits `(B, T, V)`. Masks are `bool` with `True` = may attend.
# A position's *absolute* index counts from the start of the sequence, including tokens that
# are already in the cache.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
from __future__ import annotations

import json
import math
import os

import torch
import torch.nn.functional as F
from IPython.display import display
from safetensors import safe_open
from torch import Tensor, nn

from toolkit.attention import scaled_dot_product_attention
from toolkit.data import get_batch, load_corpus
from toolkit.ffn import FeedForward, SwiGLU
from toolkit.gqa import repeat_kv
from toolkit.masks import causal_mask
from toolkit.models import GPTConfig, count_parameters, parameter_matched_configs
from toolkit.norm import LayerNorm, RMSNorm
from toolkit.notebook import NotReadyError, friendly_errors
from toolkit.position import apply_rope
from toolkit.train import (
    TrainHistory,
    configure_optimizer,
    estimate_loss,
    grad_norm,
    lr_schedule,
    save_checkpoint,
)
from toolkit.widgets.generation import (
    LiveLossPlot,
    plot_loss_curves,
    sampling_playground,
    side_by_side_generation,
)

friendly_errors()  # one short line, not a long traceback, for an exercise not written yet

_ = torch.manual_seed(0)

# %% [markdown]
# ## 0. The model at a glance
#
# A GPT turns a sequence of token ids into, at every position, a distribution over the
# *next* token:
#
# $$
# x_0 = E[\text{idx}] \;(+\,P[\text{pos}]), \qquad
# x_\ell = x_{\ell-1} + \mathrm{Attn}(\mathrm{Norm}(x_{\ell-1})), \qquad
# x_\ell \leftarrow x_\ell + \mathrm{MLP}(\mathrm{Norm}(x_\ell)), \qquad
# \text{logits} = \mathrm{Norm}_f(x_L)\, W_U .
# $$
#
# Each block *reads* the residual stream through a norm and *adds* its result back
# (pre-norm, arXiv 2002.04745); one final norm comes before the output head. Two recipes
# fill in the same skeleton:
#
# | component | classic (GPT-2) | modern (LLaMA-like, with tied embeddings) |
# |---|---|---|
# | positions | learned table `wpe` added to the embeddings | RoPE on q and k (arXiv 2104.09864) |
# | norm | LayerNorm | RMSNorm (arXiv 1910.07467) |
# | feed-forward | GELU MLP, hidden 4d | SwiGLU, hidden about 8d/3 (arXiv 2002.05202) |
# | attention | multi-head | grouped-query, GQA (arXiv 2305.13245) |
# | biases | yes | no |
# | output head | tied to the embedding | tied to the embedding |
#
# Both recipes tie the output head to the embedding, as GPT-2 does and as suits a model
# this small; LLaMA and LLaMA 2 themselves keep a separate output matrix, so the modern
# recipe is LLaMA-*like*.
#
# `GPTConfig` (from the toolkit) holds the hyper-parameters; `GPTConfig.modern(...)` and
# `GPTConfig.classic(...)` pick a recipe. The resolved choices are properties:
# `position_type`, `norm_type`, `mlp_type`, `use_bias`, `kv_heads`, `d_head`.
# Your classes read everything from the config.

# %%
demo_config = GPTConfig.modern(d_model=64, n_layers=2, n_heads=4, max_seq_len=32)
print(demo_config.position_type, demo_config.norm_type, demo_config.mlp_type,
      "bias" if demo_config.use_bias else "no bias",
      f"{demo_config.n_heads} query heads, {demo_config.kv_heads} KV heads,"
      f" d_head {demo_config.d_head}")

# %% [markdown]
# ## 1. The KV cache
#
# Generating text is a loop: run the model, pick the next token, append it, repeat. Without
# a cache, step $t$ re-runs the whole prefix: $O(t^2 d)$ attention work plus $O(t d^2)$ for
# the projections, so a sequence of $n$ tokens costs $O(n^3 d + n^2 d^2)$ overall. But the keys and
# values of earlier tokens never change (a causal model never lets a token see the future,
# so later tokens cannot alter them). So we keep them: the **KV cache** stores, for each
# layer, the keys and values of every position processed so far, and a decoding step only
# computes the new token's query, key and value, appends the key and value, and attends
# over everything stored: $O(t d)$ attention plus $O(d^2)$ projections per step.
#
# Our cache pre-allocates, per layer, two buffers of shape `(B, n_kv_heads, max_seq_len,
# d_head)` on the first write (taking batch size, dtype and device from the first keys).
# With grouped-query attention it stores the `n_kv_heads` shared heads, not the `n_heads`
# query heads: that is where GQA's memory saving comes from. (Hence the name, as Hugging
# Face's `StaticCache`: the buffers never change size. Assignment 03's `DynamicKVCache`
# grows by concatenation instead.)
#
# ### Exercise 1: `StaticKVCache.update`
#
# `update(layer, k, v, start_pos)` writes `k` and `v` (each `(B, H_kv, T, D)`) into
# positions `start_pos, ..., start_pos + T - 1` of that layer's buffers and returns *all*
# keys and values of positions `0 .. start_pos + T - 1`. Writing at `start_pos` (rather
# than "at the end") lets a caller rewind and overwrite. A second batch size on an existing
# cache is a mistake: raise `ValueError`. (`length`, the number of positions filled, is
# kept by the model's `forward`, not here.)

# %% nbgrader={"grade": false, "grade_id": "kv_cache", "locked": false, "schema_version": 3, "solution": true}
class StaticKVCache:
    """Keys and values of every layer for the positions processed so far.

    Per layer, two buffers ``(B, n_kv_heads, max_seq_len, d_head)`` (keys, values),
    allocated on the first :meth:`update` of that layer. ``length`` counts the positions
    filled; the model's ``forward`` sets it.

    Args:
        n_layers: number of layers.
        max_seq_len: capacity in positions.
    """

    def __init__(self, n_layers: int, max_seq_len: int):
        self.n_layers, self.max_seq_len = n_layers, max_seq_len
        self.keys: list[Tensor | None] = [None] * n_layers
        self.values: list[Tensor | None] = [None] * n_layers
        self.length = 0

    @property
    def batch_size(self) -> int | None:
        return None if self.keys[0] is None else self.keys[0].size(0)

    def update(self, layer: int, k: Tensor, v: Tensor, start_pos: int) -> tuple[Tensor, Tensor]:
        """Write ``k, v`` ``(B, H_kv, T, D)`` at positions ``start_pos .. start_pos+T-1``.

        On the first write to ``layer``, allocate zero buffers of shape
        ``(B, H_kv, max_seq_len, D)`` with ``k``'s dtype and device. If the buffers exist
        but hold another batch size ``B``, raise ``ValueError``.

        Returns:
            All keys and values of positions ``0 .. start_pos+T-1``: two tensors
            ``(B, H_kv, start_pos + T, D)`` (views of the buffers are fine).

        Hints: ``torch.zeros(shape, dtype=..., device=...)``; slice assignment
        ``buf[:, :, a:b] = k``.
        """
        ### BEGIN SOLUTION
        B, H, T, D = k.shape
        if self.keys[layer] is None:
            shape = (B, H, self.max_seq_len, D)
            self.keys[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.values[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        elif self.keys[layer].size(0) != B:
            raise ValueError(
                f"cache: holds a batch of {self.keys[layer].size(0)}, got {B}; use a new cache"
            )
        end = start_pos + T
        self.keys[layer][:, :, start_pos:end] = k
        self.values[layer][:, :, start_pos:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]
        ### END SOLUTION

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search: row ``i`` becomes old row ``index[i]``)."""
        for layer in range(self.n_layers):
            if self.keys[layer] is not None:
                self.keys[layer] = self.keys[layer].index_select(0, index)
                self.values[layer] = self.values[layer].index_select(0, index)

    def reset(self) -> None:
        self.keys = [None] * self.n_layers
        self.values = [None] * self.n_layers
        self.length = 0

    def nbytes(self) -> int:
        """Bytes held: ``2 x layers x B x n_kv_heads x max_seq_len x d_head x bytes``."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


# %% nbgrader={"grade": true, "grade_id": "test_kv_cache", "locked": true, "points": 2, "schema_version": 3, "solution": false}
cache = StaticKVCache(n_layers=2, max_seq_len=10)
k1, v1 = torch.randn(2, 3, 4, 5), torch.randn(2, 3, 4, 5)  # (B=2, H_kv=3, T=4, D=5)
keys, values = cache.update(0, k1, v1, start_pos=0)
assert keys.shape == (2, 3, 4, 5) and values.shape == (2, 3, 4, 5), (
    f"after writing 4 positions, update should return (B, H_kv, 4, D) = (2, 3, 4, 5); "
    f"got {tuple(keys.shape)}")
assert torch.equal(keys, k1) and torch.equal(values, v1)
assert cache.keys[0].shape == (2, 3, 10, 5), (
    "the buffers should hold max_seq_len = 10 positions: (B, H_kv, max_seq_len, D)")
assert cache.keys[1] is None, "only layer 0 was written: layer 1 should still be empty"
k2, v2 = torch.randn(2, 3, 1, 5), torch.randn(2, 3, 1, 5)  # one new position
keys, values = cache.update(0, k2, v2, start_pos=4)
assert keys.shape == (2, 3, 5, 5), f"positions 0..4 should come back, got {tuple(keys.shape)}"
assert torch.equal(keys, torch.cat([k1, k2], dim=2)), (
    "the new key must go to position start_pos = 4, after the 4 stored ones")
assert torch.equal(values, torch.cat([v1, v2], dim=2))
keys, _ = cache.update(0, k2, v2, start_pos=1)  # rewind: overwrite position 1
assert keys.shape == (2, 3, 2, 5) and torch.equal(keys[:, :, 1:2], k2), (
    "update(start_pos=1) with T=1 writes position 1 and returns positions 0..1")
try:
    cache.update(0, torch.randn(3, 3, 1, 5), torch.randn(3, 3, 1, 5), start_pos=5)
except ValueError:
    pass
else:
    raise AssertionError("a cache that holds a batch of 2 must refuse a batch of 3 (ValueError)")
print("StaticKVCache: visible checks passed")

# %% [markdown]
# ## 2. Causal self-attention with RoPE, GQA and a cache
#
# The attention layer of the modern recipe, in the Hugging Face LLaMA naming:
# `q_proj: d -> n_heads * D`, `k_proj, v_proj: d -> n_kv_heads * D`, `o_proj: n_heads * D -> d`
# with `D = d_head`. Its forward pass, for `x` of shape `(B, T, d)` whose tokens sit at
# absolute positions `positions = [start_pos, ..., start_pos + T - 1]`:
#
# 1. Project and split heads: `q` `(B, n_heads, T, D)`, `k`, `v` `(B, n_kv_heads, T, D)`
#    (`view(B, T, heads, D).transpose(1, 2)`).
# 2. If the config uses RoPE (`config.position_type == "rope"`): rotate `q` and `k` (never
#    `v`) by their **absolute** positions: `apply_rope(q, positions, base=config.rope_base,
#    layout=config.rope_layout)`, same for `k`. A cached key keeps the rotation it received
#    at its own position, so the new token must be rotated at *its* position: rotating it
#    at position 0 instead (because it is "the first token of this call") is a classic bug
#    that the full forward pass never shows, only cached decoding does.
# 3. With a cache: `k, v = cache.update(self.layer_idx, k, v, start_pos)`, which now hold
#    every position `0 .. start_pos + T - 1`.
# 4. GQA: query head `h` reads KV head `h // n_rep` with `n_rep = n_heads / n_kv_heads`:
#    `repeat_kv(k, self.n_rep)` (consecutive query heads share a KV head).
# 5. The causal mask. With `T_k` keys and `T` queries, query `i` sits at absolute position
#    `(T_k - T) + i` and may see keys `j <= (T_k - T) + i`:
#    `causal_mask(T, T_k, offset=T_k - T)`. Without a cache `T_k = T` and this is the
#    usual lower triangle; for one new token it is a single row of `True`.
# 6. `scaled_dot_product_attention(q, k, v, mask)`, merge heads
#    (`transpose(1, 2).reshape(B, T, n_heads * D)`) and apply `o_proj`.
#
# The causal mask is what makes next-token training honest: without it, position `t` can
# read token `t + 1`, which is exactly the target it is asked to predict. The loss then
# falls to nearly zero during training, and the model is useless for generation, where the
# future does not exist yet.
#
# ### Exercise 2: `CausalSelfAttention.forward`

# %% nbgrader={"grade": false, "grade_id": "causal_self_attention", "locked": false, "schema_version": 3, "solution": true}
class CausalSelfAttention(nn.Module):
    """Causal self-attention with optional RoPE, grouped KV heads and a KV cache.

    Args:
        config: a ``GPTConfig``.
        layer_idx: which layer this is (the cache keeps one slot per layer).

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.n_heads, self.n_kv_heads, self.d_head = config.n_heads, config.kv_heads, config.d_head
        self.n_rep = self.n_heads // self.n_kv_heads  # query heads per KV head
        d, D, bias = config.d_model, self.d_head, config.use_bias
        self.q_proj = nn.Linear(d, self.n_heads * D, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv_heads * D, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv_heads * D, bias=bias)
        self.o_proj = nn.Linear(self.n_heads * D, d, bias=bias)

    def forward(
        self, x: Tensor, positions: Tensor, cache: StaticKVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        """
        Args:
            x: ``(B, T, d)``.
            positions: ``(T,)`` absolute positions of the ``T`` tokens
                (``start_pos .. start_pos + T - 1``).
            cache: a ``StaticKVCache`` or ``None``; with a cache, this call's keys and values
                are written at ``start_pos`` and the queries attend to every stored
                position up to their own.
            start_pos: absolute position of ``x[:, 0]``.

        Returns:
            ``(B, T, d)``.
        """
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        H, H_kv, D = self.n_heads, self.n_kv_heads, self.d_head
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        if self.config.position_type == "rope":
            # Rotate q and k by their *absolute* positions; cached keys keep theirs.
            rope = {"base": self.config.rope_base, "layout": self.config.rope_layout}
            q = apply_rope(q, positions, **rope)
            k = apply_rope(k, positions, **rope)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v, start_pos)  # (B, H_kv, start_pos + T, D)
        # GQA: query head h reads KV head h // n_rep (integer division, not modulo).
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, T_k, D)
        T_k = k.size(2)
        # Query i sits at absolute position (T_k - T) + i and sees keys j <= that position.
        mask = causal_mask(T, T_k, offset=T_k - T, device=x.device)  # (T, T_k)
        out = scaled_dot_product_attention(q, k, v, mask)  # softmax(q k^T / sqrt(D) + mask) v
        out = out.transpose(1, 2).reshape(B, T, H * D)  # concat heads
        return self.o_proj(out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention", "locked": true, "points": 3, "schema_version": 3, "solution": false}
cfg = GPTConfig.modern(d_model=32, n_layers=1, n_heads=4, n_kv_heads=2, max_seq_len=16)
attn = CausalSelfAttention(cfg, layer_idx=0).eval()
x = torch.randn(2, 7, 32)
with torch.no_grad():
    out = attn(x, torch.arange(7))
    assert out.shape == (2, 7, 32), f"expected (B, T, d) = (2, 7, 32), got {tuple(out.shape)}"
    # Causality: changing tokens 4.. must leave positions 0..3 untouched.
    x2 = x.clone()
    x2[:, 4:] = torch.randn(2, 3, 32)
    out2 = attn(x2, torch.arange(7))
    assert torch.allclose(out[:, :4], out2[:, :4], atol=1e-6), (
        "changing future tokens changed earlier outputs: the causal mask is missing or wrong")
    # A cache: 5 tokens at once, then 2 tokens one at a time = all 7 at once.
    cache = StaticKVCache(n_layers=1, max_seq_len=16)
    parts = [attn(x[:, :5], torch.arange(5), cache, 0)]
    for t in (5, 6):
        parts.append(attn(x[:, t:t + 1], torch.arange(t, t + 1), cache, t))
    cached = torch.cat(parts, dim=1)
    assert torch.allclose(cached, out, atol=1e-5), (
        f"cached attention differs from the full pass by {(cached - out).abs().max():.2e}. "
        "Rotate the new token at its absolute position, write the cache at start_pos, and "
        "use causal_mask(T, T_k, offset=T_k - T)")
print("CausalSelfAttention: visible checks passed")

# %% [markdown]
# ## 3. The GPT
#
# A block is given: pre-norm attention and MLP, each inside a residual connection. (With
# `norm_placement="post"` it becomes the original Post-LN block, for experiments.)

# %% nbgrader={"grade": false, "grade_id": "block", "locked": true, "schema_version": 3, "solution": false}
def _make_norm(config: GPTConfig) -> nn.Module:
    if config.norm_type == "layernorm":
        return LayerNorm(config.d_model, eps=config.norm_eps, bias=config.use_bias)
    return RMSNorm(config.d_model, eps=config.norm_eps)


class Block(nn.Module):
    """One Transformer block: ``x = x + Attn(ln_1(x)); x = x + MLP(ln_2(x))`` (pre-norm)."""

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


# %% [markdown]
# ### Weight tying, and which transpose
#
# The token embedding $E$ is `(V, d)`: row $v$ is token $v$'s vector. The output head maps
# `d -> V`, so its matrix $W_U$ is `(d, V)`, and **tying** sets $W_U = E^\top$
# (arXiv 1608.05859, 1611.01462): the logit of token $v$ is the dot product of the final
# hidden state with $v$'s own embedding, $\text{logit}_v = h \cdot E_v$. GPT-2 small saves
# $50257 \times 768 = 38.6$M parameters this way.
#
# In PyTorch, `nn.Linear(d, V)` stores its weight as `(V, d)` and computes
# `h @ weight.T`. Its weight therefore already *is* $E$'s shape, and tying is
# `lm_head.weight = wte.weight`: the **same Parameter object**, not a transposed copy. Then
# `lm_head(h) = h @ E^T`, the gradient of both uses accumulates in one tensor, and a
# checkpoint needs to store $E$ only once. (Multiplying by `E` itself, `h @ E`, is the
# wrong transpose: it only even runs when `d == V`.)
#
# ### The forward pass
#
# `forward(idx, targets=None, cache=None, start_pos=0)`:
#
# 1. `positions = [start_pos, ..., start_pos + T - 1]` (`torch.arange`): absolute positions.
# 2. `x = wte(idx)`; the classic recipe adds `wpe(positions)` (when `self.wpe` is not
#    `None`); then `self.drop`.
# 3. Every block: `x = block(x, positions, cache, start_pos)`.
# 4. `logits = self.unembed(self.ln_f(x))`.
# 5. With a cache, record how far it is filled: `cache.length = start_pos + T`.
# 6. With `targets` `(B, T)`: `loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(),
#    ignore_index=-100)`, the mean of $-\log p(\text{target})$ over positions;
#    otherwise `loss = None`. Return `(logits, loss)`.
#
# ### Exercise 3: `GPT` (tying, `unembed`, `forward`)

# %% nbgrader={"grade": false, "grade_id": "gpt", "locked": false, "schema_version": 3, "solution": true}
class GPT(nn.Module):
    """Decoder-only language model.

    Module names: ``wte`` (token embedding ``E``, ``(V, d)``), ``wpe`` (learned positions,
    classic recipe only, else ``None``), ``blocks``, ``ln_f`` (final norm), ``lm_head``.
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
            # Tie the output head to the embedding (W_U = E^T); see the text above.
            ### BEGIN SOLUTION
            self.lm_head.weight = self.wte.weight
            ### END SOLUTION
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 initialisation: N(0, 0.02) weights, zero biases, unit norm gains, and
        N(0, 0.02 / sqrt(2L)) for the projections that write into the residual stream."""
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
        """``(B, T, d)`` -> ``(B, T, V)`` logits ``h @ W_U``; ``W_U = E^T`` when tied."""
        ### BEGIN SOLUTION
        return self.lm_head(h)  # h @ lm_head.weight^T = h @ E^T
        ### END SOLUTION

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
            cache: a ``StaticKVCache`` from :meth:`new_cache` (or ``None``).
            start_pos: absolute position of ``idx[:, 0]``.

        Returns:
            ``(logits (B, T, V), loss)``; ``loss`` is the mean cross-entropy over the
            targets that are not ``-100``, or ``None`` without targets.
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
        ### BEGIN SOLUTION
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
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_gpt_forward", "locked": true, "points": 4, "schema_version": 3, "solution": false}
torch.manual_seed(0)
cfg = GPTConfig.modern(d_model=32, n_layers=2, n_heads=4, max_seq_len=32)
model = GPT(cfg).eval()
assert model.lm_head.weight is model.wte.weight, (
    "tie the head to the embedding: lm_head.weight must be the same Parameter as wte.weight")
idx, targets = torch.randint(0, 256, (2, 10)), torch.randint(0, 256, (2, 10))
with torch.no_grad():
    logits, loss = model(idx, targets)
    assert logits.shape == (2, 10, 256), f"expected (B, T, V) = (2, 10, 256), got {logits.shape}"
    expected = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
    assert loss is not None and torch.allclose(loss, expected), "loss: mean cross-entropy"
    assert abs(loss.item() - math.log(256)) < 0.2, (
        f"an untrained model on random targets should score about ln 256 = 5.545, got "
        f"{loss.item():.3f}")
    # Logits at position t may not depend on tokens after t.
    idx2 = idx.clone()
    idx2[:, 6:] = torch.randint(0, 256, (2, 4))
    assert torch.allclose(model(idx2)[0][:, :6], logits[:, :6], atol=1e-5), (
        "changing future tokens changed earlier logits: the model can see the future")
    # Prefill 6 tokens, then feed 4 tokens one at a time: the same logits as one full pass.
    cache = model.new_cache()
    steps = [model(idx[:, :6], cache=cache, start_pos=0)[0]]
    for t in range(6, 10):
        steps.append(model(idx[:, t:t + 1], cache=cache, start_pos=t)[0])
    cached = torch.cat(steps, dim=1)
    assert cache.length == 10, f"cache.length should be 10 after 10 positions, got {cache.length}"
    assert torch.allclose(cached, logits, atol=1e-4), (
        f"cached logits differ from the full pass by {(cached - logits).abs().max():.2e}: are "
        "the new tokens' positions start_pos + i (not i)?")
    # The classic recipe builds too (learned positions, LayerNorm, GELU, biases).
    classic = GPT(GPTConfig.classic(d_model=32, n_layers=1, n_heads=4, max_seq_len=32)).eval()
    assert classic(idx)[0].shape == (2, 10, 256)
print(f"GPT: visible checks passed ({count_parameters(model):,} parameters)")

# %% [markdown]
# ## 4. From logits to tokens: temperature, top-k, top-p
#
# At each step the model gives logits $z$ over the vocabulary. Sampling from
# $\mathrm{softmax}(z)$ directly wanders into the long tail of unlikely tokens; always taking
# the argmax (greedy) is repetitive. Three knobs reshape the distribution, applied in this
# order (as Hugging Face's logits warpers do):
#
# 1. **Temperature** $t > 0$: sample from $\mathrm{softmax}(z / t)$. $t < 1$ sharpens,
#    $t > 1$ flattens. As $t \to 0$ the distribution tends to a one-hot on the argmax
#    (greedy), as $t \to \infty$ to uniform. $t = 0$ itself is not a temperature (division by
#    zero): refuse it with `ValueError` and use greedy decoding instead.
# 2. **Top-k** (arXiv 1805.04833): keep the $k$ largest logits, set the others to $-\infty$.
#    Exactly $k$ survive, even with ties: among equal logits keep the lower token ids (a
#    *stable* descending sort does this). $k \ge V$ changes nothing.
# 3. **Top-p**, nucleus sampling (arXiv 1904.09751): keep the **smallest** set of most
#    probable tokens whose probabilities sum to at least $p$. Sort by probability; the token
#    at rank $r$ is kept iff the mass of the tokens ranked *before* it is still $< p$. The
#    top token has nothing before it, so it is always kept: the set is **never empty**,
#    however small $p$ is. (The tempting `cumsum(probs) <= p` drops the top token whenever
#    its own probability exceeds $p$, and then there is nothing left to sample from.)
#    $p = 1$ keeps everything.
#
# The helper `_sort_desc` sorts descending and keeps ties in ascending token order.
#
# ### Exercise 4: the samplers

# %% nbgrader={"grade": false, "grade_id": "sampling", "locked": false, "schema_version": 3, "solution": true}
def _sort_desc(logits: Tensor) -> tuple[Tensor, Tensor]:
    """Descending sort along the last axis; equal values keep ascending token ids."""
    return torch.sort(logits, dim=-1, descending=True, stable=True)


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """``logits / t``; raise ``ValueError`` unless ``t`` is a finite number ``> 0``."""
    ### BEGIN SOLUTION
    if not temperature > 0 or math.isinf(temperature):
        raise ValueError(
            f"temperature must be a finite number > 0, got {temperature}; use greedy "
            "decoding (temperature=0 in sample_next_token/generate) for the t -> 0 limit"
        )
    return logits / temperature  # softmax(z / t)
    ### END SOLUTION


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep exactly the ``k`` largest logits of each row; set the others to ``-inf``.

    Ties: lower token ids first (use ``_sort_desc``). ``k >= V``: return ``logits``
    unchanged. ``k`` must be an ``int >= 1`` (else ``ValueError``).

    Shapes: ``(..., V)`` -> ``(..., V)``. Hints: ``torch.zeros_like(..., dtype=torch.bool)``,
    ``Tensor.scatter_``, ``Tensor.masked_fill``.
    """
    ### BEGIN SOLUTION
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    if k >= logits.size(-1):
        return logits
    _, order = _sort_desc(logits)
    keep = torch.zeros_like(logits, dtype=torch.bool)
    keep.scatter_(-1, order[..., :k], True)  # the first k of the sorted order
    return logits.masked_fill(~keep, float("-inf"))
    ### END SOLUTION


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest prefix of most probable tokens with mass ``>= p``.

    The token at rank ``r`` is kept iff the probability mass of the tokens ranked before it
    is ``< p``; the top token is therefore always kept. ``p`` must be in ``(0, 1]``
    (else ``ValueError``); ``p = 1`` returns ``logits`` unchanged.

    Shapes: ``(..., V)`` -> ``(..., V)``. Hints: ``_sort_desc``, ``torch.softmax``,
    ``torch.cumsum``, and ``scatter`` to bring the sorted decision back to token order.
    """
    ### BEGIN SOLUTION
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
    ### END SOLUTION


# %% [markdown]
# Given: the three filters in order, and one draw per row. `temperature=0` means greedy.

# %% nbgrader={"grade": false, "grade_id": "sampling_given", "locked": true, "schema_version": 3, "solution": false}
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
    """One token per row of ``(B, V)`` logits -> ``(B,)`` ids; ``temperature=0``: argmax."""
    if logits.dim() != 2:
        raise ValueError(f"logits must have shape (B, V), got {tuple(logits.shape)}")
    if temperature == 0:
        return logits.argmax(dim=-1)  # first maximal index on ties
    probs = torch.softmax(filter_logits(logits.float(), temperature, top_k, top_p), dim=-1)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)


# %% nbgrader={"grade": true, "grade_id": "test_sampling", "locked": true, "points": 4, "schema_version": 3, "solution": false}
z = torch.tensor([[2.0, 1.0, 0.0, -1.0]])
assert torch.allclose(apply_temperature(z, 2.0), z / 2), "temperature: logits / t"
sharp = torch.softmax(apply_temperature(z, 0.01), dim=-1)
assert sharp[0, 0] > 0.999, "as t -> 0 the distribution should tend to the argmax"
for bad in (0.0, -1.0):
    try:
        apply_temperature(z, bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"apply_temperature(z, {bad}) should raise ValueError")

kept = top_k_filter(z, 2)
assert torch.equal(torch.isfinite(kept), torch.tensor([[True, True, False, False]])), (
    f"top_k_filter(z, 2) should keep the 2 largest logits, got {kept.tolist()}")
assert torch.equal(kept[0, :2], z[0, :2]), "kept logits must be unchanged"
ties = torch.zeros(1, 6)  # all equal: exactly k must survive, the lowest ids
assert torch.isfinite(top_k_filter(ties, 3)).sum() == 3, "with ties, still exactly k kept"
assert torch.equal(top_k_filter(z, 10), z), "k >= V: nothing to filter"

# probabilities of z: about [0.644, 0.237, 0.087, 0.032]
kept = torch.isfinite(top_p_filter(z, 0.5))
assert kept.tolist() == [[True, False, False, False]], f"top_p_filter(z, 0.5) kept {kept.tolist()}"
kept = torch.isfinite(top_p_filter(z, 0.7))
assert kept.tolist() == [[True, True, False, False]], (
    "p = 0.7: the top token alone (0.644) is not enough, the top two (0.881) are")
tiny = top_p_filter(z, 1e-4)
assert torch.isfinite(tiny).sum() == 1 and torch.isfinite(tiny[0, 0]), (
    "top-p must never be empty: with a tiny p, the top token must still be kept")
assert torch.equal(top_p_filter(z, 1.0), z), "p = 1 keeps everything"
draws = sample_next_token(z.expand(2000, 4), temperature=1.0, top_k=3, top_p=0.9,
                          generator=torch.Generator().manual_seed(0))
assert set(draws.tolist()) <= {0, 1, 2}, "sampled a token the filters removed"
print("samplers: visible checks passed")

# %% [markdown]
# Try it: how your temperature, top-k and top-p reshape one distribution (the same logits
# as above, plus a long tail). Push `top-p` towards 0: the top token always survives.

# %% tags=["skip-grading"]
sampling_playground(logits=torch.cat([z[0], torch.linspace(-2, -6, 20)]), fns={
    "apply_temperature": apply_temperature, "top_k_filter": top_k_filter,
    "top_p_filter": top_p_filter})

# %% [markdown]
# ## 5. Decoding with the KV cache
#
# `generate(model, idx, max_new_tokens, ...)` appends `max_new_tokens` tokens to the prompt
# `idx` `(B, T)`. With `use_cache=True`:
#
# 1. **Prefill**: run the whole prompt once, `model(idx, cache=cache, start_pos=0)`; the
#    cache now holds positions `0 .. T-1`, and the logits at the last position give the first
#    new token.
# 2. **Decode**: for each new token: sample it from `logits[:, -1]` with
#    `sample_next_token`, append it to the sequence, and (unless it was the last one) run
#    the model on that **one** token at its absolute position
#    `start_pos = seq.size(1) - 1`, to get the next logits.
#
# With `use_cache=False` every step re-runs the whole sequence, `model(seq)`. Both paths
# must produce **the same tokens**: same logits up to float rounding, same random draws.
#
# End of sequence: with `eos_token` given, a row that has produced it keeps producing it
# (padding), and the loop stops early once every row has. A boolean `finished` per row does
# it: `next_token.masked_fill(finished, eos_token)`, then `finished |= next_token == eos_token`.
#
# ### Exercise 5: `generate`

# %% nbgrader={"grade": false, "grade_id": "generate", "locked": false, "schema_version": 3, "solution": true}
def _check_generate_args(model: nn.Module, idx: Tensor, max_new_tokens: int) -> None:
    if idx.dim() != 2 or idx.size(1) == 0:
        raise ValueError(f"idx must have shape (B, T) with T >= 1, got {tuple(idx.shape)}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    limit = model.config.max_seq_len
    if idx.size(1) + max_new_tokens > limit:
        raise ValueError(
            f"max_new_tokens: prompt ({idx.size(1)}) + {max_new_tokens} new tokens exceed "
            f"the model's max_seq_len={limit}"
        )


@torch.no_grad()
def generate(
    model: GPT,
    idx: Tensor,
    max_new_tokens: int,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
    eos_token: int | None = None,
) -> Tensor:
    """Autoregressive decoding by sampling (``temperature=0``: greedy).

    Args:
        model: a ``GPT`` (put in eval mode for the call; its mode is restored after).
        idx: ``(B, T)`` prompt token ids.
        max_new_tokens: tokens to append; prompt + new must fit ``max_seq_len``.
        temperature, top_k, top_p, generator: passed to ``sample_next_token``.
        use_cache: prefill once, then one token per step with a ``StaticKVCache``; or re-run
            the whole sequence every step. Both give the same tokens.
        eos_token: a row that produced it keeps producing it; stop early once every row has.

    Returns:
        ``(B, T + n)``, ``n <= max_new_tokens`` (smaller only if every row ended with EOS).
    """
    _check_generate_args(model, idx, max_new_tokens)
    was_training = model.training
    model.eval()
    try:
        ### BEGIN SOLUTION
        cache = model.new_cache() if use_cache else None
        seq = idx
        finished = torch.zeros(idx.size(0), dtype=torch.bool, device=idx.device)
        if max_new_tokens > 0 and use_cache:
            logits, _ = model(idx, cache=cache, start_pos=0)  # prefill: the whole prompt once
        for step in range(max_new_tokens):
            if not use_cache:
                logits, _ = model(seq)  # the whole sequence, every step
            next_token = sample_next_token(logits[:, -1], temperature, top_k, top_p, generator)
            if eos_token is not None:
                next_token = next_token.masked_fill(finished, eos_token)
                finished = finished | (next_token == eos_token)
            seq = torch.cat([seq, next_token[:, None]], dim=1)
            if eos_token is not None and bool(finished.all()):
                break
            if use_cache and step + 1 < max_new_tokens:
                pos = seq.size(1) - 1  # absolute position of the token just added
                logits, _ = model(next_token[:, None], cache=cache, start_pos=pos)
        return seq
        ### END SOLUTION
    finally:
        model.train(was_training)


# %% nbgrader={"grade": true, "grade_id": "test_generate", "locked": true, "points": 3, "schema_version": 3, "solution": false}
torch.manual_seed(1)
model = GPT(GPTConfig.modern(d_model=32, n_layers=2, n_heads=4, max_seq_len=48, init_std=0.2))
prompt = torch.randint(0, 256, (2, 5))
fast = generate(model, prompt, 20, temperature=0)
slow = generate(model, prompt, 20, temperature=0, use_cache=False)
assert fast.shape == (2, 25), f"expected (B, T + n) = (2, 25), got {tuple(fast.shape)}"
assert torch.equal(fast[:, :5], prompt), "the output must start with the prompt"
assert torch.equal(fast, slow), (
    "cached and uncached greedy decoding disagree: check the positions (start_pos) of "
    "the decoding steps")
a = generate(model, prompt, 20, top_k=20, generator=torch.Generator().manual_seed(3))
b = generate(model, prompt, 20, top_k=20, generator=torch.Generator().manual_seed(3),
             use_cache=False)
assert torch.equal(a, b), "with the same generator, cached and uncached sampling must agree"
print("generate: visible checks passed")

# %% [markdown]
# ## 6. One training step
#
# Training minimises the mean next-token cross-entropy with AdamW (arXiv 1711.05101; the
# toolkit's `configure_optimizer` decays weight matrices and embeddings, not biases and norm
# gains), a learning rate that warms up linearly and then decays along a cosine
# (`lr_schedule`), and **gradient clipping** (arXiv 1211.5063): if the global gradient norm
# $\|g\| = \sqrt{\sum_p \|g_p\|^2}$ exceeds $c$, all gradients are scaled by $c / \|g\|$,
# so one unlucky batch cannot throw the weights far.
#
# ### Exercise 6: `train_step`
#
# One step: clear the old gradients (`optimizer.zero_grad(set_to_none=True)`; PyTorch
# *accumulates* into `.grad` otherwise), forward `model(x, y)` for the loss, `backward`,
# clip (`torch.nn.utils.clip_grad_norm_` returns the norm measured *before* clipping) or,
# with clipping off, measure the norm with the toolkit's `grad_norm(model)`, then
# `optimizer.step()`. Leave the clipped gradients in `.grad`.

# %% nbgrader={"grade": false, "grade_id": "train_step", "locked": false, "schema_version": 3, "solution": true}
def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    grad_clip: float | None = 1.0,
) -> tuple[float, float]:
    """One optimisation step on a batch ``x, y`` ``(B, T)``.

    Args:
        model: anything with ``model(x, y) -> (logits, loss)``.
        optimizer: e.g. from ``configure_optimizer``.
        grad_clip: clip the global gradient norm to this value; ``None`` or ``0``: no clipping.

    Returns:
        ``(loss, grad_norm)`` as Python floats, the norm measured *before* clipping.
    """
    ### BEGIN SOLUTION
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    if grad_clip:
        # g <- g * min(1, c / ||g||); returns ||g|| before clipping
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
    else:
        norm = grad_norm(model)
    optimizer.step()
    return float(loss.detach()), norm
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_train_step", "locked": true, "points": 2, "schema_version": 3, "solution": false}
torch.manual_seed(0)
tiny = GPT(GPTConfig.modern(d_model=32, n_layers=1, n_heads=4, max_seq_len=16))
opt = torch.optim.AdamW(tiny.parameters(), lr=1e-2)
xb = torch.randint(0, 256, (4, 16))
yb = torch.roll(xb, -1, dims=1)
losses = [train_step(tiny, opt, xb, yb)[0] for _ in range(30)]
assert all(isinstance(v, float) for v in losses), "train_step should return Python floats"
assert losses[-1] < 0.7 * losses[0], (
    f"the loss should fall when one batch is repeated: {losses[0]:.3f} -> {losses[-1]:.3f}")
loss, norm = train_step(tiny, opt, xb, yb, grad_clip=1e-3)
clipped = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in tiny.parameters()))
assert norm > 1e-3 and clipped <= 1e-3 * 1.01, (
    f"with grad_clip=1e-3, return the norm before clipping ({norm:.3g}) and leave clipped "
    f"gradients (norm {clipped:.3g}) in .grad")
print("train_step: visible checks passed")

# %% [markdown]
# ## 7. Train your model and hand in the checkpoint
#
# The corpus is the source code of a fixed list of pure-Python standard-library modules
# (`toolkit.data.STDLIB_CORPUS_FILES`, about 330 kB), tokenised as UTF-8 **bytes**
# (vocabulary 256). The last 10% is the held-out validation split; the grader evaluates your
# checkpoint on windows of that split, so never train on it.
#
# **How part 7 is scored.** The grader loads `capstone.safetensors` into your `GPT` class,
# runs it on 32 fixed validation windows of 128 bytes (`validation_windows` below), and
# computes the mean next-byte cross-entropy $L$ (nats per byte) from the logits your model
# returns. Points scale linearly between two documented levels, in steps of 10%:
#
# * **baseline** $L_0$, 0 points: the loss of the best model that ignores context
#   entirely, the byte frequencies of the training split (add-one smoothed,
#   `context_free_loss` below): about **3.15** nats/byte on CPython 3.11. For comparison,
#   a uniform guess scores $\ln 256 = 5.545$ and an untrained model about 5.2 to 5.3.
# * **target** $L_1 = 2.5$, full points: the model must use context. The default run
#   below gets well under it (about 1.6), and so does a model a seventh of its size
#   trained for 300 steps at a peak learning rate of $10^{-2}$ (about 2.2).
#
# Checks on the checkpoint, where each failure costs all of part 7's points:
#
# * the model must be **causal**: the logits at position $t$ may not change when bytes
#   after $t$ change (a model that reads the next byte "predicts" it perfectly);
# * a loss below **0.7** nats/byte is refused as implausible for a model of this size
#   trained on this corpus (that only happens when the model sees the future or was trained
#   on the validation text);
# * `vocab_size` must be 256, `max_seq_len` at least 128, and the model at most 8M
#   parameters (the grader runs it on a CPU).
#
# The training cells below are not run while grading: run them yourself, once, top to
# bottom (a GPU is used when there is one), then hand in the file they save.

# %%
corpus = load_corpus()  # bytes of the standard-library corpus, split train/val
tokenizer = corpus.tokenizer
print(f"{len(corpus.train):,} training bytes, {len(corpus.val):,} validation bytes")
print(repr(corpus.text[:200]))


# %% nbgrader={"grade": false, "grade_id": "checkpoint_helpers", "locked": true, "schema_version": 3, "solution": false}
CHECKPOINT = "capstone.safetensors"
TARGET_LOSS, IMPLAUSIBLE_LOSS = 2.5, 0.7


def validation_windows(val: Tensor, n: int = 32, block: int = 128) -> tuple[Tensor, Tensor]:
    """The grader's fixed windows: ``n`` evenly spaced windows of ``block`` bytes of ``val``.

    Returns ``x, y`` ``(n, block)`` with ``y`` the next byte of every position of ``x``.
    """
    starts = torch.linspace(0, len(val) - block - 1, n).round().long()
    offsets = torch.arange(block)
    return val[starts[:, None] + offsets], val[starts[:, None] + offsets + 1]


def load_capstone_checkpoint(path: str = CHECKPOINT) -> GPT:
    """Build *your* ``GPT`` from a ``save_checkpoint`` file, as the grader does (eval mode)."""
    if not os.path.isfile(path):
        raise NotReadyError(f"{path} not found: run the training section, which saves it")
    with safe_open(path, framework="pt", device="cpu") as f:
        config = GPTConfig.from_dict(json.loads(f.metadata()["gpt_config"]))
        state = {name: f.get_tensor(name) for name in f.keys()}
    model = GPT(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{path}: missing {missing}, unexpected {unexpected}")
    return model.eval()


def context_free_loss(train: Tensor, y: Tensor) -> float:
    """Cross-entropy of ``y`` under the add-one smoothed byte frequencies of ``train``."""
    counts = torch.bincount(train, minlength=256).double() + 1.0
    return float(-(counts / counts.sum()).log()[y.flatten()].mean())


def points_fraction(loss: float, baseline: float) -> float:
    """Part 7's share of the points for a validation loss, as the grader computes it."""
    if loss < IMPLAUSIBLE_LOSS:
        return 0.0
    linear = (baseline - loss) / (baseline - TARGET_LOSS)
    return math.floor(10 * min(max(linear, 0.0), 1.0) + 1e-9) / 10


# %% [markdown]
# ### Training (not run while grading)
#
# The loop uses **your** `train_step`. The live plot shows the training loss (line) and the
# validation loss (dots) against the dashed level $\ln 256$. The default model is the modern
# recipe with $d = 128$, 4 layers, 4 query heads sharing 2 KV heads, trained for 600 steps of
# 16 windows of 128 bytes.
#
# The save cell writes `capstone-run.json` beside the checkpoint: the settings in `RUN` that
# trained it. Hand it in with the checkpoint. Your course may rank the class's checkpoints
# on text that nobody trained on, and retrain the best from their `RUN` to see that each
# checkpoint is what its settings produce; change `RUN`, not the loop, when you experiment.

# %% tags=["skip-grading"]
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
STEPS = 600


def train_model(model, steps, *, batch_size=16, block_size=128, max_lr=3e-3, eval_every=50,
                seed=0, device=DEVICE, callback=None) -> TrainHistory:
    """Warm-up + cosine AdamW training with your train_step, in place; returns the history."""
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)  # which windows are drawn
    model.to(device).train()
    optimizer = configure_optimizer(model, max_lr, weight_decay=0.1)
    history = TrainHistory()
    for step in range(steps):
        lr = lr_schedule(step, steps // 10, steps, max_lr, max_lr / 10)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(corpus.train, batch_size, block_size, generator)
        loss, norm = train_step(model, optimizer, x.to(device), y.to(device), grad_clip=1.0)
        history.step.append(step)
        history.train_loss.append(loss)
        history.lr.append(lr)
        history.grad_norm.append(norm)
        history.tokens_seen += x.numel()
        if (step + 1) % eval_every == 0 or step + 1 == steps:
            history.val_step.append(step)
            history.val_loss.append(estimate_loss(model, corpus.val, batch_size, block_size, 8))
        if callback is not None:
            callback(step, history)
    model.eval()
    return history


# What this run is made of, handed in beside the checkpoint (capstone-run.json): the class
# leaderboard may retrain it from exactly these settings to check the checkpoint. Choose a
# pseudonym to appear under on the board (empty: a number).
RUN = dict(steps=STEPS, batch_size=16, block_size=128, max_lr=3e-3, seed=0, init_seed=0,
           pseudonym="")
torch.manual_seed(RUN["init_seed"])
config = GPTConfig.modern(vocab_size=256, d_model=128, n_layers=4, n_heads=4, max_seq_len=128)
my_model = GPT(config)
print(f"{count_parameters(my_model):,} parameters, training on {DEVICE}")
live = LiveLossPlot(every=10, vocab_size=256, title="modern recipe")
display(live.widget)
history = train_model(my_model, RUN["steps"], batch_size=RUN["batch_size"],
                      block_size=RUN["block_size"], max_lr=RUN["max_lr"], seed=RUN["seed"],
                      callback=live)
print(f"final validation loss {history.val_loss[-1]:.3f} nats/byte")

# %% tags=["skip-grading"]
save_checkpoint(my_model.cpu(), config, CHECKPOINT)
with open("capstone-run.json", "w") as f:
    json.dump(RUN, f)
print(f"saved {CHECKPOINT} and capstone-run.json: hand both in next to this notebook")

# %% nbgrader={"grade": true, "grade_id": "test_checkpoint", "locked": true, "points": 4, "schema_version": 3, "solution": false}
reloaded = load_capstone_checkpoint(CHECKPOINT)
cfg = reloaded.config
assert cfg.vocab_size == 256 and cfg.max_seq_len >= 128, (
    "the checkpoint needs vocab_size 256 and max_seq_len >= 128")
assert count_parameters(reloaded) <= 8_000_000, "keep the model at 8M parameters or fewer"
x_val, y_val = validation_windows(corpus.val)
with torch.no_grad():
    logits, _ = reloaded(x_val)
    x_changed = x_val.clone()
    x_changed[:, 64:] = torch.randint(0, 256, (x_val.size(0), 64))
    changed, _ = reloaded(x_changed)
assert torch.allclose(logits[:, :64], changed[:, :64], atol=1e-4), (
    "your model's logits at position t depend on later bytes: it is not causal")
val_loss = F.cross_entropy(logits.double().flatten(0, 1), y_val.flatten()).item()
baseline = context_free_loss(corpus.train, y_val)
print(f"validation loss {val_loss:.3f} nats/byte (baseline {baseline:.3f}, target "
      f"{TARGET_LOSS}): {points_fraction(val_loss, baseline):.0%} of part 7's points")
assert val_loss >= IMPLAUSIBLE_LOSS, "a loss this low means the model sees the future"

# %% [markdown]
# ## 8. Play with your model (not run while grading)
#
# The playground shows the next-byte distribution after a prompt of your choice, reshaped
# by temperature, top-k and top-p. Below it, your `generate` continues a prompt. Watch
# what low temperature does (repetition) and what high temperature does (noise).

# %% tags=["skip-grading"]
sampling_playground(my_model.cpu(), tokenizer, prompt="def ", fns={
    "apply_temperature": apply_temperature, "top_k_filter": top_k_filter,
    "top_p_filter": top_p_filter})

# %% tags=["skip-grading"]
prompt_ids = torch.tensor([tokenizer.encode("def ")])
for temperature in (0.3, 0.8, 1.2):
    out = generate(my_model.cpu(), prompt_ids, 120, temperature=temperature, top_p=0.95,
                   generator=torch.Generator().manual_seed(0))
    print(f"--- temperature {temperature} ---")
    print(tokenizer.decode(out[0]))

# %% [markdown]
# ## 9. Classic versus modern, at equal parameters and steps (optional, not graded)
#
# `parameter_matched_configs` builds a classic (GPT-2) and a modern (LLaMA-like) config
# with the same width, depth and heads, and gives the modern one's parameter savings (no
# position table, no biases, fewer KV heads) back to its SwiGLU hidden size, so both have
# about the same number of parameters (counted on your `GPT`, built on PyTorch's `meta`
# device so that no weights are allocated). Training both for the same steps on the same
# batches is a fair, if small, comparison. At this scale a few hundred steps say little
# about which recipe wins at scale; look at the curves and the text, and try other settings.
# This section trains two more models of 300 steps each (about as long as section 7).

# %% tags=["skip-grading"]
COMPARE_STEPS = 300
classic_cfg, modern_cfg = parameter_matched_configs(d_model=128, n_layers=4, n_heads=4,
                                                    max_seq_len=128, model_class=GPT)
runs, histories = {}, {}
for label, cfg in (("classic", classic_cfg), ("modern", modern_cfg)):
    torch.manual_seed(0)
    runs[label] = GPT(cfg)
    live = LiveLossPlot(every=20, vocab_size=256, title=label)
    display(live.widget)
    histories[label] = train_model(runs[label], COMPARE_STEPS, callback=live)
    runs[label].cpu()
    print(f"{label}: {count_parameters(runs[label]):,} parameters, "
          f"validation loss {histories[label].val_loss[-1]:.3f}")
plot_loss_curves(histories, uniform_loss=math.log(256), title="classic vs modern")

# %% tags=["skip-grading"]
side_by_side_generation(runs, tokenizer, prompt="def ", max_new_tokens=120,
                        fns={"generate": generate})

# %% [markdown]
# ## 10. Question: why did decoder-only models win?
#
# Nearly every large language model since GPT-3 is decoder-only, like the one you just
# trained, although BERT-style encoders and T5-style encoder-decoders came first and are
# still in use. Give **three distinct reasons**, each argued from something you built or
# measured in this course (the training objective, the KV cache, what a prompt does, ...),
# and name **one job** for which you would still choose an encoder, with the reason.

# %% [markdown] nbgrader={"grade": true, "grade_id": "decoder_only_question", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# * **Every token is a target.** Next-token prediction turns each position of every text
#   into a training example: a window of $T$ tokens gives $T$ predictions, with no labels
#   and no corruption step. Masked-LM learns from the 15% it masks (Assignment 05), so
#   at equal compute a decoder gets several times more training signal, and the
#   objective is generation itself rather than a proxy for it.
# * **One interface for every task.** For a causal model any task is a continuation of
#   text: a prompt describes the task, and from GPT-3 (arXiv 2005.14165) on, a few
#   examples in the prompt replace a fine-tuned head (in-context learning); instruction
#   tuning and chat build on the same interface. An encoder needs a task head and
#   fine-tuning per task, an encoder-decoder a fixed split into input and output.
# * **Generation is cheap and the design is simple.** One stack and one causal mask; the
#   KV cache (Exercise 1) makes each new token cost one row of attention over the cached
#   keys, and a prompt and its answer share that cache. One homogeneous architecture
#   scales predictably with parameters and data (the scaling laws of Lecture 07), and
#   the kernels and serving systems were optimised for it.
# * **Still an encoder** for classification, tagging, retrieval embeddings or
#   reranking, where the whole input is known, nothing is generated and every token
#   should see both sides: a small bidirectional encoder gives better representations
#   per parameter and one forward pass per input.
#
# Marking: 1 point per distinct reason argued from its mechanism (at most 3); 0.5 is
# taken off a full answer that names no job for an encoder or gives no reason for it.
# ### END SOLUTION

# %% [markdown]
# ## What to hand in
#
# This notebook **and** `capstone.safetensors`, in the same folder. Before you submit,
# restart the kernel and run all cells. If your checkpoint is already saved, you may
# instead run every cell down to the part 7 check, skipping the two that train and save
# (sections 8 and 9 need the model they make, so stop there). Either way the visible
# checks should pass, and the part 7 cell prints the share of its points your checkpoint
# earns.
