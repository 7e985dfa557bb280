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
# # Assignment 01: Attention and the three families
#
# Every model in this course (BERT, GPT, LLaMA, T5, Whisper and the rest) is a stack of
# layers whose central operation is **attention**. The Transformer paper, *Attention Is
# All You Need* (Vaswani et al., arXiv 1706.03762), showed that attention alone, with
# no recurrence and no convolution, is enough to build a strong sequence model. In this
# assignment you write that operation yourself, then grow it into the pieces real
# models use.
#
# | exercise (section) | you write | points |
# |---|---|---|
# | 1 (§1) | `attention_weights`, `scaled_dot_product_attention` | 3 |
# | 2 (§2) | `causal_mask`, `padding_mask`, `combine_masks` | 2 |
# | 3 (§4) | `split_heads`, `merge_heads`, `MultiHeadAttention` | 3 |
# | 4 (§5) | `DecoderBlock` (causal self-attention + cross-attention) | 3 |
# | written (§6) | a short answer: which family for which task | 2 (read by a person) |
# | written (§7) | a short answer: what attention sees of order, and what its scores cost | 3 (read by a person) |
#
# **How this notebook is graded.** Fill in each cell marked `YOUR CODE HERE`. The test
# cell below each exercise runs a few quick checks so you can see whether you are on the
# right track. Passing them is a good sign, not a guarantee: the grader runs its own,
# more thorough hidden checks on other inputs (other shapes, masks, dtypes) and scores
# each part by the fraction of those checks that pass.
#
# Write the maths yourself. While the hidden checks run, PyTorch's built-in attention
# (`torch.nn.functional.scaled_dot_product_attention`, `torch.nn.MultiheadAttention`) and
# the course toolkit's reference implementations are switched off: calling them fails
# the check. Plain tensor operations (`@`, `torch.softmax`, `masked_fill`, `view`,
# `transpose`, `nn.Linear`, ...) are all fine.
#
# **Conventions used throughout the course.**
#
# * Attention tensors have shape `(batch, heads, seq, d_head)`; a module's input and
#   output have shape `(batch, seq, d_model)`. We write `B, h, T, d_k` for short.
# * A mask is a `bool` tensor with **`True` = may attend**, the convention of
#   `torch.nn.functional.scaled_dot_product_attention`. (Careful: the older
#   `torch.nn.MultiheadAttention` uses the opposite convention for its `attn_mask`.)
# * Shapes are written in comments beside the code. Do the same in yours: most
#   attention bugs are shape bugs.

# %%
from __future__ import annotations

import math

import torch
from torch import Tensor, nn

# Pieces that are not exercises here: the position-wise feed-forward network (Lecture 05
# and Assignment 05) and the input checks the blocks use. Everything else you write yourself.
from toolkit.arguments import check_block_args, check_bool_mask, check_sequence
from toolkit.ffn import FeedForward
from toolkit.notebook import friendly_errors
from toolkit.widgets.attention import attention_explorer, families_explorer, permutation_demo

friendly_errors()  # one short line, not a long traceback, for an exercise not written yet

_ = torch.manual_seed(0)  # reproducible examples

# %% [markdown]
# ## 1. Scaled dot-product attention
#
# Think of every position in a sequence as producing three vectors:
#
# * a **query** $q_i$: what this position is looking for;
# * a **key** $k_j$: what this position can be found by;
# * a **value** $v_j$: what this position hands over when it is found.
#
# Query $i$ compares itself with every key by a dot product, turns the scores into a
# probability distribution with a softmax, and returns the corresponding weighted
# average of the values. Stacking all queries as rows of $Q$ (and keys, values as rows of
# $K$, $V$), the whole operation is two matrix products and a softmax
# (arXiv 1706.03762, eq. 1):
#
# $$
# \mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{Q K^\top}{\sqrt{d_k}} + M\right) V
# $$
#
# | tensor | shape | meaning |
# |---|---|---|
# | $Q$ | `(..., T_q, d_k)` | one query per row |
# | $K$ | `(..., T_k, d_k)` | one key per row (same width as the queries) |
# | $V$ | `(..., T_k, d_v)` | one value per key |
# | $QK^\top$, $M$, weights | `(..., T_q, T_k)` | row $i$ = how much query $i$ reads each key |
# | output | `(..., T_q, d_v)` | row $i$ = weighted average of the values |
#
# The leading `...` are batch dimensions (batch, heads): the same operation runs
# independently for each of them, which `@` and `softmax(dim=-1)` do for free.
# The softmax runs along the **last** axis, the keys, so that each *row* of the weight
# matrix sums to 1.
#
# ### Why divide by $\sqrt{d_k}$?
#
# Suppose the entries of $q$ and $k$ are independent with mean 0 and variance 1. Then
# $q \cdot k = \sum_{m=1}^{d_k} q_m k_m$ is a sum of $d_k$ terms of variance 1, so its
# variance is $d_k$ and its typical size is $\sqrt{d_k}$. With $d_k = 64$ the scores are
# typically around $\pm 8$, and a softmax of numbers that far apart is almost one-hot: one
# key takes nearly all the weight, and the gradient through the other entries almost
# vanishes. Dividing by $\sqrt{d_k}$ brings the variance back to 1 whatever the head size.
# The next cell measures it.

# %% tags=["skip-grading"]
d_k = 64
q_demo, k_demo = torch.randn(4096, d_k), torch.randn(4096, d_k)
dots = (q_demo * k_demo).sum(-1)  # 4096 independent dot products q . k
print(f"variance of q.k            : {dots.var().item():6.1f}   (d_k = {d_k})")
print(f"variance of q.k / sqrt(d_k): {(dots / math.sqrt(d_k)).var().item():6.2f}")
row = torch.randn(8, d_k) @ torch.randn(d_k)  # one query's scores against 8 keys
print("largest weight without scaling:", torch.softmax(row, -1).max().item())
print("largest weight with scaling   :", torch.softmax(row / math.sqrt(d_k), -1).max().item())

# %% [markdown]
# ### Masks go in *before* the softmax
#
# A mask $M$ says which keys each query may see. We store it as a `bool` tensor
# (`True` = may attend) broadcastable to the score matrix `(..., T_q, T_k)`. To apply it,
# set every blocked score to $-\infty$ **before** the softmax: $e^{-\infty} = 0$, so a
# blocked key gets exactly zero weight, and because the softmax normalises over what is
# left, the visible weights still sum to 1.
#
# A common mistake is to compute the softmax over *all* keys and zero the blocked
# weights afterwards. The rows then no longer sum to 1, and worse, the blocked keys still
# shaped the visible weights through the softmax's denominator. In a causal model that
# is information from the future leaking into the past.
#
# A mask can also be a **float** tensor that is simply *added* to the scores (0 where
# allowed, $-\infty$ where blocked, or any bias such as ALiBi's distance penalty in
# Lecture 02). Your function should accept both kinds.
#
# ### A row with nothing to see
#
# Sometimes a query has **no** visible key at all, for example a padding position in a
# batch where padding hides every key it could use. Then its scores are all $-\infty$ and
# the softmax computes $0/0$: `NaN`, which then spreads through every later layer and
# into the gradients. We *define* the answer instead: such a row attends to nothing, so
# its weights (and therefore its output and its gradient) are exactly **zero**. The
# PyTorch version this course pins does the same in
# `torch.nn.functional.scaled_dot_product_attention`.
#
# One way to get there without ever producing a `NaN` (not even in the backward pass):
# find the rows whose largest score is $-\infty$, give them finite scores (say 0) for the
# softmax, and zero their weights afterwards.
#
# (Some libraries block scores with the most negative *finite* number,
# `torch.finfo(dtype).min`, instead of $-\infty$. A fully blocked row then gets *uniform*
# weights rather than zeros: a different convention. Hugging Face *adds* that number as a
# float mask, which has a catch in float16: $-65504 + s$ overflows to $-\infty$ for
# scores $s$ below about $-16$, and the row is uniform over the other keys only. With a
# float mask your function simply adds what it is given.)
#
# **Edge cases, stated.** A float mask of another dtype than the scores (a float32 bias
# with float64 `q` and `k`) is cast to the scores' dtype before it is added, so the
# weights always have the dtype of `q @ k^T`; the visible checks below test it. Every
# call has at least one key ($T_k \ge 1$): the checks never pass $T_k = 0$, and your
# function may raise there (`amax` over an empty axis does, and so does the reference).
#
# ### Exercise 1a: attention weights

# %% nbgrader={"grade": false, "grade_id": "attention_weights", "locked": false, "schema_version": 3, "solution": true}
def attention_weights(
    q: Tensor, k: Tensor, mask: Tensor | None = None, scale: float | None = None
) -> Tensor:
    """The attention probabilities ``softmax(q k^T * scale + mask)``.

    Args:
        q: ``(..., T_q, d_k)`` queries.
        k: ``(..., T_k, d_k)`` keys.
        mask: ``None``, or a **bool** tensor (``True`` = may attend) or a **float**
            tensor (added to the scores), broadcastable to ``(..., T_q, T_k)``.
            Any other dtype (e.g. an int 0/1 mask) should raise ``ValueError``.
            A float mask is cast to the scores' dtype before it is added.
        scale: multiplier for the scores; ``None`` means ``1 / sqrt(d_k)``.

    Returns:
        ``(..., T_q, T_k)`` weights in the dtype of ``q @ k^T``. Each row sums to 1,
        except a row whose keys are all blocked, which must be all zeros (never NaN).
        ``T_k >= 1`` is assumed.

    Hints: ``k.transpose(-2, -1)``, ``Tensor.masked_fill``, ``~mask``,
    ``float("-inf")``, ``torch.softmax(..., dim=-1)``, ``Tensor.amax(dim=-1, keepdim=True)``.
    """
    ### BEGIN SOLUTION
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale  # (..., T_q, T_k)
    if mask is not None:
        if mask.dtype == torch.bool:
            scores = scores.masked_fill(~mask, float("-inf"))
        elif mask.is_floating_point():
            scores = scores + mask.to(scores.dtype)
        else:
            raise ValueError(
                f"mask has dtype {mask.dtype}: pass a bool mask (True = may attend) or a float "
                "bias; convert a 0/1 attention_mask with .bool()"
            )
    # A row with no visible key would be softmax(-inf, ..., -inf) = 0/0 = NaN, and so
    # would its gradient. Define it as "attends to nothing": give the row finite
    # scores for the softmax, then zero its weights, so output and gradient are 0.
    has_visible_key = scores.amax(dim=-1, keepdim=True) > float("-inf")
    scores = scores.masked_fill(~has_visible_key, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights.masked_fill(~has_visible_key, 0.0)
    ### END SOLUTION


# %% [markdown]
# ### Exercise 1b: scaled dot-product attention
#
# With the weights in hand, attention itself is one more matrix product:
# `(..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)`.

# %% nbgrader={"grade": false, "grade_id": "scaled_dot_product_attention", "locked": false, "schema_version": 3, "solution": true}
def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """``softmax(q k^T / sqrt(d_k) + mask) v``.

    Args:
        q: ``(..., T_q, d_k)``; k: ``(..., T_k, d_k)``; v: ``(..., T_k, d_v)``.
        mask, scale: as in :func:`attention_weights`.

    Returns:
        ``(..., T_q, d_v)``. A query with no visible key gets a zero vector.
    """
    ### BEGIN SOLUTION
    return attention_weights(q, k, mask, scale) @ v
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_attention_weights", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# A hand-computed example: one query, two keys, d_k = 2.
q = torch.tensor([[1.0, 0.0]])  # (T_q=1, d_k=2)
k = torch.tensor([[1.0, 0.0], [0.0, 1.0]])  # (T_k=2, d_k=2)
# scores = q k^T / sqrt(2) = [1/sqrt(2), 0]  ->  softmax = [a, 1] / (a + 1), a = e^(1/sqrt 2)
a = math.exp(1 / math.sqrt(2))
w = attention_weights(q, k)
assert isinstance(w, torch.Tensor) and w.shape == (1, 2), (
    f"expected a (T_q, T_k) = (1, 2) tensor, got {getattr(w, 'shape', type(w))}")
assert torch.allclose(w, torch.tensor([[a / (a + 1), 1 / (a + 1)]]), atol=1e-6), (
    f"got {w.tolist()}, expected {[a / (a + 1), 1 / (a + 1)]}. Did you divide the scores "
    "by sqrt(d_k) = sqrt(2) before the softmax?")
e = math.e
w = attention_weights(q, k, scale=1.0)  # scores [1, 0], no 1/sqrt(d_k)
assert torch.allclose(w, torch.tensor([[e / (e + 1), 1 / (e + 1)]]), atol=1e-6), (
    "an explicit `scale` must replace the default 1/sqrt(d_k)")

# A bool mask: the blocked key gets exactly 0 and the visible one all the weight.
w = attention_weights(q, k, mask=torch.tensor([[True, False]]))
assert torch.allclose(w, torch.tensor([[1.0, 0.0]])), (
    f"with key 1 blocked the weights should be [1, 0], got {w.tolist()}. Apply the mask "
    "to the scores (-inf) *before* the softmax, not to the weights after it.")

# A float mask is added to the scores.
w = attention_weights(q, k, mask=torch.tensor([[0.0, 1 / math.sqrt(2)]]))
assert torch.allclose(w, torch.tensor([[0.5, 0.5]]), atol=1e-6), (
    f"a float mask is a bias added to the scores; expected [0.5, 0.5], got {w.tolist()}")
# ...cast to the scores' dtype first: a float32 bias on float64 inputs gives float64 weights.
w64 = attention_weights(q.double(), k.double(), mask=torch.tensor([[0.0, 1 / math.sqrt(2)]]))
assert w64.dtype == torch.float64 and torch.allclose(w64, torch.full((1, 2), 0.5, dtype=torch.float64)), (
    f"a float32 mask on float64 q, k: expected float64 weights [0.5, 0.5], got {w64.dtype} "
    f"{w64.tolist()}. Cast the mask to the scores' dtype before adding it")

# Batched inputs: rows are probability distributions.
qb, kb = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 5, 8)  # (B, h, T_q, d_k), (B, h, T_k, d_k)
w = attention_weights(qb, kb)
assert w.shape == (2, 3, 4, 5), f"expected (B, h, T_q, T_k) = (2, 3, 4, 5), got {tuple(w.shape)}"
assert torch.allclose(w.sum(-1), torch.ones(2, 3, 4)), (
    "each row must sum to 1: take the softmax over the keys (dim=-1)")

# A query with no visible key: zeros, not NaN.
mask = torch.tensor([[True, True, False], [False, False, False]])  # row 1 sees nothing
w = attention_weights(torch.randn(2, 4), torch.randn(3, 4), mask)
assert not torch.isnan(w).any(), (
    "NaN in the weights: row 1 has no visible key. Detect rows whose scores are all "
    "-inf and make their weights 0.")
assert torch.equal(w[1], torch.zeros(3)), (
    f"a fully blocked row must be all zeros, got {w[1].tolist()}")
assert torch.allclose(w[0].sum(), torch.tensor(1.0)) and w[0, 2] == 0

# scaled_dot_product_attention = weights @ v, also with d_v != d_k.
vb = torch.randn(2, 3, 5, 6)  # (B, h, T_k, d_v)
out = scaled_dot_product_attention(qb, kb, vb)
assert out.shape == (2, 3, 4, 6), (
    f"expected (B, h, T_q, d_v) = (2, 3, 4, 6), got {tuple(out.shape)}")
assert torch.allclose(out, attention_weights(qb, kb) @ vb, atol=1e-6)
# ...and agrees with PyTorch's fused implementation (used here only to check you).
causal = torch.ones(4, 5, dtype=torch.bool).tril(diagonal=1)
expected = torch.nn.functional.scaled_dot_product_attention(qb, kb, vb, attn_mask=causal)
assert torch.allclose(scaled_dot_product_attention(qb, kb, vb, causal), expected, atol=1e-5), (
    "your attention differs from torch.nn.functional.scaled_dot_product_attention "
    "with the same bool mask")
print("✓ attention_weights and scaled_dot_product_attention pass the visible checks")

# %% [markdown]
# ### See it
#
# The explorer below draws the weight matrix of a six-token example (rows = queries,
# columns = keys) with your `attention_weights`; the masks are the course's until you
# write yours in Exercise 2. Try the masks: blocked cells drop to exactly 0 while every row
# still sums to 1. The temperature divides the
# scores once more: small values sharpen each row towards a single key, large values
# flatten it towards uniform. Leaving out $1/\sqrt{d_k}$ acts like a temperature of
# $1/\sqrt{d_k}$, far too sharp.

# %% tags=["skip-grading"]
attention_explorer(fns={"attention_weights": attention_weights})

# %% [markdown]
# ## 2. Masks: who may see whom
#
# The same attention function serves every model in the course; what changes is the
# mask. Three kinds cover almost everything:
#
# * **Bidirectional** (encoders such as BERT): every query sees every key. No mask at all.
# * **Causal** (decoders such as GPT): query $i$ sees keys $j \le i$, never a later
#   position. Training then predicts token $i+1$ from tokens $0..i$ at every position in
#   one pass, without the answer being visible. The mask is lower-triangular:
#
#   ```
#   key j ->  0 1 2 3
#   query 0   1 0 0 0
#   query 1   1 1 0 0
#   query 2   1 1 1 0
#   query 3   1 1 1 1
#   ```
#
#   During generation with a key/value cache (Lecture 03; Assignments 03 and 07 build
#   one) the cache already holds $P$ earlier tokens, so the new queries sit at absolute
#   positions $P, P+1, \dots$ and there are more keys than queries. Query $i$ then sees key $j$ iff
#   $j \le i + P$; we call $P$ the `offset`, and the mask has shape `(n_queries, n_keys)`
#   with `n_keys = P + n_queries` by default.
#
#   **More keys than queries and no offset** (`causal_mask(3, 5)`): the one rule
#   $j \le i + \text{offset}$ with offset 0 aligns the queries with the *first* keys
#   (top-left): query 0 sees key 0 only, and keys 3 and 4 are seen by no query.
#   FlashAttention (from version 2.1) and Hugging Face align the *last* query with the
#   last key instead (bottom-right), which is what decoding with a cache needs. This
#   course keeps one formula and lets the caller say where the queries sit: bottom-right
#   is `causal_mask(T_q, T_k, offset=T_k - T_q)`, exactly the call a KV cache makes
#   (`offset` = the number of cached tokens). The function never guesses the offset from
#   the shapes. The visible checks below test both alignments; the hidden checks test
#   `causal_mask(3, 6)` with offset 0 and several offsets.
# * **Key padding**: sequences in a batch have different lengths and are padded to the
#   longest. Padded *keys* must be invisible to every query. Given the real lengths
#   `(B,)`, the mask has shape `(B, 1, 1, T_k)`: the two 1s let it broadcast over the
#   heads and over the queries of a `(B, h, T_q, T_k)` score tensor. (Padded *queries* are
#   harmless: their outputs are computed and then ignored by the loss.)
#
# Masks combine with a logical **AND**: a key is visible only if *every* mask allows it.
# Broadcasting does the bookkeeping: a causal `(T, T)` AND a padding `(B, 1, 1, T)` is a
# `(B, 1, T, T)` mask, causal in every batch entry and blind to that entry's padding.
#
# ### Exercise 2: three mask builders
#
# Build them from `torch.arange` and comparisons (no Python loops needed).

# %% nbgrader={"grade": false, "grade_id": "causal_mask", "locked": false, "schema_version": 3, "solution": true}
def causal_mask(
    n_queries: int, n_keys: int | None = None, *, offset: int = 0, device=None
) -> Tensor:
    """Lower-triangular mask: query ``i`` may attend to key ``j`` iff ``j <= i + offset``.

    Args:
        n_queries: ``T_q``.
        n_keys: ``T_k``; default ``n_queries + offset``.
        offset: absolute position of the first query (the number of cached tokens).
        device: where to build the mask.

    Returns:
        bool tensor of shape ``(n_queries, n_keys)``. With more keys than queries and
        ``offset=0`` the alignment is top-left (``j <= i``); bottom-right, as in
        FlashAttention, is ``offset=n_keys - n_queries``.

    Hint: an ``(T_q, 1)`` column of query indices compared with a ``(1, T_k)`` row of key
    indices broadcasts to the full ``(T_q, T_k)`` matrix.
    """
    ### BEGIN SOLUTION
    n_keys = n_queries + offset if n_keys is None else n_keys
    i = torch.arange(n_queries, device=device).unsqueeze(1)  # (T_q, 1)
    j = torch.arange(n_keys, device=device).unsqueeze(0)  # (1, T_k)
    return j <= i + offset
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "padding_mask", "locked": false, "schema_version": 3, "solution": true}
def padding_mask(lengths: Tensor, max_seq_len: int | None = None) -> Tensor:
    """Key-padding mask from sequence lengths.

    Args:
        lengths: ``(B,)`` integer tensor, the number of real tokens in each sequence
            (real tokens first, then padding).
        max_seq_len: the padded length ``T_k``; default ``lengths.max()``.

    Returns:
        bool tensor of shape ``(B, 1, 1, T_k)``; ``True`` marks a real token.
    """
    ### BEGIN SOLUTION
    max_seq_len = int(lengths.max()) if max_seq_len is None else max_seq_len
    positions = torch.arange(max_seq_len, device=lengths.device)
    keep = positions.unsqueeze(0) < lengths.unsqueeze(1)  # (B, T_k)
    return keep[:, None, None, :]
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "combine_masks", "locked": false, "schema_version": 3, "solution": true}
def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Logical AND of any number of broadcastable bool masks; ``None`` entries are skipped.

    Returns ``None`` when every argument is ``None`` (nothing is masked).
    Example: ``combine_masks(causal (T, T), padding (B, 1, 1, T))`` has shape ``(B, 1, T, T)``.
    """
    ### BEGIN SOLUTION
    result = None
    for m in masks:
        if m is None:
            continue
        result = m if result is None else (result & m)
    return result
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_masks", "locked": true, "points": 2, "schema_version": 3, "solution": false}
expected = torch.tensor([[1, 0, 0, 0],
                         [1, 1, 0, 0],
                         [1, 1, 1, 0],
                         [1, 1, 1, 1]], dtype=torch.bool)
m = causal_mask(4)
assert isinstance(m, torch.Tensor) and m.dtype == torch.bool, (
    "causal_mask must return a bool tensor")
assert m.shape == (4, 4), f"causal_mask(4) should have shape (4, 4), got {tuple(m.shape)}"
assert torch.equal(m, expected), (
    f"causal_mask(4) should be lower-triangular (query i sees keys j <= i), got\n{m.int()}")
# Two new queries after three cached tokens: positions 3 and 4 see keys 0..3 and 0..4.
m = causal_mask(2, offset=3)
assert m.shape == (2, 5), f"causal_mask(2, offset=3) should have shape (2, 5), got {tuple(m.shape)}"
assert torch.equal(m, torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)), (
    f"with offset=3, query i sees keys j <= i + 3; got\n{m.int()}")
assert causal_mask(3, 5).shape == (3, 5), "n_keys sets the number of columns"
# More keys than queries, offset 0: top-left (query i sees keys j <= i)...
assert torch.equal(causal_mask(3, 5), torch.ones(3, 5, dtype=torch.bool).tril()), (
    f"causal_mask(3, 5) aligns top-left (j <= i + 0); got\n{causal_mask(3, 5).int()}")
# ...and bottom-right (FlashAttention's and Hugging Face's causal) is offset = T_k - T_q.
assert torch.equal(causal_mask(3, 5, offset=2), torch.ones(3, 5, dtype=torch.bool).tril(2)), (
    "causal_mask(3, 5, offset=2): the last query sees every key (bottom-right alignment)")

p = padding_mask(torch.tensor([2, 4]))
assert p.dtype == torch.bool and p.shape == (2, 1, 1, 4), (
    f"padding_mask([2, 4]) should be a bool (B, 1, 1, T_k) = (2, 1, 1, 4) tensor, got "
    f"{p.dtype} {tuple(p.shape)}")
assert torch.equal(p[:, 0, 0], torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)), (
    f"the first `length` keys are real (True), the rest padding (False); got\n{p[:, 0, 0].int()}")
assert padding_mask(torch.tensor([1, 2]), max_seq_len=5).shape == (2, 1, 1, 5), "max_seq_len sets T_k"

both = combine_masks(causal_mask(4), None, padding_mask(torch.tensor([2, 4])))
assert both.shape == (2, 1, 4, 4), (
    f"causal (4, 4) AND padding (2, 1, 1, 4) gives (2, 1, 4, 4), got {tuple(both.shape)}")
assert torch.equal(both[0, 0], expected & torch.tensor([1, 1, 0, 0], dtype=torch.bool)), (
    "a key is visible only if *every* mask allows it (logical AND)")
assert combine_masks(None, None) is None, "with no masks at all, return None"
print("✓ causal_mask, padding_mask and combine_masks pass the visible checks")

# %% [markdown]
# Here is your causal mask AND a padding mask for a batch of two sequences of lengths 3
# and 5, drawn as characters (`#` = may attend). Check that the second sequence's picture
# is plain causal, and that the first one never looks at its last two (padded) keys.

# %% tags=["skip-grading"]
demo_mask = combine_masks(causal_mask(5), padding_mask(torch.tensor([3, 5])))  # (2, 1, 5, 5)
for b in range(2):
    print(f"sequence {b}:")
    for row in demo_mask[b, 0]:
        print("   ", " ".join("#" if allowed else "." for allowed in row.tolist()))

# %% [markdown]
# ## 3. Attention does not know the order of its inputs
#
# Look at the formula again: nothing in $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$ refers to
# *where* a token sits. If we shuffle the rows of the input with a permutation $P$, then
# queries, keys and values are shuffled the same way, the score matrix has its rows and
# columns shuffled, and the output comes back shuffled in exactly the same way:
#
# $$ f(PX) = P\,f(X). $$
#
# This property is called **permutation equivariance**. It means that self-attention on
# its own sees a *set* of tokens, not a sequence: "dog bites man" and "man bites dog"
# produce the same outputs, just listed in a different order. Every Transformer therefore
# injects position information somewhere (Lecture 02 and Assignment 02 cover sinusoidal,
# learned, RoPE, ALiBi and relative encodings). A causal mask breaks the symmetry too,
# because the mask itself depends on position; that is why a decoder can still infer
# some order without any position encoding.
#
# The cell below checks the equation numerically with your attention (after you have
# solved Exercise 1), and the widget shows it with your attention inside a two-head
# self-attention (fixed random projections), with and without sinusoidal positions added
# to the input.

# %% tags=["skip-grading"]
x = torch.randn(6, 8, dtype=torch.float64)  # 6 tokens, 8 features: use them as q, k and v
perm = torch.tensor([3, 0, 5, 1, 4, 2])  # a shuffle P
f_of_x = scaled_dot_product_attention(x, x, x)  # f(X)
f_of_px = scaled_dot_product_attention(x[perm], x[perm], x[perm])  # f(PX)
print("max |f(PX) - P f(X)| =", (f_of_px - f_of_x[perm]).abs().max().item())

# %% tags=["skip-grading"]
permutation_demo(fns={"scaled_dot_product_attention": scaled_dot_product_attention})

# %% [markdown]
# ## 4. Multi-head attention
#
# One attention computes one weighted average per query, so it can follow only one
# "kind" of relation at a time. **Multi-head attention** runs $h$ smaller attentions in
# parallel, each on its own learned projection of the input, and concatenates the results
# (arXiv 1706.03762, section 3.2.2):
#
# $$
# \mathrm{MHA}(X_q, X_{kv}) = \mathrm{Concat}(\mathrm{head}_1, \dots, \mathrm{head}_h)\,W_o,
# \qquad
# \mathrm{head}_i = \mathrm{Attention}(X_q W_q^{(i)},\; X_{kv} W_k^{(i)},\; X_{kv} W_v^{(i)}).
# $$
#
# Each head works in $d_k = d_\text{model} / h$ dimensions, so all heads together cost
# about as much as a single full-width head. In code nobody builds $h$ separate small
# projections: one `nn.Linear(d_model, d_model)` computes all heads' queries at once, and
# we then **split the feature axis** into $h$ slices of width $d_k$, one per head:
#
# ```
# (B, T, d_model)  --view-->  (B, T, h, d_k)  --transpose(1, 2)-->  (B, h, T, d_k)
# ```
#
# Head $i$ owns features $i\,d_k, \dots, (i+1)\,d_k - 1$ of *every* position. The
# tempting shortcut `x.view(B, h, T, d_k)` has the right shape but the wrong content:
# `view` reads memory in order, so it would cut the sequence into $h$ chunks of
# positions and hand each head a jumble of tokens. After attention, **merging** undoes
# the split: transpose back to `(B, T, h, d_k)` and flatten the last two axes to
# `(B, T, d_model)`, then apply the output projection $W_o$. (After a `transpose` the
# tensor is no longer contiguous, so use `reshape` rather than `view` to flatten.)
#
# **Self- and cross-attention.** With $X_{kv} = X_q$ this is self-attention: a sequence
# attending to itself. In **cross-attention** the queries come from one sequence (the
# decoder's, length $T_q$) and keys and values from another (the encoder's output,
# length $T_k$); the weights then have shape `(B, h, T_q, T_k)`. The same module does both.
#
# **Parameter names.** Use `q_proj`, `k_proj`, `v_proj` and `out_proj`, each an
# `nn.Linear(d_model, d_model, bias=bias)`. These are the names Hugging Face models use,
# and they map one-to-one onto PyTorch's `nn.MultiheadAttention`: its `in_proj_weight`
# stacks the rows of `q_proj.weight`, `k_proj.weight` and `v_proj.weight`.
#
# ### Exercise 3: heads

# %% nbgrader={"grade": false, "grade_id": "split_heads", "locked": false, "schema_version": 3, "solution": true}
def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """``(B, T, d_model)`` -> ``(B, h, T, d_k)`` with ``d_k = d_model / h``.

    Head ``i`` gets features ``i * d_k .. (i + 1) * d_k - 1`` of every position.
    Raise ``ValueError`` if ``d_model`` is not divisible by ``n_heads``.
    """
    ### BEGIN SOLUTION
    B, T, d_model = x.shape
    if d_model % n_heads != 0:
        raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
    return x.view(B, T, n_heads, d_model // n_heads).transpose(1, 2)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "merge_heads", "locked": false, "schema_version": 3, "solution": true}
def merge_heads(x: Tensor) -> Tensor:
    """``(B, h, T, d_k)`` -> ``(B, T, h * d_k)``: the inverse of :func:`split_heads`."""
    ### BEGIN SOLUTION
    B, h, T, d_k = x.shape
    return x.transpose(1, 2).reshape(B, T, h * d_k)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "multi_head_attention", "locked": false, "schema_version": 3, "solution": true}
class MultiHeadAttention(nn.Module):
    """Multi-head attention with ``h`` heads of width ``d_k = d_model / h``.

    ``MHA(x_q, x_kv) = merge(Attention(split(q_proj(x_q)), split(k_proj(x_kv)),
    split(v_proj(x_kv)), mask)) -> out_proj``.

    Attributes (use exactly these names): ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``,
    each ``nn.Linear(d_model, d_model, bias=bias)``; ``d_model``, ``n_heads``, ``d_k``.
    Raise ``ValueError`` if ``d_model`` is not divisible by ``n_heads``.
    """

    def __init__(self, d_model: int, n_heads: int, bias: bool = True):
        super().__init__()
        ### BEGIN SOLUTION
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        self.d_model, self.n_heads, self.d_k = d_model, n_heads, d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        ### END SOLUTION

    def forward(self, x_q: Tensor, x_kv: Tensor | None = None, mask: Tensor | None = None) -> Tensor:
        """
        Args:
            x_q: ``(B, T_q, d_model)``, the sequence the queries come from.
            x_kv: ``(B, T_k, d_model)``, the sequence the keys and values come from;
                ``None`` means self-attention (``x_kv = x_q``).
            mask: optional bool mask broadcastable to ``(B, h, T_q, T_k)``.

        Returns:
            ``(B, T_q, d_model)``.
        """
        ### BEGIN SOLUTION
        x_kv = x_q if x_kv is None else x_kv
        q = split_heads(self.q_proj(x_q), self.n_heads)  # (B, h, T_q, d_k)
        k = split_heads(self.k_proj(x_kv), self.n_heads)  # (B, h, T_k, d_k)
        v = split_heads(self.v_proj(x_kv), self.n_heads)  # (B, h, T_k, d_k)
        out = scaled_dot_product_attention(q, k, v, mask)  # (B, h, T_q, d_k)
        return self.out_proj(merge_heads(out))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_multi_head_attention", "locked": true, "points": 3, "schema_version": 3, "solution": false}
x = torch.arange(2 * 3 * 8, dtype=torch.float32).view(2, 3, 8)  # (B=2, T=3, d_model=8)
s = split_heads(x, 2)
assert s.shape == (2, 2, 3, 4), (
    f"split_heads((2, 3, 8), 2) should be (B, h, T, d_k) = (2, 2, 3, 4), got {tuple(s.shape)}")
assert torch.equal(s[0, 1, 0], torch.tensor([4.0, 5.0, 6.0, 7.0])), (
    f"head 1 of token 0 should hold features 4..7 of token 0, got {s[0, 1, 0].tolist()}. "
    "Split the feature axis (view as (B, T, h, d_k)), then move the head axis forward.")
assert torch.equal(s[0, 0, 1], torch.tensor([8.0, 9.0, 10.0, 11.0])), (
    f"head 0 of token 1 should hold features 0..3 of token 1, got {s[0, 0, 1].tolist()}")
m = merge_heads(s)
assert m.shape == (2, 3, 8) and torch.equal(m, x), "merge_heads(split_heads(x, h)) must give x back"

mha = MultiHeadAttention(d_model=8, n_heads=2)
names = sorted(n for n, _ in mha.named_parameters())
assert names == sorted(f"{p}.{w}" for p in ("q_proj", "k_proj", "v_proj", "out_proj")
                       for w in ("weight", "bias")), f"unexpected parameter names {names}"
x = torch.randn(2, 5, 8)
assert mha(x).shape == (2, 5, 8), "self-attention output should be (B, T, d_model)"
assert mha(x[:, :3], torch.randn(2, 7, 8)).shape == (2, 3, 8), (
    "cross-attention with T_q=3 queries and T_k=7 keys should give (B, T_q, d_model) = (2, 3, 8)")

# The same weights in PyTorch's nn.MultiheadAttention must give the same output.
# (Note its opposite mask convention: attn_mask=True means *blocked* there.)
ref = nn.MultiheadAttention(8, 2, batch_first=True)
with torch.no_grad():
    ref.in_proj_weight.copy_(torch.cat([mha.q_proj.weight, mha.k_proj.weight, mha.v_proj.weight]))
    ref.in_proj_bias.copy_(torch.cat([mha.q_proj.bias, mha.k_proj.bias, mha.v_proj.bias]))
    ref.out_proj.weight.copy_(mha.out_proj.weight)
    ref.out_proj.bias.copy_(mha.out_proj.bias)
    mask = causal_mask(5)
    expected, _ = ref(x, x, x, attn_mask=~mask, need_weights=False)
    ours = mha(x, mask=mask)
assert torch.allclose(ours, expected, atol=1e-5), (
    f"your MultiHeadAttention differs from nn.MultiheadAttention with the same weights "
    f"(max difference {(ours - expected).abs().max().item():.2e}). Check the head split, "
    "the merge and the output projection.")
print("✓ split_heads, merge_heads and MultiHeadAttention pass the visible checks")

# %% [markdown]
# ### What attention costs
#
# For a sequence of length $T$ each head computes a $T \times T$ score matrix: $O(T^2 d)$
# time for the two matrix products and $O(T^2)$ memory for the scores. Doubling the
# context quadruples both. The cell below does the arithmetic for one layer at
# $T = 4096$ in 16-bit floats; Lecture 04 shows how FlashAttention avoids
# ever storing this matrix.

# %% tags=["skip-grading"]
T, n_heads_demo, bytes_per_element = 4096, 32, 2  # fp16 / bf16
per_head = T * T * bytes_per_element
print(f"one head:  {T}^2 scores x {bytes_per_element} bytes = {per_head / 1e6:.2f} MB")
print(f"{n_heads_demo} heads:  {n_heads_demo * per_head / 1e9:.2f} GB (one layer, one sequence)")

# %% [markdown]
# ## 5. The three families
#
# Transformer models come in three shapes. They share the blocks you just built; what
# tells them apart is **which mask** each attention uses and whether there is
# cross-attention.
#
# | family | attention | reads the input... | examples |
# |---|---|---|---|
# | **encoder-only** | bidirectional self-attention | all at once, each token sees both sides | BERT (arXiv 1810.04805), RoBERTa (1907.11692), DeBERTa (2006.03654), ELECTRA (2003.10555) |
# | **decoder-only** | causal self-attention | left to right, token $i$ sees $j \le i$ | GPT-3 (2005.14165), LLaMA (2302.13971), Mistral (2310.06825) |
# | **encoder-decoder** | bidirectional encoder; causal decoder + cross-attention to the encoder | source all at once, target left to right | T5 (1910.10683), BART (1910.13461), Whisper (2212.04356) |
#
# * An **encoder** gives every token a representation informed by the whole input, left
#   and right. That is what understanding tasks want (classify a sentence, tag each word,
#   find an answer span), but an encoder cannot generate text: position $t$ has already
#   seen token $t+1$, so predicting it would be cheating. BERT is pre-trained instead by
#   hiding some input tokens and predicting them from both sides.
# * A **decoder** only looks back. Training predicts the next token at every position in
#   one pass, and at inference the model extends its own output one token at a time, so
#   anything phrased as "continue this text" fits: chat, code completion, few-shot prompts.
# * An **encoder-decoder** reads a complete source with an encoder, then generates a
#   *different* sequence with a decoder whose **cross-attention** lets every target
#   position consult the whole source: translation, summarisation, speech to text. The
#   cross-attention is *not* causal: the source is fully known before decoding starts.
#   Only source padding is hidden from it.
#
# The widget draws the three patterns side by side, made with your `causal_mask` and
# `padding_mask`: encoder-only models use the left one, decoder-only models the middle one,
# encoder-decoder models all three.

# %% tags=["skip-grading"]
families_explorer(fns={"causal_mask": causal_mask, "padding_mask": padding_mask})

# %% [markdown]
# ### The decoder block of an encoder-decoder
#
# A **block** wraps each sub-layer in a residual connection, $x + F(x)$ (arXiv
# 1512.03385), and a layer normalisation (arXiv 1607.06450). The decoder block of an
# encoder-decoder has three sub-layers: causal self-attention, cross-attention to the
# encoder output `memory`, and a position-wise feed-forward network (given to you as
# `FeedForward`, a two-layer MLP `fc2(act(fc1(x)))` applied to each position on its own;
# `hidden_dropout` drops hidden units before `fc2`, where PyTorch's layers do).
#
# Where the normalisation sits is a design choice with two names (Lecture 05 and
# Assignment 05 go deeper; arXiv 2002.04745 compares them):
#
# | Post-LN (`norm_first=False`; original paper, BART) | Pre-LN (`norm_first=True`; GPT-2, T5, LLaMA) |
# |---|---|
# | `x = norm1(x + SelfAttn(x))` | `x = x + SelfAttn(norm1(x))` |
# | `x = norm2(x + CrossAttn(x, memory))` | `x = x + CrossAttn(norm2(x), memory)` |
# | `x = norm3(x + FFN(x))` | `x = x + FFN(norm3(x))` |
#
# Details that matter:
#
# * The block builds its own causal mask over the target length (when `causal=True`,
#   the default) and ANDs it with `self_mask`, which carries extra restrictions such as
#   target padding. Use **your** `causal_mask` and `combine_masks`.
# * Cross-attention takes queries from the decoder stream and keys and values from
#   `memory` (not normalised again inside the block). Only `memory_mask` (typically the
#   source padding mask `(B, 1, 1, T_src)`) restricts it.
# * Each sub-layer's output passes through its dropout (`dropout1`, `dropout2`,
#   `dropout3`) before the residual addition. With `dropout=0` they do nothing, but keep
#   them so the block matches PyTorch's `nn.TransformerDecoderLayer`.
#
# ### Exercise 4: `DecoderBlock`
#
# Use your `MultiHeadAttention` for both attentions. The first lines of each method
# (argument checks) are written for you.

# %% nbgrader={"grade": false, "grade_id": "decoder_block", "locked": false, "schema_version": 3, "solution": true}
class DecoderBlock(nn.Module):
    """Decoder block of an encoder-decoder: causal self-attention, cross-attention, FFN.

    Attributes (use exactly these names, the hidden checks load weights by name):

    * ``self_attn``, ``cross_attn``: ``MultiHeadAttention(d_model, n_heads)``;
    * ``ff``: ``FeedForward(d_model, d_ff, activation, hidden_dropout=dropout)``;
    * ``norm1``, ``norm2``, ``norm3``: ``nn.LayerNorm(d_model, eps=layer_norm_eps)``;
    * ``dropout1``, ``dropout2``, ``dropout3``: ``nn.Dropout(dropout)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int,
        norm_first: bool = False,
        activation: str = "relu",
        dropout: float = 0.0,
        layer_norm_eps: float = 1e-5,
    ):
        super().__init__()
        check_block_args(d_model, n_heads, d_ff, dropout, activation)
        self.d_model = d_model
        self.norm_first = norm_first
        ### BEGIN SOLUTION
        self.self_attn = MultiHeadAttention(d_model, n_heads)
        self.cross_attn = MultiHeadAttention(d_model, n_heads)
        self.ff = FeedForward(d_model, d_ff, activation, hidden_dropout=dropout)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.dropout3 = nn.Dropout(dropout)
        ### END SOLUTION

    def forward(
        self,
        x: Tensor,
        memory: Tensor,
        self_mask: Tensor | None = None,
        memory_mask: Tensor | None = None,
        causal: bool = True,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T_tgt, d_model)``, the decoder stream.
            memory: ``(B, T_src, d_model)``, the encoder output.
            self_mask: optional bool mask broadcastable to ``(B, h, T_tgt, T_tgt)``,
                ANDed with the causal mask the block builds.
            memory_mask: optional bool mask broadcastable to ``(B, h, T_tgt, T_src)``.
            causal: build and apply the causal mask (default ``True``); ``False`` uses
                ``self_mask`` alone.

        Returns:
            ``(B, T_tgt, d_model)``.
        """
        check_sequence("x", x, self.d_model)
        check_sequence("memory", memory, self.d_model)
        if memory.size(0) != x.size(0):
            raise ValueError(
                f"memory batch size {memory.size(0)} must equal x batch size {x.size(0)}"
            )
        check_bool_mask("self_mask", self_mask)
        check_bool_mask("memory_mask", memory_mask)
        ### BEGIN SOLUTION
        if causal:
            self_mask = combine_masks(causal_mask(x.size(1), device=x.device), self_mask)

        def sa(h: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(h, mask=self_mask))

        def ca(h: Tensor) -> Tensor:
            # Q from the decoder (h), K and V from the encoder (memory).
            return self.dropout2(self.cross_attn(h, memory, mask=memory_mask))

        def ff(h: Tensor) -> Tensor:
            return self.dropout3(self.ff(h))

        if self.norm_first:
            x = x + sa(self.norm1(x))  # x + SelfAttn(LN(x))
            x = x + ca(self.norm2(x))  # x + CrossAttn(LN(x), memory)
            x = x + ff(self.norm3(x))  # x + FFN(LN(x))
        else:
            x = self.norm1(x + sa(x))  # LN(x + SelfAttn(x))
            x = self.norm2(x + ca(x))  # LN(x + CrossAttn(x, memory))
            x = self.norm3(x + ff(x))  # LN(x + FFN(x))
        return x
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_decoder_block", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_ = torch.manual_seed(0)  # reproducible examples
block = DecoderBlock(d_model=16, n_heads=4, d_ff=32).eval()
x, memory = torch.randn(2, 5, 16), torch.randn(2, 7, 16)  # (B, T_tgt, d), (B, T_src, d)
with torch.no_grad():
    out = block(x, memory)
    assert out.shape == (2, 5, 16), (
        f"expected (B, T_tgt, d_model) = (2, 5, 16), got {tuple(out.shape)}")

    # No peeking: changing target token 3 must not change the outputs at positions 0..2.
    x2 = x.clone()
    x2[:, 3] += 1.0
    out2 = block(x2, memory)
    assert torch.allclose(out[:, :3], out2[:, :3], atol=1e-6), (
        "changing target token 3 changed the outputs at positions 0..2: the future leaks. "
        "Build causal_mask(T_tgt) and combine it with self_mask for the self-attention, and "
        "let the cross-attention read its keys and values from `memory`, not from x.")
    assert not torch.allclose(out[:, 3:], out2[:, 3:]), "position 3 should depend on token 3"

    # Cross-attention reads memory, all of it (it is not causal)...
    m2 = memory.clone()
    m2[:, -1] += 1.0
    out3 = block(x, m2)
    assert not torch.allclose(out[:, 0], out3[:, 0]), (
        "changing the last source token did not change target position 0: cross-attention "
        "should take its keys and values from `memory`, with no causal mask.")
    # ...except source padding hidden by memory_mask.
    src_pad = padding_mask(torch.tensor([5, 7]))  # sequence 0 has 2 padded source tokens
    out4 = block(x, memory, memory_mask=src_pad)
    out5 = block(x, m2, memory_mask=src_pad)
    assert torch.allclose(out4[0], out5[0], atol=1e-6), (
        "a padded source token (hidden by memory_mask) changed the output: pass memory_mask "
        "to the cross-attention")

# The same weights in PyTorch's nn.TransformerDecoderLayer must give the same output,
# in both normalisation layouts.
for norm_first in (False, True):
    ours = DecoderBlock(16, 4, 32, norm_first=norm_first).eval()
    ref = nn.TransformerDecoderLayer(16, 4, 32, dropout=0.0, batch_first=True,
                                     norm_first=norm_first).eval()
    with torch.no_grad():
        pairs = ((ours.self_attn, ref.self_attn), (ours.cross_attn, ref.multihead_attn))
        for mine, theirs in pairs:  # PyTorch stacks the q, k, v projections in one matrix
            projections = (mine.q_proj, mine.k_proj, mine.v_proj)
            theirs.in_proj_weight.copy_(torch.cat([p.weight for p in projections]))
            theirs.in_proj_bias.copy_(torch.cat([p.bias for p in projections]))
            theirs.out_proj.load_state_dict(mine.out_proj.state_dict())
        ref.linear1.load_state_dict(ours.ff.fc1.state_dict())  # PyTorch's linear1 is our fc1
        ref.linear2.load_state_dict(ours.ff.fc2.state_dict())
        for i in (1, 2, 3):
            getattr(ref, f"norm{i}").load_state_dict(getattr(ours, f"norm{i}").state_dict())
        # PyTorch's masks use True = blocked: invert ours.
        expected = ref(x, memory, tgt_mask=~causal_mask(5),
                       memory_key_padding_mask=~src_pad[:, 0, 0])
        got = ours(x, memory, memory_mask=src_pad)
    assert torch.allclose(got, expected, atol=1e-5), (
        f"norm_first={norm_first}: your block differs from nn.TransformerDecoderLayer with the "
        f"same weights (max difference {(got - expected).abs().max().item():.2e}). Check the "
        "order of residual additions and LayerNorms in the table above.")
print("✓ DecoderBlock passes the visible checks")

# %% [markdown]
# ## 6. Which family for which task?
#
# For each task below, say which family (encoder-only, decoder-only or encoder-decoder)
# fits it best and **why**, in one or two sentences each. Argue from how the family
# attends (which mask, whether there is cross-attention) and what the task needs
# (is the whole input available? is the output a label or a new sequence?).
#
# 1. Sentiment classification of product reviews (positive / negative).
# 2. An open-ended chat assistant.
# 3. Translating English sentences into German.
# 4. Transcribing speech (an audio recording) into text.

# %% [markdown] nbgrader={"grade": true, "grade_id": "families_question", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# 1. **Sentiment classification: encoder-only** (BERT, RoBERTa). The whole review is
#    available before we decide, and the label depends on words on both sides of every
#    token ("not bad at all"). Bidirectional self-attention gives each token, and a pooled
#    `[CLS]` vector, context from the entire input; a small classifier head then outputs
#    the label. Nothing has to be generated, so a causal mask would only throw away
#    right-hand context.
# 2. **Chat: decoder-only** (GPT, LLaMA, Mistral). The answer is generated one token at a
#    time and each new token may depend only on what came before. The causal mask makes
#    training on next-token prediction at every position possible, and the conversation
#    so far is simply the prefix the model continues (with a KV cache at inference).
# 3. **Translation: encoder-decoder** (the original Transformer, T5, BART/mBART). The
#    source sentence is complete and is a different sequence from the output: the encoder
#    reads it bidirectionally once, the decoder generates German causally and, through
#    cross-attention, every target position can consult the whole source. (Large
#    decoder-only models can also translate when prompted, at higher cost.)
# 4. **Speech transcription: encoder-decoder** (Whisper). The input is another modality
#    (audio features), fully recorded before transcription, and much longer than the text.
#    A bidirectional encoder turns the audio into `memory`; a causal text decoder writes the
#    transcript token by token, cross-attending to the audio. (Encoder-only models with a
#    CTC head, such as wav2vec 2.0, are a valid alternative answer if justified.)
#
# Marking: 0.5 point per task, for a sensible family *and* a reason that refers to the
# attention pattern or to the input/output structure of the task.
# ### END SOLUTION

# %% [markdown]
# ## 7. Question: order and cost
#
# Answer in a few sentences each, from what you built:
#
# 1. An encoder without any positional information reads "the dog bit the man" and
#    "the man bit the dog". What can it tell apart, by the property of section 3? (Think
#    of the output at each word, and of a pooled summary of the sentence.)
# 2. A causal decoder with **no** positional encoding at all still learns word order
#    (NoPE, arXiv 2305.19466). Where can position information come from?
# 3. How many bytes do the attention scores of one head take for $T = 4096$ tokens in
#    fp16, and for 32 heads? How does that grow with $T$?

# %% [markdown] nbgrader={"grade": true, "grade_id": "order_and_cost_question", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# 1. Nothing that depends on order. Self-attention without positions is permutation
#    equivariant: each word's output depends on the word and on the *set* of words
#    around it, so "dog", "man", "bit" and each "the" get the same output vector in both
#    sentences, only at other positions, and any pooled summary (the mean, or a `[CLS]`
#    token that sees everything) is identical. Who bit whom is invisible: a bag of words.
# 2. From the causal mask. Query $t$ sees exactly $t + 1$ keys, so the inputs are no
#    longer symmetric: with a uniform attention over the visible prefix the first token
#    gets weight $1/(t+1)$, and averaging any feature that marks the start gives a number
#    that falls with $t$; later layers can read the position from it. A bidirectional
#    encoder has no such asymmetry.
# 3. $4096^2 \times 2$ bytes $= 33{,}554{,}432$ bytes, about 33.5 MB per head, and
#    $32 \times$ that, about 1.07 GB, for one layer and one sequence. It grows with
#    $T^2$: twice the context, four times the memory (the cost that Assignments 03 and 04
#    attack).
#
# Marking: 1 point per part. (1) the same outputs up to a permutation, so nothing
# order-dependent is visible; (2) the causal mask breaks the symmetry (the number of
# visible keys reveals the position); (3) 33.5 MB and 1.07 GB, quadratic in $T$.
# ### END SOLUTION

# %% [markdown]
# ## Summary
#
# * Attention is `softmax(Q K^T / sqrt(d_k) + M) V`: scores, a mask applied *before* the
#   softmax, a probability distribution per query, a weighted average of values.
# * A fully masked row has no sensible distribution; we define its weights as zeros
#   instead of letting `NaN` escape.
# * Masks decide who sees whom: none (bidirectional), causal (`j <= i`, shifted by the
#   cache length during generation), key padding, combined with AND.
# * Without positions, self-attention is permutation-equivariant: order must be added.
# * Multi-head attention splits the *feature* axis into `h` heads of width
#   `d_model / h`, attends in each, and merges them back through `W_o`.
# * The three families differ in their masks: encoder-only (bidirectional),
#   decoder-only (causal), encoder-decoder (bidirectional encoder, causal decoder,
#   cross-attention from decoder queries to encoder keys and values).
#
# Next: how Transformers learn about order (positional encodings, Lecture 02 and
# Assignment 02).
