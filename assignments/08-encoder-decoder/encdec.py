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
# # Assignment 08: the third family, a T5-style encoder-decoder
#
# BERT reads (05), GPT writes (07); T5 *reads, then writes* (arXiv 1910.10683). An
# **encoder** reads the whole input with bidirectional attention and leaves a memory, one
# vector per input token; a **decoder** writes the output one token at a time with causal
# self-attention, and *cross-attention* over that memory at every layer. You build T5's
# version of it, train it on a small text-to-text task the course makes itself, and decode
# it greedily and with beam search.
#
# | part | you write | points |
# |---|---|---|
# | 1 | `t5_relative_position_bucket`: offsets to buckets, both directions | 3 |
# | 2 | `T5RelativePositionBias.forward`: a learned bias per bucket and head | 2 |
# | 3 | `T5Attention.forward`: T5's self- and cross-attention, with the caches | 4 |
# | 4 | `shift_right` and `EncoderDecoder`: encode, decode, teacher forcing | 4 |
# | 5 | `greedy_decode`: cached greedy decoding with end-of-sequence | 2 |
# | 6 | `beam_search_one`: beam search with Hugging Face's length penalty | 4 |
# | 7 | your trained checkpoint `encdec.safetensors` (exact-match accuracy) | 4 |
# | 9 | a short written answer: what does the encoder-decoder buy? | 3 (read by a person) |
#
# **How this notebook is graded.** The test cell after each exercise runs quick visible
# checks. The grader runs its own hidden checks on other inputs, with weights of its own
# loaded into *your* classes, and compares with a reference that equals Hugging Face's
# `T5ForConditionalGeneration`. It does **not** run cells marked "not run while grading"
# (training, widgets). You hand in `encdec.safetensors`, which the training section writes;
# the grader loads it into your `EncoderDecoder` and measures how many held-out numbers it
# converts exactly (part 7).
#
# While the hidden checks run, the toolkit's own versions of every exercise (everything in
# `toolkit.seq2seq` that attends or decodes, and `toolkit.position`'s T5 bias) and
# PyTorch's fused attention are switched off. The pieces imported below are yours to use.
#
# **Time.** Training the default model takes under a minute on a laptop CPU (about 20 s
# of one core's time); everything else runs in seconds.
#
# **Conventions.** Token ids are `(B, S)` for inputs, `(B, T)` for targets; streams
# `(B, S or T, d_model)`; attention tensors `(B, H, T, d_head)`; logits `(B, T, V)`. Masks
# are `bool` with `True` = may attend. Id 0 is `<pad>` (padding, and the decoder's start
# token, as in T5), id 1 is `</s>` (end of sequence). Inputs are padded at the end with 0;
# targets (labels) are padded with `-100`, the index PyTorch's cross-entropy ignores.

# %% nbgrader={"grade": false, "grade_id": "setup", "locked": true, "schema_version": 3, "solution": false}
from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_int
from toolkit.ffn import FeedForward
from toolkit.masks import causal_mask
from toolkit.norm import RMSNorm
from toolkit.notebook import NotReadyError, friendly_errors
from toolkit.seq2seq import (
    IGNORE_INDEX,
    EncDecCache,
    EncDecConfig,
    NumberTokenizer,
    encode_batch,
    exact_match,
    load_encdec,
    number_examples,
    number_to_words,
    save_encdec,
    train_numbers,
)
from toolkit.widgets.seq2seq import beam_explorer, cross_attention_explorer

friendly_errors()  # one short line, not a long traceback, for an exercise not written yet

_ = torch.manual_seed(0)

# %% [markdown]
# ## 0. The task: numbers, as words and as digits, both ways
#
# T5 casts every task as *text in, text out* and tells tasks apart by a **prefix** on the
# input. Our model serves two:
#
# * `words: 4213` → `four thousand two hundred thirteen`
# * `digits: four thousand two hundred thirteen` → `4213`
#
# Numbers run from 0 to 9,999. About one number in ten is **held out**: training never
# sees it, in either direction, and part 7 grades your model on those. The tokenizer has
# one token per word and per digit: 45 tokens.

# %%
tokenizer = NumberTokenizer()
for source, target in number_examples(4, seed=3):
    print(f"{source!r:50} -> {target!r}")
print(tokenizer.vocab_size, "tokens:", " ".join(tokenizer.vocab))
src, labels = encode_batch(number_examples(3, seed=3), tokenizer)
print("src:", src.tolist())
print("labels:", labels.tolist())

# %% [markdown]
# ## 1. T5's relative position buckets
#
# T5 gives attention no position vectors at all. Each attention score between a query at
# position $i$ and a key at position $j$ gets a learned scalar added, which depends on the
# **offset** $j - i$ through a *bucket*: offsets that are close get a bucket each, far ones
# share logarithmically wider buckets (the model rarely needs to tell 90 from 91 apart).
#
# `t5_relative_position_bucket(relative_position, bidirectional, num_buckets, max_distance)`
# maps each offset `rel = key_pos - query_pos` to a bucket in `[0, num_buckets)`:
#
# * **bidirectional** (the encoder): the buckets are split in two halves of
#   `n = num_buckets // 2`; keys at or before the query (`rel <= 0`) use the lower half,
#   keys after it (`rel > 0`) the upper half (add `n`). The distance is `|rel|`.
# * **one-sided** (the decoder, `bidirectional=False`): all `n = num_buckets` buckets are for
#   the past; the distance is `max(-rel, 0)`, so every future key lands in bucket 0 (it is
#   masked anyway).
# * Within a half of `n` buckets, with `n_exact = n // 2`: a distance `d < n_exact` is its
#   own bucket `d`; a larger one gets
#   $$n_\text{exact} + \left\lfloor \frac{\ln(d / n_\text{exact})}{\ln(\text{max\_distance} / n_\text{exact})}\,(n - n_\text{exact}) \right\rfloor,$$
#   capped at `n - 1` (every distance from `max_distance` on shares the last bucket).
#
# Compute the logarithmic bucket in **float32** in exactly this order (log of the ratio,
# divided by the log span, times `n - n_exact`, truncated to an integer with `.long()`):
# that is how Hugging Face's `T5Attention._relative_position_bucket` rounds a distance that
# sits on a bucket edge, and the grader compares with it bucket for bucket. Evaluate it
# only where `d >= n_exact` matters (clamp `d` to at least `n_exact` first, to avoid
# `log(0)`), then pick with `torch.where`.
#
# ### Exercise 1: `t5_relative_position_bucket`

# %% nbgrader={"grade": false, "grade_id": "bucket", "locked": false, "schema_version": 3, "solution": true}
def t5_relative_position_bucket(
    relative_position: Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """Map offsets ``key_pos - query_pos`` to T5's buckets.

    Args:
        relative_position: integer tensor of ``key_pos - query_pos``, any shape.
        bidirectional: encoder (both halves) or decoder (the past only).
        num_buckets: buckets in all (both halves together when bidirectional).
        max_distance: from this distance on, one shared last bucket.

    Returns:
        ``long`` tensor of the same shape, values in ``[0, num_buckets)``.

    The argument checks are given; the bucketing is yours.
    """
    if not isinstance(relative_position, Tensor) or relative_position.dtype.is_floating_point:
        raise ValueError("relative_position must be an integer tensor of key_pos - query_pos")
    check_int("num_buckets", num_buckets, minimum=2)
    rel = relative_position.long()
    bucket = torch.zeros_like(rel)
    n = num_buckets
    ### BEGIN SOLUTION
    if bidirectional:
        n //= 2
        bucket = bucket + (rel > 0).long() * n  # keys to the right use the upper half
        dist = rel.abs()
    else:
        dist = (-rel).clamp(min=0)  # distance into the past; future keys -> 0
    n_exact = n // 2  # one bucket per distance below this
    if n_exact < 1 or max_distance <= n_exact:
        raise ValueError(
            f"need num_buckets >= {4 if bidirectional else 2} and max_distance > {n_exact} "
            f"(the exact range), got num_buckets={num_buckets}, max_distance={max_distance}"
        )
    # n_exact + floor(ln(dist / n_exact) / ln(max_distance / n_exact) * (n - n_exact)).
    # Evaluated in float32 in this order, like HF, so that a distance whose exact
    # value sits on a bucket edge is rounded the same way. (clamp avoids log(0).)
    log_span = math.log(max_distance / n_exact)
    log_ratio = torch.log(dist.clamp(min=n_exact).float() / n_exact) / log_span
    log_bucket = n_exact + (log_ratio * (n - n_exact)).long()
    log_bucket = log_bucket.clamp(max=n - 1)
    return bucket + torch.where(dist < n_exact, dist, log_bucket)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bucket", "locked": true, "points": 3, "schema_version": 3, "solution": false}
rel = torch.arange(-6, 7)
got = t5_relative_position_bucket(rel, True, num_buckets=8, max_distance=16)
assert got.dtype == torch.long and got.shape == rel.shape, "a long tensor of rel's shape"
# n = 4 per half, n_exact = 2: distances 0, 1 exact; 2 .. 15 logarithmic in buckets 2, 3.
assert got.tolist() == [3, 2, 2, 2, 2, 1, 0, 5, 6, 6, 6, 6, 7], got.tolist()
one_sided = t5_relative_position_bucket(rel, False, num_buckets=8, max_distance=16)
assert one_sided[rel >= 0].eq(0).all(), "one-sided: keys at or after the query -> bucket 0"
assert one_sided.tolist()[:6] == [5, 4, 4, 3, 2, 1], one_sided.tolist()
far = t5_relative_position_bucket(torch.tensor([-1000, 1000]), True, 32, 128)
assert far.tolist() == [15, 31], "from max_distance on: the last bucket of each half"
print("t5_relative_position_bucket: visible checks passed")

# %% [markdown]
# ## 2. The bias: a learned scalar per bucket and head
#
# `T5RelativePositionBias` holds an `nn.Embedding(num_buckets, n_heads)` named
# `relative_attention_bias` (Hugging Face's name, so T5 checkpoints load into it). For
# `T_q` queries and `T_k` keys it returns
#
# $$\text{bias}[0, h, i, j] = W[\text{bucket}(j - (i + \text{query\_offset})), h],$$
#
# shape `(1, H, T_q, T_k)`, where query $i$ sits at absolute position
# `query_offset + i` (a decoder with `P` cached tokens passes `query_offset=P`) and key $j$
# at position $j$. **Each stack computes it once** per forward pass and hands the same
# tensor to every one of its layers, which add it to their scores before the softmax.
#
# ### Exercise 2: `T5RelativePositionBias.forward`

# %% nbgrader={"grade": false, "grade_id": "bias", "locked": false, "schema_version": 3, "solution": true}
class T5RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head), added to the attention scores (T5).

    Attributes: ``relative_attention_bias``, ``nn.Embedding(num_buckets, n_heads)``;
    ``bidirectional``, ``num_buckets``, ``max_distance`` for the bucket function.
    """

    def __init__(
        self,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        check_int("n_heads", n_heads)
        check_int("num_buckets", num_buckets, minimum=2)
        check_int("max_distance", max_distance)
        self.n_heads, self.num_buckets = n_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def forward(self, n_queries: int, n_keys: int | None = None, query_offset: int = 0) -> Tensor:
        """
        Args:
            n_queries: ``T_q``.
            n_keys: ``T_k`` (default ``T_q``).
            query_offset: absolute position of the first query.

        Returns:
            ``(1, n_heads, T_q, T_k)``, on the embedding's device.
        """
        check_int("n_queries", n_queries)
        n_keys = n_queries if n_keys is None else n_keys
        check_int("n_keys", n_keys)
        check_int("query_offset", query_offset, minimum=0)
        device = self.relative_attention_bias.weight.device
        ### BEGIN SOLUTION
        i = torch.arange(n_queries, device=device)[:, None] + query_offset  # query positions
        j = torch.arange(n_keys, device=device)[None, :]  # key positions
        buckets = t5_relative_position_bucket(
            j - i, self.bidirectional, self.num_buckets, self.max_distance
        )  # (T_q, T_k)
        values = self.relative_attention_bias(buckets)  # (T_q, T_k, H)
        return values.permute(2, 0, 1).unsqueeze(0)  # (1, H, T_q, T_k)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_bias", "locked": true, "points": 2, "schema_version": 3, "solution": false}
torch.manual_seed(0)
pb = T5RelativePositionBias(n_heads=3, num_buckets=8, max_distance=16, bidirectional=False)
out = pb(4, 6, query_offset=2)
assert out.shape == (1, 3, 4, 6), f"expected (1, H, T_q, T_k) = (1, 3, 4, 6), got {tuple(out.shape)}"
W = pb.relative_attention_bias.weight
assert torch.equal(out[0, :, 0, 2], W[0]), "query at position 2, key 2: offset 0 -> bucket 0"
assert torch.equal(out[0, :, 1, 0], W[3]), "query at 3, key 0: 3 in the past -> bucket 3"
assert torch.equal(out[0, :, 3, 5], pb(1, 6, query_offset=5)[0, :, 0, 5]), (
    "the last query of a call equals a one-query call at its absolute position")
print("T5RelativePositionBias: visible checks passed")

# %% [markdown]
# ## 3. T5's attention
#
# `T5Attention` is multi-head attention with T5's three differences:
#
# 1. **no** $1/\sqrt{d_\text{head}}$: the scores are $q k^\top$ (T5 folds the scale into the
#    initialisation of `q_proj`); no biases on the projections;
# 2. the position **bias** is added to the scores **before** the softmax, then the mask
#    (`masked_fill` of `-inf` where the mask is `False`), then the softmax over the keys:
#    $$\text{out} = \text{softmax}(q k^\top + \text{bias},\ \text{masked})\, v;$$
# 3. with `cross=True` the queries come from `x` (the decoder) and the keys and values from
#    `memory` (the encoder output). Cross-attention gets no position bias.
#
# **Caches** (an `EncDecCache`, given: read its docstring). Self-attention projects this
# call's keys and values and hands them to `cache.update(layer, k, v)`, which appends them
# and returns *all* the keys and values so far. Cross-attention projects `memory` only the
# first time (`cache.has_cross(layer)` is `False`), stores the result with
# `cache.update(layer, k, v, cross=True)`, and from then on reads `cache.cross_keys[layer]`
# and `cache.cross_values[layer]` without projecting anything. Without a cache, project
# every time.
#
# ### Exercise 3: `T5Attention.forward`

# %%
help(EncDecCache.update)

# %% nbgrader={"grade": false, "grade_id": "attention", "locked": false, "schema_version": 3, "solution": true}
class T5Attention(nn.Module):
    """Self- or cross-attention as T5 computes it: ``softmax(q k^T + bias) v``.

    Attributes: ``q_proj``, ``k_proj``, ``v_proj`` (``d_model -> n_heads * d_head``),
    ``o_proj`` (back), all without bias; ``cross``.
    """

    def __init__(self, config: EncDecConfig, cross: bool = False):
        super().__init__()
        self.n_heads, self.d_head, self.cross = config.n_heads, config.d_head, cross
        inner = config.n_heads * config.d_head
        self.q_proj = nn.Linear(config.d_model, inner, bias=False)
        self.k_proj = nn.Linear(config.d_model, inner, bias=False)
        self.v_proj = nn.Linear(config.d_model, inner, bias=False)
        self.o_proj = nn.Linear(inner, config.d_model, bias=False)

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, T, H * d_head)`` -> ``(B, H, T, d_head)``."""
        B, T, _ = x.shape
        return x.view(B, T, self.n_heads, self.d_head).transpose(1, 2)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        bias: Tensor | None = None,
        mask: Tensor | None = None,
        cache: EncDecCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``, where the queries come from.
            memory: ``(B, S, d_model)``, the encoder output: cross-attention's keys and
                values (self-attention ignores it).
            bias: ``(1, H, T, T_k)`` or ``None``: added to the scores before the softmax.
            mask: bool, broadcastable to ``(B, H, T, T_k)``, ``True`` = may attend; or ``None``.
            cache: an ``EncDecCache`` or ``None`` (see above).
            layer: this layer's index in the cache.

        Returns:
            ``(B, T, d_model)``: ``o_proj`` of the heads put back side by side.
        """
        ### BEGIN SOLUTION
        B, T, _ = x.shape
        q = self.split_heads(self.q_proj(x))  # (B, H, T, d_head)
        if self.cross and cache is not None and cache.has_cross(layer):
            k, v = cache.cross_keys[layer], cache.cross_values[layer]  # projected once
        else:
            source = memory if self.cross else x  # cross: keys and values from the encoder
            k = self.split_heads(self.k_proj(source))  # (B, H, T_k, d_head)
            v = self.split_heads(self.v_proj(source))
            if cache is not None:
                k, v = cache.update(layer, k, v, cross=self.cross)
        scores = q @ k.transpose(-2, -1)  # q k^T, no 1/sqrt(d_head) in T5: (B, H, T, T_k)
        if bias is not None:
            scores = scores + bias  # position bias, before the softmax
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)  # (B, H, T, T_k)
        out = (weights @ v).transpose(1, 2).reshape(B, T, self.n_heads * self.d_head)
        return self.o_proj(out)
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention", "locked": true, "points": 4, "schema_version": 3, "solution": false}
torch.manual_seed(0)
cfg = EncDecConfig(vocab_size=45, d_model=16, n_heads=4)
attn = T5Attention(cfg).double()
x = torch.randn(2, 5, 16, dtype=torch.float64)
q, k, v = (attn.split_heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
bias = torch.randn(1, 4, 5, 5, dtype=torch.float64)
expected = attn.o_proj((torch.softmax(q @ k.transpose(-2, -1) + bias, -1) @ v)
                       .transpose(1, 2).reshape(2, 5, 16))
assert torch.allclose(attn(x, bias=bias), expected), "softmax(q k^T + bias) v, no 1/sqrt(d)"
mask = causal_mask(5, 5)
cache = EncDecCache(1)
steps = torch.cat([attn(x[:, t : t + 1], mask=mask[t : t + 1, : t + 1], cache=cache)
                   for t in range(5)], dim=1)
assert torch.allclose(steps, attn(x, mask=mask)), "one token at a time with the cache = all at once"
cross = T5Attention(cfg, cross=True).double()
memory = torch.randn(2, 7, 16, dtype=torch.float64)
cache = EncDecCache(1)
first = cross(x[:, :2], memory, cache=cache)
assert cache.has_cross(0), "cross-attention should store the projected memory in the cache"
again = cross(x[:, 2:], memory * 0, cache=cache)  # memory ignored: the cache is read
assert torch.allclose(torch.cat([first, again], 1), cross(x, memory)), (
    "with a cache, cross-attention reads the keys and values projected on the first call")
print("T5Attention: visible checks passed")

# %% [markdown]
# ## 4. The model
#
# The layers are given (read them): each sub-layer is pre-norm with T5's RMS norm (no
# mean, no bias), `x + F(RMSNorm(x))`. An encoder layer is self-attention then
# feed-forward; a decoder layer is causal self-attention, cross-attention over the memory,
# then feed-forward. The feed-forward network is T5's `wo(relu(wi(x)))` without biases:
# the toolkit's `FeedForward` with a ReLU and `bias=False` (its `fc1`, `fc2` are T5's `wi`,
# `wo`).

# %% nbgrader={"grade": false, "grade_id": "layers", "locked": true, "schema_version": 3, "solution": false}
class EncoderLayer(nn.Module):
    """Bidirectional self-attention then feed-forward, each ``x + F(RMSNorm(x))``."""

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.d_model, config.eps)
        self.self_attn = T5Attention(config)
        self.norm2 = RMSNorm(config.d_model, config.eps)
        self.ff = FeedForward(config.d_model, config.d_ff, "relu", bias=False)

    def forward(self, x: Tensor, bias: Tensor | None, mask: Tensor | None) -> Tensor:
        """``x`` ``(B, S, d)``; ``bias`` ``(1, H, S, S)``; ``mask`` ``(B, 1, 1, S)``."""
        x = x + self.self_attn(self.norm1(x), bias=bias, mask=mask)
        return x + self.ff(self.norm2(x))


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention over the encoder output, feed-forward."""

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.norm1 = RMSNorm(config.d_model, config.eps)
        self.self_attn = T5Attention(config)
        self.norm2 = RMSNorm(config.d_model, config.eps)
        self.cross_attn = T5Attention(config, cross=True)
        self.norm3 = RMSNorm(config.d_model, config.eps)
        self.ff = FeedForward(config.d_model, config.d_ff, "relu", bias=False)

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        bias: Tensor | None,
        self_mask: Tensor | None,
        cross_mask: Tensor | None,
        cache: EncDecCache | None = None,
        layer: int = 0,
    ) -> Tensor:
        """``x`` ``(B, T, d)``, ``memory`` ``(B, S, d)``; ``bias`` ``(1, H, T, T_k)``;
        ``self_mask`` ``(T, T_k)``; ``cross_mask`` ``(B, 1, 1, S)``. No bias in
        cross-attention."""
        x = x + self.self_attn(self.norm1(x), bias=bias, mask=self_mask, cache=cache, layer=layer)
        x = x + self.cross_attn(self.norm2(x), memory, mask=cross_mask, cache=cache, layer=layer)
        return x + self.ff(self.norm3(x))


# %% [markdown]
# `EncoderDecoder` puts them together; its `__init__` (the attribute names) is given.
#
# * **`encode(src)`** → `(memory, src_mask)`: `src_mask = src != pad_id` `(B, S)`; embed;
#   the encoder's bias `(1, H, S, S)` computed **once**; every encoder layer gets that bias
#   and the padding mask `src_mask[:, None, None, :]` (no query attends to padding);
#   `memory` is `encoder_norm` of the last layer's output.
# * **`decode(tgt, memory, src_mask, cache=None, start_pos=0)`** → logits `(B, T, V)`:
#   `tgt` holds target positions `start_pos .. start_pos + T - 1`, and the keys of
#   self-attention are positions `0 .. T_k - 1` with `T_k = start_pos + T`. The decoder's
#   bias `(1, H, T, T_k)` (`query_offset=start_pos`) once; the causal mask
#   `causal_mask(T, T_k, offset=start_pos)`; cross-attention's mask
#   `src_mask[:, None, None, :]`; layer `i` gets `cache` and index `i`. When a cache is
#   given, set `cache.length = T_k` at the end. Then `decoder_norm`, and the **tied head
#   with T5's rescaling**: `lm_head(h * d_model ** -0.5)`.
# * **`forward(src, labels)`** → `(logits, loss)`: teacher forcing. The decoder reads
#   `shift_right(labels, pad_id)` and the loss is the mean cross-entropy of the logits
#   against `labels`, ignoring `-100`.
# * **`shift_right(labels, start_id)`**: `[start, y_0, ..., y_{T-2}]`, with any `-100`
#   replaced by `start_id` (Hugging Face's `_shift_right`).
#
# ### Exercise 4: `shift_right` and `EncoderDecoder`

# %% nbgrader={"grade": false, "grade_id": "model", "locked": false, "schema_version": 3, "solution": true}
def shift_right(labels: Tensor, start_id: int = 0) -> Tensor:
    """``(B, T)`` labels -> ``(B, T)`` decoder input ``[start, y_0 .. y_{T-2}]``, ``-100``
    replaced by ``start_id``."""
    ### BEGIN SOLUTION
    shifted = labels.new_full(labels.shape, start_id)
    shifted[:, 1:] = labels[:, :-1]  # position t reads y_{t-1}
    return shifted.masked_fill(shifted == IGNORE_INDEX, start_id)
    ### END SOLUTION


class EncoderDecoder(nn.Module):
    """T5: shared embedding, encoder stack, decoder stack, tied and rescaled head.

    Attributes (given): ``config``, ``embed``, ``encoder_bias`` (bidirectional),
    ``encoder_layers``, ``encoder_norm``, ``decoder_bias`` (one-sided), ``decoder_layers``,
    ``decoder_norm``, ``lm_head`` (its weight *is* ``embed.weight``).
    """

    def __init__(self, config: EncDecConfig):
        super().__init__()
        self.config = config
        c = config
        self.embed = nn.Embedding(c.vocab_size, c.d_model)
        self.encoder_bias = T5RelativePositionBias(c.n_heads, c.num_buckets, c.max_distance,
                                                   bidirectional=True)
        self.encoder_layers = nn.ModuleList(EncoderLayer(c) for _ in range(c.n_encoder_layers))
        self.encoder_norm = RMSNorm(c.d_model, c.eps)
        self.decoder_bias = T5RelativePositionBias(c.n_heads, c.num_buckets, c.max_distance,
                                                   bidirectional=False)
        self.decoder_layers = nn.ModuleList(DecoderLayer(c) for _ in range(c.n_decoder_layers))
        self.decoder_norm = RMSNorm(c.d_model, c.eps)
        self.lm_head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        self.lm_head.weight = self.embed.weight  # tied: W_U = E^T
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """T5's initialisation (given)."""
        c = self.config
        nn.init.normal_(self.embed.weight, std=1.0)
        for name, p in self.named_parameters():
            if name.endswith("q_proj.weight"):
                nn.init.normal_(p, std=(c.d_model * c.d_head) ** -0.5)
            elif name.endswith("relative_attention_bias.weight"):
                nn.init.normal_(p, std=c.d_model**-0.5)
            elif p.dim() == 2 and name != "embed.weight":
                nn.init.normal_(p, std=p.size(1) ** -0.5)  # (out, in): fan_in^-1/2

    def new_cache(self) -> EncDecCache:
        return EncDecCache(self.config.n_decoder_layers)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """``src`` ``(B, S)`` -> ``memory`` ``(B, S, d)`` and ``src_mask`` ``(B, S)`` bool."""
        ### BEGIN SOLUTION
        src_mask = src != self.config.pad_id  # (B, S): True = a real token
        S = src.size(1)
        x = self.embed(src)  # (B, S, d)
        bias = self.encoder_bias(S, S)  # (1, H, S, S), once for every layer
        mask = src_mask[:, None, None, :]  # (B, 1, 1, S): no query attends to padding
        for layer in self.encoder_layers:
            x = layer(x, bias, mask)
        return self.encoder_norm(x), src_mask
        ### END SOLUTION

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor,
        cache: EncDecCache | None = None,
        start_pos: int = 0,
    ) -> Tensor:
        """Logits ``(B, T, V)`` for target positions ``start_pos .. start_pos + T - 1``."""
        ### BEGIN SOLUTION
        T = tgt.size(1)
        T_k = start_pos + T  # keys: every target position so far
        x = self.embed(tgt)  # (B, T, d)
        bias = self.decoder_bias(T, T_k, query_offset=start_pos)  # (1, H, T, T_k), once
        self_mask = causal_mask(T, T_k, offset=start_pos, device=tgt.device)  # (T, T_k)
        cross_mask = src_mask[:, None, None, :]  # (B, 1, 1, S): every real source token
        for i, layer in enumerate(self.decoder_layers):
            x = layer(x, memory, bias, self_mask, cross_mask, cache, i)
        if cache is not None:
            cache.length = T_k
        h = self.decoder_norm(x)  # (B, T, d)
        return self.lm_head(h * self.config.d_model**-0.5)  # tied head, rescaled by d^-1/2
        ### END SOLUTION

    def forward(self, src: Tensor, labels: Tensor) -> tuple[Tensor, Tensor]:
        """Teacher forcing: ``(logits (B, T, V), mean cross-entropy over labels != -100)``."""
        ### BEGIN SOLUTION
        memory, src_mask = self.encode(src)
        decoder_input = shift_right(labels, self.config.pad_id)  # [start, y_0 .. y_{T-2}]
        logits = self.decode(decoder_input, memory, src_mask)
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                               ignore_index=IGNORE_INDEX)
        return logits, loss
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_model", "locked": true, "points": 4, "schema_version": 3, "solution": false}
assert shift_right(torch.tensor([[5, 6, 1, -100]]), 0).tolist() == [[0, 5, 6, 1]]
torch.manual_seed(0)
cfg = EncDecConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, d_ff=64)
model = EncoderDecoder(cfg).double().eval()
src, labels = encode_batch(number_examples(4, seed=1), tokenizer)
logits, loss = model(src, labels)
assert logits.shape == (*labels.shape, cfg.vocab_size), f"logits {tuple(logits.shape)}"
assert 2.5 < loss.item() < 6, f"an untrained model's loss is near ln 45 = 3.8, got {loss.item():.2f}"
padded = torch.cat([src, torch.zeros(4, 3, dtype=torch.long)], dim=1)
assert torch.allclose(model(padded, labels)[0], logits), "more padding must change nothing"
changed = labels.clone()
changed[:, 2:] = 7
assert torch.allclose(model(src, changed)[0][:, :3], logits[:, :3]), (
    "the logits at target position t may depend on labels before t only")
memory, src_mask = model.encode(src)
cache = model.new_cache()
tgt = shift_right(labels)
steps = torch.cat([model.decode(tgt[:, t : t + 1], memory, src_mask, cache, start_pos=t)
                   for t in range(tgt.size(1))], dim=1)
assert torch.allclose(steps, logits), "decoding with the cache, token by token = teacher forcing"
print("EncoderDecoder: visible checks passed")

# %% [markdown]
# ## 5. Greedy decoding
#
# `greedy_decode(model, src, max_new_tokens, use_cache=True)`: encode once; start every
# row's target with the start token `pad_id`; then, at step `t`, run `decode` on the newest
# token only (`start_pos=t`, with the cache) or on the whole target (`use_cache=False`),
# take the argmax of the last position's logits, append it. **End of sequence**: a row
# that has produced `eos_id` is finished; from then on it gets `pad_id`
# (`next_token.masked_fill(finished, pad_id)`), and the loop stops early once every row is
# finished. Return the generated tokens without the start token, `(B, n)`.
#
# ### Exercise 5: `greedy_decode`

# %% nbgrader={"grade": false, "grade_id": "greedy", "locked": false, "schema_version": 3, "solution": true}
@torch.no_grad()
def greedy_decode(
    model: EncoderDecoder, src: Tensor, max_new_tokens: int, use_cache: bool = True
) -> Tensor:
    """``src`` ``(B, S)`` -> generated ids ``(B, n)``, ``n <= max_new_tokens``; ``pad_id``
    after a row's ``eos_id``."""
    ### BEGIN SOLUTION
    pad, eos = model.config.pad_id, model.config.eos_id
    memory, src_mask = model.encode(src)  # once per input
    cache = model.new_cache() if use_cache else None
    tgt = src.new_full((src.size(0), 1), pad)  # (B, 1): the start token
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for step in range(max_new_tokens):
        if use_cache:  # the newest token only, at absolute position `step`
            logits = model.decode(tgt[:, -1:], memory, src_mask, cache, start_pos=step)
        else:
            logits = model.decode(tgt, memory, src_mask)  # the whole target again
        next_token = logits[:, -1].argmax(dim=-1)  # (B,)
        next_token = next_token.masked_fill(finished, pad)  # a finished row only pads
        finished = finished | (next_token == eos)
        tgt = torch.cat([tgt, next_token[:, None]], dim=1)
        if bool(finished.all()):
            break
    return tgt[:, 1:]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_greedy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
torch.manual_seed(2)
model = EncoderDecoder(EncDecConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4)).eval()
with torch.no_grad():
    model.embed.weight[1] *= 3  # make </s> likely, so rows end at different steps
src, _ = encode_batch(number_examples(6, seed=2), tokenizer)
fast, slow = greedy_decode(model, src, 12), greedy_decode(model, src, 12, use_cache=False)
assert torch.equal(fast, slow), "cached and uncached greedy decoding must give the same tokens"
for row in fast.tolist():
    if 1 in row:
        assert set(row[row.index(1) + 1 :]) <= {0}, f"after </s> only padding: {row}"
print("greedy_decode: visible checks passed")

# %% [markdown]
# ## 6. Beam search
#
# Greedy decoding commits to the best token at every step; beam search keeps the `W` best
# partial targets (*beams*), ranked by their summed log-probability, and extends them all.
# `beam_search_one(model, src, beam_width, max_new_tokens, length_penalty, use_cache)`
# searches one input `src` `(1, S)`, as Hugging Face's `generate(num_beams=W,
# do_sample=False)` does by default:
#
# 1. Encode once. Start with one beam `[pad_id]` with score 0 (and a new cache).
# 2. Each step: run `decode` on every beam's newest token (the memory and `src_mask`
#    expanded to the `n` beams: `memory.expand(n, -1, -1)`), take `log_softmax` of the last
#    logits **in float64**, add each beam's score: `n * V` candidates. Take the `2W` best
#    with `torch.topk` (so that `W` remain even if `W` of them end), in topk's order.
# 3. A candidate **ends** if its token is `eos_id` or it reaches `max_new_tokens` tokens.
#    Among the **`W` best** candidates (ranks `0 .. W - 1` only), each one that ends
#    becomes a finished hypothesis: its tokens (without the start token, EOS included) and
#    its score normalised by the **length penalty**
#    $$\frac{\sum \log p}{\text{len}^{\alpha}},\quad \text{len} = \text{generated tokens, EOS included}.$$
#    Keep the `W` best finished hypotheses (sorted best first).
# 4. The next beams are the `W` best candidates that do **not** end, in rank order. A new
#    beam comes from a parent beam (`index // V`) and adds a token (`index % V`): with a
#    cache, **reorder** it so that row `i` holds the history of its parent:
#    `cache.reorder(parents)`.
# 5. Stop when no beam is left, or when `W` hypotheses are finished and the best running
#    beam's score divided by `len^alpha` at its *current* length is no better (`<=`) than
#    the worst kept hypothesis (Hugging Face's default heuristic).
#
# Return the finished hypotheses `[(score, tokens)]`, best first (a `float` score, a
# `(len,)` tensor). `beam_decode` (given) runs it on each input of a batch and pads.
#
# ### Exercise 6: `beam_search_one`

# %% nbgrader={"grade": false, "grade_id": "beam", "locked": false, "schema_version": 3, "solution": true}
@torch.no_grad()
def beam_search_one(
    model: EncoderDecoder,
    src: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    use_cache: bool = True,
) -> list[tuple[float, Tensor]]:
    """Beam search for one input ``src`` ``(1, S)``: at most ``beam_width`` finished
    hypotheses ``(score, tokens)``, best first."""
    ### BEGIN SOLUTION
    pad, eos = model.config.pad_id, model.config.eos_id
    memory, src_mask = model.encode(src)  # (1, S, d), once
    cache = model.new_cache() if use_cache else None
    beams = src.new_full((1, 1), pad)  # (n_beams, 1 + generated): the start token
    scores = torch.zeros(1, dtype=torch.float64, device=src.device)  # sum log p per beam
    finished: list[tuple[float, Tensor]] = []
    for step in range(max_new_tokens):
        n = beams.size(0)
        if use_cache:  # the cache holds each beam's earlier positions, in beam order
            logits = model.decode(beams[:, -1:], memory.expand(n, -1, -1),
                                  src_mask.expand(n, -1), cache, start_pos=step)
        else:
            logits = model.decode(beams, memory.expand(n, -1, -1), src_mask.expand(n, -1))
        logprobs = torch.log_softmax(logits[:, -1].double(), dim=-1)  # (n, V)
        V = logprobs.size(-1)
        candidates = (scores[:, None] + logprobs).flatten()  # (n * V,) sum log p
        top, index = torch.topk(candidates, min(2 * beam_width, candidates.numel()))
        parents, tokens = index // V, index % V  # which beam, which token
        length = step + 1  # generated tokens, EOS included
        ends = (tokens == eos) | (length == max_new_tokens)
        for rank in range(min(beam_width, top.numel())):  # only the W best may finish
            if ends[rank]:
                hypothesis = torch.cat([beams[parents[rank], 1:], tokens[rank : rank + 1]])
                finished.append((float(top[rank]) / length**length_penalty, hypothesis))
        finished.sort(key=lambda h: -h[0])
        del finished[beam_width:]
        going = (~ends).nonzero().flatten()[:beam_width]  # the W best that do not end
        if going.numel() == 0:
            break
        beams = torch.cat([beams[parents[going]], tokens[going, None]], dim=1)
        scores = top[going]
        if cache is not None:
            cache.reorder(parents[going])  # row i continues beam parents[going[i]]
        if len(finished) == beam_width and (
            float(scores.max()) / length**length_penalty <= finished[-1][0]
        ):
            break  # no running beam is likely to beat the worst kept hypothesis
    return finished
    ### END SOLUTION


@torch.no_grad()
def beam_decode(
    model: EncoderDecoder,
    src: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    num_return_sequences: int = 1,
    use_cache: bool = True,
) -> tuple[Tensor, Tensor]:
    """Beam search for each row of ``src`` ``(B, S)`` (given): ``tokens`` ``(B, R, n)``
    padded with ``pad_id`` and ``scores`` ``(B, R)``, best first, ``R = num_return_sequences``."""
    check_int("beam_width", beam_width)
    check_int("max_new_tokens", max_new_tokens)
    check_int("num_return_sequences", num_return_sequences)
    if num_return_sequences > beam_width:
        raise ValueError(f"num_return_sequences={num_return_sequences} > beam_width={beam_width}")
    best = [beam_search_one(model, src[b : b + 1], beam_width, max_new_tokens, length_penalty,
                            use_cache)[:num_return_sequences] for b in range(src.size(0))]
    n = max(t.numel() for hyps in best for _, t in hyps)
    pad = model.config.pad_id
    tokens = torch.stack([torch.stack([torch.cat([t, t.new_full((n - t.numel(),), pad)])
                                       for _, t in hyps]) for hyps in best])
    scores = torch.tensor([[s for s, _ in hyps] for hyps in best], dtype=torch.float64)
    return tokens, scores


# %% nbgrader={"grade": true, "grade_id": "test_beam", "locked": true, "points": 4, "schema_version": 3, "solution": false}
src1 = src[:1]
with torch.no_grad():
    hyps = beam_search_one(model, src1, 4, 10, length_penalty=1.0)
    assert 1 <= len(hyps) <= 4 and all(isinstance(s, float) for s, _ in hyps)
    assert [s for s, _ in hyps] == sorted((s for s, _ in hyps), reverse=True), "best first"
    memory, src_mask = model.encode(src1)
    for score, tokens in hyps:  # each score is the normalised log-probability of its tokens
        logits = model.decode(shift_right(tokens[None]), memory, src_mask)
        logp = torch.log_softmax(logits.double(), -1)[0].gather(1, tokens[:, None]).sum()
        assert math.isclose(score, float(logp) / tokens.numel(), rel_tol=1e-6), (
            "score = sum log p / len ** length_penalty")
    one, _ = beam_decode(model, src, 1, 10)
    greedy = greedy_decode(model, src, 10)
    assert torch.equal(one[:, 0, : greedy.size(1)], greedy), "beam width 1 is greedy decoding"
    slow = beam_search_one(model, src1, 4, 10, 1.0, use_cache=False)
    assert [t.tolist() for _, t in slow] == [t.tolist() for _, t in hyps], (
        "with and without the cache, the same hypotheses")
print("beam_search_one: visible checks passed")

# %% [markdown]
# ## 7. Train your model and hand in the checkpoint
#
# `train_numbers` (from the toolkit) trains any model with `model(src, labels) -> (logits,
# loss)`: AdamW, warm-up and cosine decay, clipping at 1, a fresh batch of training numbers
# every step. The default below (about 170,000 parameters, 600 steps of 64 examples) takes
# under a minute on a laptop CPU.
#
# **How part 7 is scored.** The grader loads `encdec.safetensors` into your
# `EncoderDecoder`, converts 400 fixed held-out numbers (half in each direction) with
# greedy decoding of its own (your `decode`, no cache), and counts the outputs equal to
# the target word for word. Points grow in steps of 10% from 0 at 0% exact match to full
# points at **50%**; a model trained as below gets about 70%. The checkpoint must hold at
# most 2M parameters and the number task's 45-token vocabulary.
#
# The training cells below are not run while grading: run them yourself, once, then hand in
# the file they save next to this notebook.

# %% nbgrader={"grade": false, "grade_id": "checkpoint_helpers", "locked": true, "schema_version": 3, "solution": false}
CHECKPOINT = "encdec.safetensors"
TARGET_ACCURACY = 0.5


def held_out_pairs(n: int = 400) -> list[tuple[str, str]]:
    """The grader's held-out examples: ``n`` pairs of numbers training never sees."""
    return number_examples(n, held_out=True, seed=2024)


def load_checkpoint(path: str = CHECKPOINT) -> EncoderDecoder:
    """Build *your* ``EncoderDecoder`` from the saved file, as the grader does (eval mode)."""
    if not os.path.isfile(path):
        raise NotReadyError(f"{path} not found: run the training section, which saves it")
    return load_encdec(path, EncoderDecoder)


def points_fraction(accuracy: float) -> float:
    """Part 7's share of the points for an exact-match accuracy, as the grader computes it."""
    return math.floor(10 * min(accuracy / TARGET_ACCURACY, 1.0) + 1e-9) / 10


# %% tags=["skip-grading"]
STEPS = 600


def report(step: int, loss: float) -> None:
    if (step + 1) % 100 == 0:
        print(f"step {step + 1}: training loss {loss:.3f}")


torch.manual_seed(0)
config = EncDecConfig(vocab_size=tokenizer.vocab_size, d_model=64, n_heads=4, d_ff=128,
                      n_encoder_layers=2, n_decoder_layers=2, num_buckets=32, max_distance=64)
my_model = EncoderDecoder(config)
print(f"{sum(p.numel() for p in my_model.parameters()):,} parameters")
losses = train_numbers(my_model, STEPS, batch_size=64, max_lr=3e-3, callback=report)
save_encdec(my_model, CHECKPOINT)
print(f"saved {CHECKPOINT}: hand it in next to this notebook")

# %% nbgrader={"grade": true, "grade_id": "test_checkpoint", "locked": true, "points": 4, "schema_version": 3, "solution": false}
reloaded = load_checkpoint()
assert reloaded.config.vocab_size == tokenizer.vocab_size, "the number task's 45 tokens"
assert sum(p.numel() for p in reloaded.parameters()) <= 2_000_000, "at most 2M parameters"
accuracy = exact_match(lambda s, n: greedy_decode(reloaded, s, n), held_out_pairs(), tokenizer)
print(f"exact match on held-out numbers: {accuracy:.1%} (full points at "
      f"{TARGET_ACCURACY:.0%}): {points_fraction(accuracy):.0%} of part 7's points")

# %% [markdown]
# ## 8. Look inside your model (not run while grading)
#
# **Cross-attention over the input.** For each output token, which input tokens did the
# decoder read? Pick a layer and a head; the last row is the `</s>` step. Converting digits
# to words, the heads tend to follow the digit a word comes from.

# %% tags=["skip-grading"]
cross_attention_explorer(my_model, tokenizer, "words: 4213", fns={"greedy_decode": greedy_decode})

# %% [markdown]
# **The beams, step by step.** Every partial hypothesis with its summed log-probability and
# its normalised score; move the length penalty and watch which finished hypothesis wins.

# %% tags=["skip-grading"]
beam_explorer(my_model, tokenizer, "digits: seven thousand twelve",
              fns={"beam_search_one": beam_search_one})

# %% [markdown]
# ## 9. Question: what does the encoder-decoder buy?
#
# Answer each part in a few sentences, from what you built in this notebook.
#
# 1. A decoder-only model could learn the same task from one sequence, `words: 4213 =`
#    followed by the answer. What does splitting the work between an encoder and a
#    decoder buy, and what does it cost? Say what is computed once per input and what
#    once per output token in each design.
# 2. Why is one relative position bias computed per stack and shared by its layers, and
#    why does cross-attention get no position bias at all?
# 3. When can beam search return another answer than greedy decoding on this task, and
#    what would go wrong with beams ranked by their summed log-probability alone?

# %% [markdown] nbgrader={"grade": true, "grade_id": "encoder_decoder_question", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# 1. The encoder reads the whole input once, every input token seeing every other one
#    (a bidirectional view a causal decoder never has of its prompt), and the
#    cross-attention keys and values are projected from its output once per input. Each
#    output token then costs self-attention over the output so far plus cross-attention
#    over that fixed memory. A decoder-only model reads the prompt causally and keeps it
#    in its growing KV cache, but has one stack, one mask and no fixed split between
#    input and output. The costs of the split: two stacks (more parameters at equal
#    depth), a cross-attention sub-layer in every decoder layer, and a task format that
#    must separate input from output.
# 2. Position enters T5 only as one learned scalar per (bucket, head) added to the scores.
#    Computing it once per stack and sharing it saves parameters and compute and gives
#    every layer the same notion of distance; each layer still reads it differently
#    through its own queries and keys. In cross-attention the queries are output positions
#    and the keys input positions: two different sequences with no common axis, so "the
#    distance from output token i to input token j" means nothing (a digit maps to
#    several words, lengths differ); which input to read is left to the content.
# 3. Greedy decoding commits to the most likely token at each step; beam search keeps the
#    W best partial hypotheses by summed log-probability, so a less likely first token
#    can win when what follows it is much more likely (an early "seven" that could start
#    "seven thousand" or "seven hundred"). Every token adds a negative log-probability, so
#    summed scores prefer short hypotheses: without the length penalty (the sum divided
#    by length^alpha, as Hugging Face defines it) a beam that ends early with `</s>` beats
#    the complete answer.
#
# Marking: 1 point per part. (1) what is computed once per input against once per token,
# and one honest cost; (2) sharing as a saving of parameters with the same distance for
# every layer, and the absence of a common position axis in cross-attention; (3) a case
# where greedy and beam differ, and the bias of summed log-probabilities towards short
# outputs that the length penalty corrects.
# ### END SOLUTION

# %% [markdown]
# ## What to hand in
#
# This notebook **and** `encdec.safetensors`, in the same folder. Before you submit,
# restart the kernel and run all cells (the training cell trains again; if your checkpoint
# is already saved, you may skip that one cell).
