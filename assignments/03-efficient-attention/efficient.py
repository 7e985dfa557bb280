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
# # Assignment 03: Efficient attention
#
# Attention as you wrote it in Assignment 01 compares every query with every key: for a
# sequence of $T$ tokens that is $T^2$ scores per head and layer. At $T = 4096$ in fp16
# the score matrix of one head already takes 33.5 MB. And when a decoder generates text,
# a second cost grows with the context: the **KV cache**, the keys and values of every
# past token, which each new token must read. This assignment builds the main ideas
# that modern models use against both costs.
#
# | part | you write | points |
# |---|---|---|
# | 1 | sparse masks: `sliding_window_mask`, `band_mask`, `dilated_mask` | 3 |
# | 1b | global tokens: `global_token_mask` | 2 |
# | 2 | linear attention: `linear_attention`, `causal_linear_attention` | 3 |
# | 3 | KV-cache arithmetic: `kv_cache_bytes` | 1 |
# | 4 | grouped-query attention with a KV cache: `repeat_kv`, `DynamicKVCache.append`, `GroupedQueryAttention` | 4 |
# | 5 | multi-head latent attention: `mla_cache_bytes`, the two paths of `MultiHeadLatentAttention` | 3 |
# | 5b | a short written answer: MLA or GQA? | 3 (read by a person) |
# | 6 | differential attention: `lambda_init_fn`, `differential_attention`, `DifferentialAttention` | 3 |
#
# **How this notebook is graded.** Fill in each region marked `YOUR CODE HERE`. The test
# cell after each part runs quick checks; the grader runs its own hidden checks on other
# inputs and scores each part by the fraction of them that pass. While the hidden checks
# run, the course toolkit's reference versions of the functions you write here (and
# `torch.nn.functional.scaled_dot_product_attention`) are switched off. Plain tensor
# operations are all fine, and so is `scaled_dot_product_attention` from Assignment 01,
# which this notebook imports from the toolkit.
#
# Conventions are those of Assignment 01: attention tensors are `(B, heads, T, d)`,
# masks are `bool` with **`True` = may attend**.

# %%
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

# From earlier assignments and the toolkit: attention itself (Assignment 01), masks,
# RoPE (Assignment 02), input checks, and the cache class MLA uses.
from toolkit.arguments import check_int, check_kv_heads, check_qkv
from toolkit.attention import attention_weights, scaled_dot_product_attention
from toolkit.linear_attention import FeatureMap, elu_feature_map
from toolkit.masks import causal_mask, combine_masks, mask_cell_count, query_key_offsets
from toolkit.mla import LatentKVCache
from toolkit.notebook import friendly_errors
from toolkit.position import apply_rope
from toolkit.widgets.efficient import (
    differential_explorer,
    kv_cache_calculator,
    linear_attention_explorer,
    mask_gallery,
    mla_explorer,
)

friendly_errors()  # one short line, not a long traceback, for an exercise not written yet

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. Sparse attention patterns
#
# The simplest way to make attention cheaper is to compute fewer scores. A **sparse
# pattern** is a mask that keeps only some (query, key) cells; a sparse kernel then never
# computes the others, so the cost grows like $T \times$ (keys per query) instead of
# $T^2$. Here we build the patterns as dense boolean matrices, to *see* and *count* them.
#
# * **Sliding window** (Longformer, arXiv 2004.05150; Mistral 7B, arXiv 2310.06825). Query
#   $i$ of a decoder sees the last $w$ positions, itself included:
#   $$ i - w < j \le i. $$
#   So $w$ counts keys *including* the query's own position (Mistral's $w = 4096$), and
#   the first queries, which have fewer than $w$ predecessors, see $i + 1$ keys. With
#   $w \ge T$ this is the ordinary causal mask.
# * **Band** (bidirectional sliding window, as in an encoder): query $i$ sees
#   $|i - j| \le r$, $r$ neighbours on each side.
# * **Dilated window** (Longformer): the window skips keys at a fixed stride $\delta$.
#   The causal form sees $j = i - m\delta$ for $m = 0, \dots, w - 1$ (and the
#   bidirectional form also $j = i + m\delta$). It spans $(w - 1)\delta + 1$ positions for
#   the price of $w$ cells per side; $\delta = 1$ is the plain window.
#
# **Count the cells exactly.** A band of radius $r$ is *not* $T(2r + 1)$ cells: the rows
# near the edges lose the neighbours that would fall outside the sequence. The diagonal
# has $T$ cells and the $k$-th off-diagonal on each side $T - k$, so the band has
# $T + 2\sum_{k=1}^{r}(T - k)$ cells: for $T = 8$, $r = 1$ that is $8 + 7 + 7 = 22$, not 24.
# Likewise a causal window has $\sum_i \min(i + 1, w)$ cells.
#
# **Receptive field.** One sliding-window layer lets a token read $w$ positions back, but
# the next layer reads *their* outputs, which already summarise $w$ positions each. After
# $L$ layers information can travel about $L \times w$ tokens: Mistral 7B's 32 layers
# with $w = 4096$ give the quoted 131,072. (Counted exactly with $i - w < j \le i$, one
# hop spans $w - 1$ positions, so the last token hears $L(w - 1) + 1$ positions.)
#
# ### Exercise 1: three mask builders
#
# The helper `query_key_offsets(n)` gives the `(n, n)` integer matrix of `i - j` (query index minus
# key index). Each mask is one or two comparisons on it. The argument checks are written
# for you.

# %% nbgrader={"grade": false, "grade_id": "sliding_window_mask", "locked": false, "schema_version": 3, "solution": true}
def sliding_window_mask(n: int, window: int, *, device=None) -> Tensor:
    """Causal sliding window: query ``i`` sees keys ``i - window < j <= i``.

    ``window`` counts keys including the query's own position; ``window >= n`` gives
    the plain causal mask.

    Returns:
        bool ``(n, n)``.
    """
    check_int("n", n)
    check_int("window", window)
    ### BEGIN SOLUTION
    d = query_key_offsets(n, device)  # d = i - j
    return (d >= 0) & (d < window)  # 0 <= i - j < w  <=>  i - w < j <= i
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "band_mask", "locked": false, "schema_version": 3, "solution": true}
def band_mask(n: int, radius: int, *, device=None) -> Tensor:
    """Bidirectional band: query ``i`` sees keys with ``|i - j| <= radius``.

    Returns:
        bool ``(n, n)``.
    """
    check_int("n", n)
    check_int("radius", radius, minimum=0)
    ### BEGIN SOLUTION
    return query_key_offsets(n, device).abs() <= radius  # |i - j| <= r
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "dilated_mask", "locked": false, "schema_version": 3, "solution": true}
def dilated_mask(n: int, window: int, dilation: int, causal: bool = True, *, device=None) -> Tensor:
    """Dilated sliding window (Longformer).

    Query ``i`` sees ``j = i - m * dilation`` for ``m = 0 .. window - 1``; with
    ``causal=False`` also ``j = i + m * dilation``. ``dilation = 1`` gives
    ``sliding_window_mask`` (causal) or ``band_mask(n, window - 1)`` (bidirectional).

    Returns:
        bool ``(n, n)``.

    Hint: a key is visible when its distance (``i - j``, or ``|i - j|`` if not causal)
    is a multiple of ``dilation`` (``Tensor.remainder``) and lies in
    ``[0, (window - 1) * dilation]``.
    """
    check_int("n", n)
    check_int("window", window)
    check_int("dilation", dilation)
    ### BEGIN SOLUTION
    d = query_key_offsets(n, device)  # i - j
    dist = d if causal else d.abs()
    on_stride = dist.remainder(dilation) == 0  # (i - j) is a multiple of the dilation
    in_reach = (dist >= 0) & (dist <= (window - 1) * dilation)  # at most window-1 strides
    return on_stride & in_reach
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sparse_masks", "locked": true, "points": 3, "schema_version": 3, "solution": false}
m = sliding_window_mask(5, 3)
assert isinstance(m, torch.Tensor) and m.dtype == torch.bool and m.shape == (5, 5), (
    "sliding_window_mask(5, 3) must be a bool (5, 5) tensor")
expected = torch.tensor([[1, 0, 0, 0, 0],
                         [1, 1, 0, 0, 0],
                         [1, 1, 1, 0, 0],
                         [0, 1, 1, 1, 0],
                         [0, 0, 1, 1, 1]], dtype=torch.bool)
assert torch.equal(m, expected), (
    f"sliding_window_mask(5, 3) should let query i see keys i-3 < j <= i (3 keys, itself "
    f"included); got\n{m.int()}")
assert torch.equal(sliding_window_mask(6, 10), causal_mask(6)), "window >= n is plain causal"
assert mask_cell_count(sliding_window_mask(8, 3)) == 21, "sum_i min(i + 1, 3) = 1 + 2 + 6 * 3"

b = band_mask(8, 1)
assert b.dtype == torch.bool and b.shape == (8, 8), "band_mask(8, 1) must be a bool (8, 8) tensor"
assert mask_cell_count(b) == 22, (
    f"band_mask(8, 1) has {mask_cell_count(b)} cells, expected 8 + 7 + 7 = 22 (not 24: the edge "
    "rows have only one neighbour)")
assert torch.equal(b, b.T), "a band is symmetric: |i - j| <= r"
assert torch.equal(band_mask(4, 0), torch.eye(4, dtype=torch.bool)), "radius 0 is the diagonal"

dm = dilated_mask(7, 3, 2)
assert dm.dtype == torch.bool and dm.shape == (7, 7), "dilated_mask must be a bool (n, n) tensor"
assert dm[6].nonzero().flatten().tolist() == [2, 4, 6], (
    f"query 6 with window 3 and dilation 2 sees keys 6, 4, 2; got {dm[6].nonzero().flatten()}")
assert torch.equal(dilated_mask(9, 3, 1), sliding_window_mask(9, 3)), "dilation 1 = sliding window"
assert torch.equal(dilated_mask(9, 3, 1, causal=False), band_mask(9, 2)), (
    "dilation 1, bidirectional = band of radius window - 1")
print("✓ sliding_window_mask, band_mask and dilated_mask pass the visible checks")

# %% [markdown]
# ### Exercise 1b: global tokens
#
# A window alone never lets the first token hear the last one in one layer: the
# information has to hop $T / w$ layers. Longformer (arXiv 2004.05150) and BigBird
# (arXiv 2007.14062) add a few **global tokens** (the `[CLS]` token, the question in
# question answering) that break this: a global token **sees every key** (its whole row
# is `True`) and **is seen by every query** (its whole column is `True`). The rest of the
# pattern, the local window, stays as it was:
#
# $$ M_{ij} = \text{base}_{ij} \;\lor\; (i \in G) \;\lor\; (j \in G). $$
#
# Both halves are needed. Rows alone let the global token *read* everything but nobody
# reads it back; columns alone let everybody read it, but it only ever knew its own
# window. With both, any token reaches any other in two hops through a global token
# ($i \to g \to j$), and the global token itself hears the whole sequence **in one
# layer**. The price is $2 |G| T$ extra cells at most, still linear in $T$. With a
# symmetric base (a band) the result is symmetric.
#
# Conventions (the hidden checks test each one, the device aside):
#
# * `global_indices` is any iterable of ints (a list, a `range`) or an integer tensor
#   of any shape; repeated indices are fine; an empty one leaves the base unchanged.
#   An index outside `[0, n)` raises `ValueError` (negative indices are not counted from
#   the end).
# * `base` is a bool `(n, n)` mask or `None` (no local pattern: only the global rows
#   and columns are `True`). Anything else (another shape, another dtype) raises
#   `ValueError`. **Do not modify `base`**: return a new tensor.
# * The result is a bool `(n, n)` tensor on `device` (`base`'s device when a base is
#   given), in the bidirectional (encoder) form. A decoder would AND it with
#   `causal_mask(n)`; that is not part of this function.
#
# The argument checks are written for you.

# %% nbgrader={"grade": false, "grade_id": "global_token_mask", "locked": false, "schema_version": 3, "solution": true}
def global_token_mask(n: int, global_indices, base: Tensor | None = None, *, device=None) -> Tensor:
    """Add global tokens to a pattern: they attend to all keys and all queries attend to them.

    Args:
        n: sequence length.
        global_indices: positions of the global tokens (iterable of ints or int tensor).
        base: the local pattern to extend, bool ``(n, n)``, or ``None``.

    Returns:
        bool ``(n, n)``: ``base OR (row i is global) OR (column j is global)``.
    """
    check_int("n", n)
    if isinstance(global_indices, Tensor):
        idx = global_indices.reshape(-1).to(dtype=torch.long, device=device)
    else:
        idx = torch.as_tensor(list(global_indices), dtype=torch.long, device=device)
    if idx.numel() and (int(idx.min()) < 0 or int(idx.max()) >= n):
        raise ValueError(f"global_indices must lie in [0, {n}), got {idx.tolist()}")
    ### BEGIN SOLUTION
    if base is None:
        mask = torch.zeros(n, n, dtype=torch.bool, device=device)
    else:
        if base.shape != (n, n) or base.dtype != torch.bool:
            raise ValueError(
                f"base must be a bool ({n}, {n}) mask, got {base.dtype} {tuple(base.shape)}"
            )
        mask = base.clone()
    mask[idx, :] = True  # global queries see every key
    mask[:, idx] = True  # every query sees the global keys
    return mask
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_global_tokens", "locked": true, "points": 2, "schema_version": 3, "solution": false}
local = band_mask(8, 1)
g = global_token_mask(8, [0, 5], base=local)
assert isinstance(g, torch.Tensor) and g.dtype == torch.bool and g.shape == (8, 8), (
    "global_token_mask(8, [0, 5], base=...) must be a bool (8, 8) tensor")
assert g[[0, 5]].all(), "a global token's row is all True: it sees every key"
assert g[:, [0, 5]].all(), "a global token's column is all True: every query sees it"
others = [i for i in range(8) if i not in (0, 5)]
assert torch.equal(g[others][:, others], local[others][:, others]), (
    "away from the global rows and columns the window must stay exactly as it was")
assert torch.equal(g, g.T), "a band plus global tokens is symmetric"
assert mask_cell_count(g) == (2 * 8 + 2 * 8 - 4) + 14, (
    f"expected 42 cells: 2 full rows and 2 full columns (2*8 + 2*8 - 4 = 28) plus the 14 band "
    f"cells outside them; got {mask_cell_count(g)}")
assert torch.equal(local, band_mask(8, 1)), "base must not be modified: work on a copy"
assert torch.equal(global_token_mask(4, []), torch.zeros(4, 4, dtype=torch.bool)), (
    "no global tokens and no base: nothing is visible")
reach = (g.long() @ g.long()) > 0  # two layers: i -> anything that i sees -> ...
assert reach.all(), "through a global token every query reaches every key in two layers"
print("✓ global_token_mask passes the visible checks")

# %% [markdown]
# The gallery below draws your four patterns beside two from the toolkit (the dense
# causal mask and BigBird, arXiv 2007.14062, which adds **random blocks** to a window and
# global tokens), each titled with its exact cell count. Move the window and dilation
# sliders: the counts grow like $n \times w$, not $n^2$.

# %% tags=["skip-grading"]
mask_gallery(fns={"sliding_window_mask": sliding_window_mask, "band_mask": band_mask,
                  "dilated_mask": dilated_mask, "global_token_mask": global_token_mask})

# %% [markdown]
# Stacking layers widens what a token can hear. Multiplying the boolean mask by itself
# $L$ times (as integers) marks which positions can reach which through $L$ layers. With
# your window, the last token of a 16-token sequence hears $L(w - 1) + 1$ positions:

# %% tags=["skip-grading"]
n_demo, w_demo = 16, 3
hop = sliding_window_mask(n_demo, w_demo).long()
reach = torch.eye(n_demo, dtype=torch.long)
for layer in range(1, 5):
    reach = (hop @ reach).clamp(max=1)  # one more layer of attention
    heard = int(reach[-1].sum())
    print(f"{layer} layer(s): the last token hears {heard:2d} positions "
          f"(L(w - 1) + 1 = {layer * (w_demo - 1) + 1})")

# %% [markdown]
# ## 2. Linear attention
#
# Sparsity computes fewer scores. **Linear attention** (Katharopoulos et al., "Transformers
# are RNNs", arXiv 2006.16236) changes the similarity so that the scores never need to
# be formed at all. Write softmax attention for one query as a weighted average with
# similarity $\mathrm{sim}(q, k) = \exp(q \cdot k / \sqrt{d})$:
#
# $$ o_i = \frac{\sum_j \mathrm{sim}(q_i, k_j)\, v_j}{\sum_j \mathrm{sim}(q_i, k_j)}. $$
#
# Now pick a similarity that is a dot product of **feature maps**,
# $\mathrm{sim}(q, k) = \phi(q)^\top \phi(k)$, with $\phi(x) = \mathrm{elu}(x) + 1$
# (positive everywhere, so all weights stay positive). Because $\phi(q_i)$ does not depend
# on $j$, it comes out of both sums:
#
# $$ o_i = \frac{\phi(q_i)^\top \sum_j \phi(k_j) v_j^\top}{\phi(q_i)^\top \sum_j \phi(k_j)}
#        = \frac{\phi(q_i)^\top S}{\phi(q_i)^\top z}, \qquad
#    S = \phi(K)^\top V \;(d \times d_v), \quad z = \phi(K)^\top \mathbf 1 \;(d). $$
#
# $S$ and $z$ are computed once, in $O(T d\, d_v)$: **linear** in $T$. Like the paper, we
# use no $1/\sqrt{d}$: a constant factor on $\phi(q)^\top \phi(k)$ would cancel between
# the numerator and the denominator.
# Forgetting that denominator is the classic mistake: the output is then an
# unnormalised sum whose size grows with the number of keys.
#
# **Causal linear attention.** In a decoder, query $i$ may only use keys $j \le i$, so $S$
# and $z$ become **prefix sums**:
#
# $$ S_i = \sum_{j \le i} \phi(k_j) v_j^\top, \qquad z_i = \sum_{j \le i} \phi(k_j), \qquad
#    o_i = \frac{\phi(q_i)^\top S_i}{\phi(q_i)^\top z_i}. $$
#
# Written as a loop, $S_i = S_{i-1} + \phi(k_i) v_i^\top$ and $z_i = z_{i-1} + \phi(k_i)$:
# a **recurrent network** whose state is the matrix $S$ and the vector $z$. That is the
# paper's title: a causal linear-attention model generates each new token in constant time
# and memory, however long the context. For training we want the parallel form: compute
# every $\phi(k_j) v_j^\top$ at once, `torch.cumsum` them along time, and contract with
# $\phi(q_i)$. All three ways to write it (the masked $T \times T$ form, the prefix sums,
# the RNN) give the same numbers, and the test cell checks that.
#
# ### Exercise 2: linear attention
#
# Shapes: `q, k (B, H, T, d)`, `v (B, H, T, d_v)`. Add `eps` to the denominator.
#
# **Which rules are checked, and how.** "Never build a $T \times T$ matrix" is enforced
# for `causal_linear_attention`: a hidden check records the shape of every tensor created
# during one call with $T = 12$ and fails if any has $12 \times 12$ as its last two axes
# (other temporaries, such as the `(B, H, T, d, d_v)` outer products, are fine). "No loop"
# is advice, not a rule: the checks compare values only, and a loop over time gives the
# same numbers (slowly).
# `einsum` or broadcasting (`a.unsqueeze(-1) * b.unsqueeze(-2)` is a batch of outer
# products) both work.

# %% nbgrader={"grade": false, "grade_id": "linear_attention", "locked": false, "schema_version": 3, "solution": true}
def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> Tensor:
    """Non-causal linear attention ``phi(Q) S / (phi(Q) z)``, ``S = phi(K)^T V``, ``z = phi(K)^T 1``.

    Args:
        q: ``(B, H, T_q, d)``; k: ``(B, H, T_k, d)``; v: ``(B, H, T_k, d_v)``.
        feature_map: ``phi``, applied to queries and keys.
        eps: added to the denominator.

    Returns:
        ``(B, H, T_q, d_v)``.
    """
    check_qkv(q, k, v)
    ### BEGIN SOLUTION
    phi_q, phi_k = feature_map(q), feature_map(k)
    kv = phi_k.transpose(-2, -1) @ v  # S = phi(K)^T V: (B, H, d, d_v)
    z = phi_k.sum(dim=-2)  # z = phi(K)^T 1: (B, H, d)
    numerator = phi_q @ kv  # phi(q_i)^T S: (B, H, T_q, d_v)
    denominator = (phi_q * z.unsqueeze(-2)).sum(-1, keepdim=True)  # phi(q_i)^T z: (B, H, T_q, 1)
    return numerator / (denominator + eps)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "causal_linear_attention", "locked": false, "schema_version": 3, "solution": true}
def causal_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> Tensor:
    """Causal linear attention with prefix sums over time (``torch.cumsum``), no loop.

    ``S_i = sum_{j<=i} phi(k_j) v_j^T`` (all of them at once: ``(B, H, T, d, d_v)``),
    ``z_i = sum_{j<=i} phi(k_j)``, ``out_i = phi(q_i)^T S_i / (phi(q_i)^T z_i + eps)``.
    Never build a ``T x T`` matrix.

    Args:
        q, k: ``(B, H, T, d)``; v: ``(B, H, T, d_v)`` (same ``T``).

    Returns:
        ``(B, H, T, d_v)``.
    """
    check_qkv(q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"causal attention needs T_q == T_k, got {q.shape[2]} and {k.shape[2]}")
    ### BEGIN SOLUTION
    phi_q, phi_k = feature_map(q), feature_map(k)
    outer = phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # phi(k_j) v_j^T: (B, H, T, d, d_v)
    S = outer.cumsum(dim=2)  # S_i = sum_{j<=i} phi(k_j) v_j^T
    z = phi_k.cumsum(dim=2)  # z_i = sum_{j<=i} phi(k_j): (B, H, T, d)
    numerator = (phi_q.unsqueeze(-1) * S).sum(dim=-2)  # phi(q_i)^T S_i: (B, H, T, d_v)
    denominator = (phi_q * z).sum(-1, keepdim=True)  # phi(q_i)^T z_i: (B, H, T, 1)
    return numerator / (denominator + eps)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_linear_attention", "locked": true, "points": 3, "schema_version": 3, "solution": false}
from toolkit.linear_attention import (  # noqa: E402  references for the three forms
    causal_linear_attention_recurrent,
    linear_attention_quadratic,
)

q, k = torch.randn(2, 3, 7, 4, dtype=torch.float64), torch.randn(2, 3, 7, 4, dtype=torch.float64)
v = torch.randn(2, 3, 7, 5, dtype=torch.float64)
out = linear_attention(q, k, v)
assert out.shape == (2, 3, 7, 5), f"linear_attention should return (B, H, T, d_v), got {out.shape}"
assert torch.allclose(out, linear_attention_quadratic(q, k, v), atol=1e-10), (
    "linear_attention differs from the quadratic form (phi(Q) phi(K)^T, row-normalised) @ V: "
    "did you divide by phi(q_i)^T z?")
ones = torch.ones(2, 3, 7, 1, dtype=torch.float64)
assert torch.allclose(linear_attention(q, k, ones), torch.ones(2, 3, 7, 1, dtype=torch.float64),
                      atol=1e-6), "with all values 1 the output must be 1: the weights sum to 1"

causal = causal_linear_attention(q, k, v)
assert causal.shape == (2, 3, 7, 5), f"expected (B, H, T, d_v), got {causal.shape}"
assert torch.allclose(causal, causal_linear_attention_recurrent(q, k, v), atol=1e-10), (
    "the prefix-sum form differs from the recurrent form (S_t = S_{t-1} + phi(k_t) v_t^T)")
assert torch.allclose(causal, linear_attention_quadratic(q, k, v, causal=True), atol=1e-10), (
    "the prefix-sum form differs from the masked quadratic form")
v2 = v.clone()
v2[:, :, 4:] += 1.0  # change the future
assert torch.allclose(causal_linear_attention(q, k, v2)[:, :, :4], causal[:, :, :4]), (
    "changing values 4.. changed outputs 0..3: the future leaks (use cumsum over time, dim=2)")
print("✓ linear attention passes the visible checks: prefix sums = RNN = masked quadratic form")

# %% [markdown]
# Your two functions in the explorer: pick a feature map, step through the running state
# $S_t$ (always $d \times d$), and see how far linear attention lands from softmax
# attention as $T$ grows. It is a different similarity, not an approximation that improves
# with length.

# %% tags=["skip-grading"]
linear_attention_explorer(fns={"linear_attention": linear_attention,
                               "causal_linear_attention": causal_linear_attention})

# %% [markdown]
# ## 3. The KV cache and what it costs
#
# A decoder generates one token at a time. Recomputing the keys and values of the whole
# prefix at every step would cost $O(T^2)$ projections per sequence, so every layer keeps
# the keys and values it has already computed: the **KV cache**. A new token then
# computes only its own $q, k, v$, appends $k, v$ to the cache and attends over all of it.
#
# The cache, not the weights, is what fills GPU memory at long context. It holds, for
# every layer, a key and a value vector per KV head and token:
#
# $$ \text{bytes} = 2 \times \text{layers} \times n_\text{kv heads} \times d_\text{head}
#    \times \text{tokens} \times \text{batch} \times \text{bytes per element}, $$
#
# the 2 counting K and V. **LLaMA-2 70B** (arXiv 2307.09288) has 80 layers, 64 query heads
# of size 128 and, thanks to grouped-query attention (next part), only 8 KV heads. In fp16
# (2 bytes), one token costs $2 \cdot 80 \cdot 8 \cdot 128 \cdot 2 = 327{,}680$ bytes
# (320 KiB), a 4096-token sequence 1.25 GiB. With a KV head per query head it would be
# eight times as much: 10 GiB per sequence, 80 GiB of cache alone for a batch of 8.
#
# ### Exercise 3: `kv_cache_bytes`

# %% nbgrader={"grade": false, "grade_id": "kv_cache_bytes", "locked": false, "schema_version": 3, "solution": true}
def kv_cache_bytes(
    n_layers: int,
    n_kv_heads: int,
    d_head: int,
    n_tokens: int,
    batch: int = 1,
    bytes_per_element: float = 2,
) -> float:
    """Size of a KV cache: ``2 x layers x n_kv_heads x d_head x tokens x batch x bytes``.

    ``bytes_per_element`` is 2 for fp16/bf16, 4 for fp32, 1 for fp8, and may be
    fractional (sub-byte quantisation). Return an ``int`` when the product is a whole
    number (``float(x).is_integer()``), the float otherwise.
    """
    for name, value in (
        ("n_layers", n_layers),
        ("n_kv_heads", n_kv_heads),
        ("d_head", d_head),
        ("n_tokens", n_tokens),
        ("batch", batch),
        ("bytes_per_element", bytes_per_element),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    ### BEGIN SOLUTION
    total = 2 * n_layers * n_kv_heads * d_head * n_tokens * batch * bytes_per_element  # K and V
    return int(total) if float(total).is_integer() else total
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_kv_cache_bytes", "locked": true, "points": 1, "schema_version": 3, "solution": false}
per_token = kv_cache_bytes(n_layers=80, n_kv_heads=8, d_head=128, n_tokens=1)
assert per_token == 327_680, (
    f"LLaMA-2 70B in fp16 needs 2 * 80 * 8 * 128 * 2 = 327,680 bytes per token, got {per_token}. "
    "Did you count both K and V?")
full = kv_cache_bytes(80, 8, 128, 4096)
assert full == 1_342_177_280 and isinstance(full, int), (
    f"4096 tokens should take 1,342,177,280 bytes (1.25 GiB) as an int, got {full!r}")
print(f"LLaMA-2 70B, 4096 tokens, fp16: {full / 2**30:.2f} GiB with GQA (8 KV heads), "
      f"{kv_cache_bytes(80, 64, 128, 4096) / 2**30:.2f} GiB with 64 KV heads")
assert kv_cache_bytes(1, 1, 1, 1, bytes_per_element=0.5) == 1, "half a byte per element, 2 elements"
print("✓ kv_cache_bytes passes the visible checks")

# %% [markdown]
# The calculator compares the cache of real models under multi-head, grouped-query,
# multi-query and latent attention (part 5) for a context length, batch and dtype of
# your choice, counted with your `kv_cache_bytes`.

# %% tags=["skip-grading"]
kv_cache_calculator(fns={"kv_cache_bytes": kv_cache_bytes})

# %% [markdown]
# ## 4. Multi-query and grouped-query attention
#
# The cache is proportional to the number of **KV heads**, so share them:
#
# * **MHA**: every query head has its own key and value head ($n_\text{kv} = n_\text{heads}$).
# * **MQA** (Shazeer, arXiv 1911.02150): all query heads share *one* key/value head. The
#   cache shrinks by $n_\text{heads}$; quality drops a little.
# * **GQA** (Ainslie et al., arXiv 2305.13245): the query heads form $n_\text{kv}$ groups of
#   $g = n_\text{heads} / n_\text{kv}$ **consecutive** heads, and each group shares one
#   key/value head. LLaMA-2 70B uses $64 / 8$: groups of 8.
#
# Which KV head does query head $h$ read? **Integer division**: $h \,/\!/\, g$. With 8 query
# heads and 2 KV heads, heads 0-3 read KV head 0 and heads 4-7 read KV head 1. The
# tempting `h % n_kv_heads` interleaves the groups instead (heads 0, 2, 4, 6 on KV head
# 0): it runs, has the right shapes, and is a different model: a LLaMA or Mistral
# checkpoint loads into it without an error and then gives wrong outputs.
#
# The simplest implementation copies each KV head $g$ times, *in place*, so that the
# usual attention code can run: `[k0, k1] -> [k0, k0, k0, k0, k1, k1, k1, k1]`. That is
# `torch.repeat_interleave(x, g, dim=1)`, or Hugging Face's `repeat_kv`: insert an axis
# after the head axis, `expand` it (no copy), and `reshape`. (`x.repeat(1, g, 1, 1)`
# *tiles* instead, `[k0, k1, k0, k1, ...]`, which is the modulo mapping.) Only the
# un-repeated $n_\text{kv}$ heads are stored in the cache: that is where the saving is.
#
# **Decoding with a cache.** Feed a prompt, then one token at a time. For the new tokens
# at absolute positions $P, P+1, \dots$ (with $P$ tokens already cached):
#
# 1. project them to $q$ (`n_heads` heads) and $k, v$ (`n_kv_heads` heads);
# 2. append $k, v$ to this layer's cache and take back *all* cached keys and values;
# 3. build the causal mask with the cache offset: new query $i$ sits at position $P + i$
#    and may see keys $j \le P + i$, i.e. `causal_mask(T, P + T, offset=P)` from
#    Assignment 01. Without the offset, a single new token would see only key 0;
# 4. repeat the KV heads, attend, merge heads, project with `o_proj`.
#
# Done right, feeding a sequence token by token through the cache gives exactly the
# outputs of one call on the whole sequence. That is the property the checks test.
#
# ### Exercise 4a: `repeat_kv`

# %% nbgrader={"grade": false, "grade_id": "repeat_kv", "locked": false, "schema_version": 3, "solution": true}
def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """Copy each KV head for its query heads: ``(B, n_kv, T, d) -> (B, n_kv * n_rep, T, d)``.

    Output head ``h`` is input head ``h // n_rep``: ``[k0, k0, k1, k1]``, not
    ``[k0, k1, k0, k1]``. ``n_rep == 1`` returns ``x`` itself.
    """
    if x.dim() != 4:
        raise ValueError(f"x must be (B, n_kv_heads, T, d), got shape {tuple(x.shape)}")
    if n_rep < 1:
        raise ValueError(f"n_rep must be >= 1, got {n_rep}")
    if n_rep == 1:
        return x
    ### BEGIN SOLUTION
    B, n_kv, T, d = x.shape
    # Insert a repeat axis *after* the KV-head axis, broadcast, then flatten the two:
    # index (kv, r) -> kv * n_rep + r, so output head h comes from kv = h // n_rep.
    return x[:, :, None, :, :].expand(B, n_kv, n_rep, T, d).reshape(B, n_kv * n_rep, T, d)
    ### END SOLUTION


# %% [markdown]
# ### Exercise 4b: the cache
#
# `DynamicKVCache` keeps, per layer, keys and values of shape `(B, n_kv_heads, T_cached, d)`.
# Write `append`: store the first `k, v` a layer receives, concatenate later ones along
# the **time** axis, and return the layer's full `(K, V)`. The list `self.keys` grows as
# new layers appear (fill the gaps with `None`). The other methods are given. (The name
# follows Hugging Face's `DynamicCache`: the cache grows as tokens arrive. The capstone's
# `StaticKVCache` instead pre-allocates room for `max_seq_len` positions.)

# %% nbgrader={"grade": false, "grade_id": "kv_cache", "locked": false, "schema_version": 3, "solution": true}
class DynamicKVCache:
    """Per-layer key/value cache for incremental decoding.

    ``keys[layer]`` and ``values[layer]`` are ``(B, n_kv_heads, T_cached, d)`` (or
    ``None`` before the layer's first step).
    """

    def __init__(self) -> None:
        self.keys: list[Tensor | None] = []
        self.values: list[Tensor | None] = []

    def append(self, layer_idx: int, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Add ``k, v (B, n_kv, T_new, d)`` to ``layer_idx``; return all its keys and values
        ``(B, n_kv, T_cached + T_new, d)``."""
        if layer_idx < 0:
            raise ValueError(f"layer_idx must be >= 0, got {layer_idx}")
        ### BEGIN SOLUTION
        while len(self.keys) <= layer_idx:
            self.keys.append(None)
            self.values.append(None)
        if self.keys[layer_idx] is None:
            self.keys[layer_idx], self.values[layer_idx] = k, v
        else:
            self.keys[layer_idx] = torch.cat([self.keys[layer_idx], k], dim=2)  # along time
            self.values[layer_idx] = torch.cat([self.values[layer_idx], v], dim=2)
        return self.keys[layer_idx], self.values[layer_idx]
        ### END SOLUTION

    def get(self, layer_idx: int) -> tuple[Tensor, Tensor] | None:
        """The cached ``(K, V)`` of a layer, or ``None`` if nothing is cached yet."""
        if layer_idx >= len(self.keys) or self.keys[layer_idx] is None:
            return None
        return self.keys[layer_idx], self.values[layer_idx]

    def length(self, layer_idx: int = 0) -> int:
        """Number of cached tokens in ``layer_idx`` (0 if empty)."""
        cached = self.get(layer_idx)
        return 0 if cached is None else cached[0].shape[2]

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    def nbytes(self) -> int:
        """Bytes held by all cached tensors (compare with ``kv_cache_bytes``)."""
        return sum(
            t.numel() * t.element_size() for t in self.keys + self.values if t is not None
        )

    def reset(self) -> None:
        self.keys.clear()
        self.values.clear()


# %% [markdown]
# ### Exercise 4c: `GroupedQueryAttention`
#
# Parameter names follow Hugging Face's LLaMA, so that checkpoints map one-to-one:
# `q_proj` (`d_model -> n_heads * d_head`), `k_proj` and `v_proj`
# (`d_model -> n_kv_heads * d_head`: the saving), `o_proj` (`n_heads * d_head -> d_model`),
# all `nn.Linear(..., bias=bias)`, with `d_head = d_model // n_heads`.
#
# `rotary`, if given, is a function `rotary(t, positions)` (such as RoPE from
# Assignment 02) applied to `q` and `k` at their absolute positions `P .. P + T - 1`
# *before* the keys go into the cache: cached keys keep the rotation they were stored
# with. Its layout: `t` is a heads-first tensor `(B, heads, T, d_head)`, called once on
# `q` (`n_heads` heads) and once on `k` (`n_kv_heads` heads), before `repeat_kv`;
# `positions` is a 1-D int64 tensor of shape `(T,)` on `x`'s device,
# `torch.arange(P, P + T)`; it returns a tensor of `t`'s shape. The hidden checks pass
# `lambda t, pos: apply_rope(t, pos)` (the course's RoPE, half-split layout) and compare
# with a reference that rotates at those absolute positions.

# %% nbgrader={"grade": false, "grade_id": "grouped_query_attention", "locked": false, "schema_version": 3, "solution": true}
class GroupedQueryAttention(nn.Module):
    """Grouped-query attention with an optional KV cache.

    ``n_kv_heads == n_heads`` is multi-head attention, ``n_kv_heads == 1`` multi-query.
    Attributes: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj`` (see above), ``d_head``,
    ``n_rep = n_heads // n_kv_heads``.
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, bias: bool = False):
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        check_kv_heads(n_heads, n_kv_heads)
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.n_rep = n_heads // n_kv_heads  # group size g
        ### BEGIN SOLUTION
        self.q_proj = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.k_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.v_proj = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.o_proj = nn.Linear(n_heads * self.d_head, d_model, bias=bias)
        ### END SOLUTION

    def forward(
        self,
        x: Tensor,
        mask: Tensor | None = None,
        cache: DynamicKVCache | None = None,
        layer_idx: int = 0,
        causal: bool = True,
        rotary: Callable[[Tensor, Tensor], Tensor] | None = None,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``; only the new tokens when decoding with a cache.
            mask: extra bool mask broadcastable to ``(B, n_heads, T, P + T)`` (e.g. key
                padding), ANDed with the causal mask.
            cache: a ``DynamicKVCache``; the new ``k, v`` (``n_kv_heads`` heads) are appended to
                ``layer_idx`` and the queries attend to everything cached so far.
            causal: the query at absolute position ``p`` sees keys ``<= p``.
            rotary: optional ``rotary(t, positions)`` for q and k.

        Returns:
            ``(B, T, d_model)``.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        ### BEGIN SOLUTION
        past = 0 if cache is None else cache.length(layer_idx)
        q = self.q_proj(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d)
        k = self.k_proj(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B,H_kv,T,d)
        v = self.v_proj(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        if rotary is not None:
            positions = torch.arange(past, past + T, device=x.device)
            q, k = rotary(q, positions), rotary(k, positions)
        if cache is not None:
            k, v = cache.append(layer_idx, k, v)  # (B, H_kv, past + T, d)
        attn_mask = causal_mask(T, past + T, offset=past, device=x.device) if causal else None
        attn_mask = combine_masks(attn_mask, mask)
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, past + T, d)
        out = scaled_dot_product_attention(q, k, v, attn_mask)  # (B, H, T, d)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, self.n_heads * self.d_head))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_gqa", "locked": true, "points": 4, "schema_version": 3, "solution": false}
kv = torch.arange(2.0).view(1, 2, 1, 1).expand(1, 2, 3, 4)  # KV head i holds the value i
rep = repeat_kv(kv, 3)
assert rep.shape == (1, 6, 3, 4), f"repeat_kv((1, 2, 3, 4), 3) should be (1, 6, 3, 4), got {rep.shape}"
assert rep[0, :, 0, 0].tolist() == [0, 0, 0, 1, 1, 1], (
    f"query heads 0-2 must read KV head 0 and heads 3-5 KV head 1 (h // 3), got "
    f"{rep[0, :, 0, 0].tolist()}: that looks like h % n_kv_heads")

cache = DynamicKVCache()
k0, v0 = torch.randn(2, 2, 3, 4), torch.randn(2, 2, 3, 4)
k1, v1 = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
cache.append(0, k0, v0)
K, V = cache.append(0, k1, v1)
assert K.shape == (2, 2, 4, 4), f"after 3 + 1 tokens the keys should be (2, 2, 4, 4), got {K.shape}"
assert torch.equal(K, torch.cat([k0, k1], 2)) and torch.equal(V, torch.cat([v0, v1], 2)), (
    "append along the time axis (dim=2), old tokens first")
cache.append(2, k1, v1)
assert cache.length(0) == 4 and cache.length(2) == 1 and cache.get(1) is None, (
    "layers are independent: appending to layer 2 must not touch layer 0")

gqa = GroupedQueryAttention(d_model=32, n_heads=8, n_kv_heads=2).eval()
assert gqa.k_proj.weight.shape == (8, 32), (
    f"k_proj maps d_model=32 to n_kv_heads * d_head = 2 * 4 = 8, got {tuple(gqa.k_proj.weight.shape)}")
x = torch.randn(2, 6, 32)
with torch.no_grad():
    full = gqa(x)
    assert full.shape == (2, 6, 32), f"expected (B, T, d_model) = (2, 6, 32), got {full.shape}"
    cache = DynamicKVCache()
    steps = [gqa(x[:, :3], cache=cache)] + [gqa(x[:, t:t + 1], cache=cache) for t in range(3, 6)]
    cached = torch.cat(steps, dim=1)
assert torch.allclose(cached, full, atol=1e-5), (
    "a prompt of 3 tokens then 3 single tokens through the cache must give the outputs of one "
    f"call on all 6 (max difference {(cached - full).abs().max():.2e}). Check the causal mask's "
    "offset (the number of cached tokens) and that you attend over the whole cache.")
assert cache.keys[0].shape == (2, 2, 6, 4), (
    f"the cache should hold only the 2 KV heads: (B, n_kv_heads, T, d_head) = (2, 2, 6, 4), got "
    f"{tuple(cache.keys[0].shape)}")
print("✓ repeat_kv, DynamicKVCache and GroupedQueryAttention pass the visible checks")

# %% [markdown]
# ## 5. Multi-head latent attention
#
# GQA shrinks the cache by *sharing* heads. **Multi-head latent attention** (MLA, from
# DeepSeek-V2, arXiv 2405.04434) shrinks it by *compressing*: each token stores one small
# latent vector $c^{KV}$ of $d_c$ numbers (512 in DeepSeek-V2), from which every head's key
# and value are reconstructed by up-projections,
#
# $$ c^{KV} = W^{DKV} x, \qquad k_i^C = W_i^{UK} c^{KV}, \qquad v_i = W_i^{UV} c^{KV}. $$
#
# RoPE does not fit that picture (part of the trick below needs $W^{UK}$ to meet the query
# with nothing position-dependent in between), so MLA adds a small **decoupled RoPE key**
# $k^R$ ($d_R = 64$ numbers, shared by all heads, cached too) and gives each query head a
# matching RoPE part: $q_i = [q_i^C; q_i^R]$, $k_i = [k_i^C; k^R]$, and the scores are
# $q_i \cdot k_i / \sqrt{d_h + d_R}$.
#
# **Cache size.** Per token and layer MLA stores $d_c + d_R = 576$ numbers, against
# $2 n_h d_h = 32{,}768$ for multi-head attention with DeepSeek-V2's 128 heads of 128. No
# factor 2 this time: the latent is the source of both keys and values. DeepSeek-V2 has 60
# layers, so in fp16 one token costs $60 \cdot 576 \cdot 2 = 69{,}120$ bytes.
#
# **Absorption.** At inference the per-head keys never need to exist:
#
# $$ q_i^C \cdot k_{i,j}^C = q_i^C \cdot (W_i^{UK} c_j) = \big((W_i^{UK})^\top q_i^C\big) \cdot c_j , $$
#
# so fold $W^{UK}$ into the query once and attend directly over the cached latents $c_j$
# (with $[c_j; k_j^R]$ as keys). The values likewise:
# $\sum_j p_{ij} W_i^{UV} c_j = W_i^{UV} \big(\sum_j p_{ij} c_j\big)$: attend with the latents
# as values, then apply $W^{UV}$ once. MLA at inference is thus multi-query attention over
# $(d_c + d_R)$-dimensional keys. Both paths compute the same numbers; the absorbed one
# never materialises a per-head key or value.
#
# ### Exercise 5a: `mla_cache_bytes`

# %% nbgrader={"grade": false, "grade_id": "mla_cache_bytes", "locked": false, "schema_version": 3, "solution": true}
def mla_cache_bytes(
    n_layers: int,
    d_latent: int,
    d_rope: int,
    n_tokens: int,
    batch: int = 1,
    bytes_per_element: float = 2,
) -> float:
    """MLA cache size: ``layers x (d_c + d_R) x tokens x batch x bytes`` (no factor 2).

    Return an ``int`` when the product is a whole number, the float otherwise.
    """
    for name, value in (
        ("n_layers", n_layers),
        ("d_latent", d_latent),
        ("d_rope", d_rope),
        ("n_tokens", n_tokens),
        ("batch", batch),
        ("bytes_per_element", bytes_per_element),
    ):
        if value < 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
    ### BEGIN SOLUTION
    total = n_layers * (d_latent + d_rope) * n_tokens * batch * bytes_per_element
    return int(total) if float(total).is_integer() else total
    ### END SOLUTION


# %% [markdown]
# ### Exercise 5b: the explicit and the absorbed path
#
# The class below is complete except for the attention itself, at the end of `forward`.
# Everything before it is given: `q_c (B, H, T, d_h)` and `q_r (B, H, T, d_R)` are the
# content and RoPE queries, `c_kv (B, 1, T_k, d_c)` and `k_r (B, 1, T_k, d_R)` the cached
# latents and RoPE keys (a single "head" shared by all query heads), `mask` the causal
# mask, and `W_UK (H, d_h, d_c)`, `W_UV (H, d_v, d_c)` the per-head up-projections. Use
# `self.scale` $= 1/\sqrt{d_h + d_R}$ as the attention scale.
#
# * **explicit** (`absorb=False`): rebuild $k^C = W^{UK} c$ and $v = W^{UV} c$ for every
#   head (`torch.einsum("bxtc,hdc->bhtd", c_kv, W_UK)` broadcasts the single latent head
#   over the $H$ heads), concatenate $[q^C; q^R]$ and $[k^C; k^R]$ (expand `k_r` to
#   $H$ heads) and attend.
# * **absorbed** (`absorb=True`): $q^{lat} = (W^{UK})^\top q^C$ of width $d_c$; queries
#   $[q^{lat}; q^R]$, keys $[c; k^R]$ (one head, broadcast), values $c$; then
#   $W^{UV}$ on the result.
#
# Either way `out` must be `(B, H, T, d_v)` before the final `o_proj`. The hidden checks
# compare values only: they do not look at which tensors the absorbed path creates, so
# "never materialises a per-head key or value" is the point of the exercise, not a rule
# they measure.

# %% nbgrader={"grade": false, "grade_id": "multi_head_latent_attention", "locked": false, "schema_version": 3, "solution": true}
class MultiHeadLatentAttention(nn.Module):
    """MLA with an explicit path (training) and an absorbed path (inference).

    Args:
        d_model: model width.
        n_heads: ``n_h``.
        d_head: ``d_h``, the per-head width of the content (non-RoPE) query/key.
        d_latent: ``d_c``, width of the cached KV latent.
        d_rope: ``d_R``, width of the decoupled RoPE query/key.
        d_q_latent: width of the query latent; ``None`` projects queries directly.
        d_value: per-head value width (default ``d_head``).
        rope_base: RoPE base.

    Parameter names follow Hugging Face's DeepSeek-V2 port.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_head: int,
        d_latent: int,
        d_rope: int,
        d_q_latent: int | None = None,
        d_value: int | None = None,
        rope_base: float = 10000.0,
        bias: bool = False,
    ):
        super().__init__()
        for name, value in (
            ("d_model", d_model),
            ("n_heads", n_heads),
            ("d_head", d_head),
            ("d_latent", d_latent),
            ("d_rope", d_rope),
        ):
            if value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if d_rope % 2:
            raise ValueError(f"d_rope must be even for RoPE, got {d_rope}")
        self.n_heads, self.d_head, self.d_latent, self.d_rope = n_heads, d_head, d_latent, d_rope
        self.d_value = d_head if d_value is None else d_value
        self.d_q_latent, self.rope_base = d_q_latent, rope_base
        self.scale = 1.0 / math.sqrt(d_head + d_rope)  # scores use the full q.k width
        q_width = n_heads * (d_head + d_rope)  # per head [q^C ; q^R]
        if d_q_latent is None:
            self.q_proj = nn.Linear(d_model, q_width, bias=bias)
        else:
            self.q_a_proj = nn.Linear(d_model, d_q_latent, bias=bias)  # W_DQ
            self.q_a_layernorm = nn.RMSNorm(d_q_latent, eps=1e-6)
            self.q_b_proj = nn.Linear(d_q_latent, q_width, bias=False)  # [W_UQ ; W_QR]
        self.kv_a_proj_with_mqa = nn.Linear(d_model, d_latent + d_rope, bias=bias)  # [W_DKV ; W_KR]
        self.kv_a_layernorm = nn.RMSNorm(d_latent, eps=1e-6)
        # No bias: absorption needs K = c W_UK and V = c W_UV to be linear in c.
        self.kv_b_proj = nn.Linear(d_latent, n_heads * (d_head + self.d_value), bias=False)
        self.o_proj = nn.Linear(n_heads * self.d_value, d_model, bias=bias)

    # -- pieces ------------------------------------------------------------------------

    def up_projections(self) -> tuple[Tensor, Tensor]:
        """``W_UK (n_h, d_head, d_c)`` and ``W_UV (n_h, d_value, d_c)``, views of ``kv_b_proj``."""
        w = self.kv_b_proj.weight.view(self.n_heads, self.d_head + self.d_value, self.d_latent)
        return w[:, : self.d_head], w[:, self.d_head :]

    def _queries(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Content and RoPE queries, ``(B, n_h, T, d_head)`` and ``(B, n_h, T, d_rope)``."""
        B, T, _ = x.shape
        if self.d_q_latent is None:
            q = self.q_proj(x)
        else:
            q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x)))  # c_Q = W_DQ x, then up
        q = q.view(B, T, self.n_heads, self.d_head + self.d_rope).transpose(1, 2)
        q_content, q_rope = q.split([self.d_head, self.d_rope], dim=-1)
        # q^R = RoPE(W_QR c_Q)
        q_rope = apply_rope(q_rope, positions, base=self.rope_base, layout="half")
        return q_content, q_rope

    def _latents(self, x: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """What gets cached: ``c_KV (B, 1, T, d_c)`` and the RoPE key ``k^R (B, 1, T, d_R)``."""
        compressed = self.kv_a_proj_with_mqa(x)  # (B, T, d_c + d_R)
        c_kv, k_rope = compressed.split([self.d_latent, self.d_rope], dim=-1)
        c_kv = self.kv_a_layernorm(c_kv).unsqueeze(1)  # c_KV = W_DKV x (normalised)
        # k^R = RoPE(W_KR x), one head shared by all query heads
        k_rope = apply_rope(k_rope.unsqueeze(1), positions, base=self.rope_base, layout="half")
        return c_kv, k_rope

    # -- forward -----------------------------------------------------------------------

    def forward(
        self,
        x: Tensor,
        cache: LatentKVCache | None = None,
        layer_idx: int = 0,
        causal: bool = True,
        absorb: bool = False,
    ) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``; only the new tokens when decoding with a cache.
            cache: a ``LatentKVCache`` (latents and RoPE keys), appended to at ``layer_idx``.
            causal: apply the causal mask (absolute positions, cache-aware).
            absorb: use the absorbed inference path (never builds per-head K or V).

        Returns:
            ``(B, T, d_model)``; both paths agree to float tolerance.
        """
        if x.dim() != 3:
            raise ValueError(f"x must be (B, T, d_model), got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        past = 0 if cache is None else cache.length(layer_idx)
        positions = torch.arange(past, past + T, device=x.device)
        q_c, q_r = self._queries(x, positions)  # (B, H, T, d_h), (B, H, T, d_R)
        c_kv, k_r = self._latents(x, positions)  # (B, 1, T, d_c), (B, 1, T, d_R)
        if cache is not None:
            c_kv, k_r = cache.append(layer_idx, c_kv, k_r)  # (B, 1, past + T, .)
        mask = causal_mask(T, past + T, offset=past, device=x.device) if causal else None
        W_UK, W_UV = self.up_projections()
        H, T_k = self.n_heads, c_kv.shape[2]

        ### BEGIN SOLUTION
        if not absorb:
            # Explicit: rebuild every head's key and value from the latent.
            k_c = torch.einsum("bxtc,hdc->bhtd", c_kv, W_UK)  # k^C = W_UK c: (B, H, T_k, d_h)
            v = torch.einsum("bxtc,hvc->bhtv", c_kv, W_UV)  # v = W_UV c: (B, H, T_k, d_v)
            q = torch.cat([q_c, q_r], dim=-1)  # [q^C ; q^R]
            k = torch.cat([k_c, k_r.expand(B, H, T_k, self.d_rope)], dim=-1)  # [k^C ; k^R]
            out = scaled_dot_product_attention(q, k, v, mask, self.scale)  # (B, H, T, d_v)
        else:
            # Absorbed: q^C . (W_UK c) = (W_UK^T q^C) . c, attend over the latents themselves.
            q_lat = torch.einsum("bhtd,hdc->bhtc", q_c, W_UK)  # W_UK^T q^C: (B, H, T, d_c)
            q = torch.cat([q_lat, q_r], dim=-1)  # (B, H, T, d_c + d_R)
            k = torch.cat([c_kv, k_r], dim=-1)  # (B, 1, T_k, d_c + d_R): one "KV head"
            o_lat = scaled_dot_product_attention(q, k, c_kv, mask, self.scale)  # sum_j p_ij c_j
            out = torch.einsum("bhtc,hvc->bhtv", o_lat, W_UV)  # W_UV (sum_j p_ij c_j)
        ### END SOLUTION
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * self.d_value))


# %% nbgrader={"grade": true, "grade_id": "test_mla", "locked": true, "points": 3, "schema_version": 3, "solution": false}
per_token = mla_cache_bytes(n_layers=60, d_latent=512, d_rope=64, n_tokens=1)
assert per_token == 69_120, (
    f"DeepSeek-V2 (60 layers, d_c + d_R = 576) in fp16 needs 69,120 bytes per token, got {per_token}")
mha = kv_cache_bytes(n_layers=60, n_kv_heads=128, d_head=128, n_tokens=1)
print(f"per token: MLA {per_token:,} bytes, MHA with 128 heads of 128 {mha:,} bytes "
      f"(saving {1 - per_token / mha:.1%})")

mla = MultiHeadLatentAttention(d_model=32, n_heads=4, d_head=8, d_latent=16, d_rope=4).eval()
x = torch.randn(2, 5, 32)
with torch.no_grad():
    explicit = mla(x)
    absorbed = mla(x, absorb=True)
    assert explicit.shape == (2, 5, 32), f"expected (B, T, d_model), got {tuple(explicit.shape)}"
    assert torch.allclose(explicit, absorbed, atol=1e-5), (
        "the absorbed path differs from the explicit one (max difference "
        f"{(explicit - absorbed).abs().max():.2e}): q_lat = W_UK^T q^C, keys [c ; k^R], values c, "
        "then W_UV")
    x2 = x.clone()
    x2[:, 3:] += 1.0
    assert torch.allclose(mla(x2)[:, :3], explicit[:, :3], atol=1e-6), "the future leaks: use `mask`"
    cache = LatentKVCache()
    steps = [mla(x[:, :2], cache=cache, absorb=True)]
    steps += [mla(x[:, t:t + 1], cache=cache, absorb=True) for t in range(2, 5)]
assert torch.allclose(torch.cat(steps, 1), explicit, atol=1e-5), (
    "decoding with the latent cache (absorbed path) should give the full-sequence outputs")
assert cache.latents(0).shape == (2, 1, 5, 16), "the cache holds one latent of d_c = 16 per token"
print("✓ mla_cache_bytes and MultiHeadLatentAttention pass the visible checks")

# %% [markdown]
# What does a small latent keep? The explorer counts the cache with your
# `kv_cache_bytes` and `mla_cache_bytes` and measures, on one layer whose projections
# have a decaying spectrum, how much of the full multi-head keys and values MLA's best
# latent of size $d_c$ keeps, beside GQA (a mean over each group of heads) and MQA.

# %% tags=["skip-grading"]
mla_explorer(fns={"kv_cache_bytes": kv_cache_bytes, "mla_cache_bytes": mla_cache_bytes})

# %% [markdown]
# ### Question: MLA or GQA?
#
# Two ways to shrink the KV cache. LLaMA-2 70B uses GQA: 80 layers, 64 query heads
# sharing 8 KV heads of $d_h = 128$. DeepSeek-V2 uses MLA: 60 layers, a latent of
# $d_c = 512$ and a RoPE key of $d_R = 64$ per token and layer. Answer in a few sentences
# each:
#
# 1. How many bytes does one token's cache take in each model, in fp16, over all layers?
#    How much would LLaMA-2 70B need with full multi-head attention?
# 2. Write the content score $q_i^C \cdot k_{i,j}^C$ with RoPE applied to the key rebuilt
#    from the latent, and show why $W^{UK}$ can then no longer be absorbed into the query.
# 3. What does each method give up in exchange for its smaller cache?

# %% [markdown] nbgrader={"grade": true, "grade_id": "mla_gqa_question", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# 1. GQA: $2 \cdot 80 \cdot 8 \cdot 128 \cdot 2 = 327{,}680$ bytes (320 KiB) per token;
#    with 64 KV heads (full MHA) 8 times more, $2{,}621{,}440$ bytes (2.5 MiB). MLA:
#    $60 \cdot (512 + 64) \cdot 2 = 69{,}120$ bytes (67.5 KiB), about 4.7 times less than
#    LLaMA-2 70B's GQA cache.
# 2. With RoPE on both sides the score is
#    $(R_m q_i^C) \cdot (R_n W_i^{UK} c_n) = (q_i^C)^\top R_m^\top R_n W_i^{UK} c_n
#    = (q_i^C)^\top R_{n-m} W_i^{UK} c_n$. The matrix between the query and the cached
#    latent, $R_{n-m} W_i^{UK}$, depends on the distance to each key, so no single
#    matrix can be folded into the query once: every cached key would have to be rebuilt
#    (and rotated) at every step, which is what the latent cache was meant to avoid.
#    Hence the separate RoPE key $k^R$, small, shared by the heads and cached as it is,
#    while the content part carries no position.
# 3. GQA: the query heads of a group read the same keys and values, fewer distinct
#    views of the context; a small loss of quality for no extra compute, and the cache
#    shrinks only by the group size. MLA: keys and values are low-rank (rank at most
#    $d_c$) images of one latent, the model needs the decoupled RoPE key, and decoding
#    does more arithmetic per cached token (attention over $d_c + d_R = 576$-wide keys
#    in every head, or rebuilding keys and values); more complex to implement and to
#    serve with standard kernels. DeepSeek reports quality at or above MHA at this size.
#
# Marking: 1 point per part. (1) both byte counts right, with the MHA comparison (a slip
# of a factor 2 from K and V costs 0.5); (2) a position-dependent rotation between the
# query and $W^{UK}$, so absorption fails; (3) one honest cost of each.
# ### END SOLUTION

# %% [markdown]
# ## 6. Differential attention
#
# Every part so far made attention *cheaper*. The last one makes it *sharper*. A softmax
# never gives a key exactly zero weight, so over a long context the many irrelevant keys
# together collect a noticeable share of every row: "attention noise". The **Differential
# Transformer** (Ye et al., arXiv 2410.05258) computes **two** softmax maps from two
# halves of the query and key projections and subtracts one from the other, as a
# differential amplifier cancels the noise common to its two inputs:
#
# $$ \mathrm{DiffAttn}(X) = \Big(\mathrm{softmax}\big(\tfrac{Q_1 K_1^\top}{\sqrt d}\big)
#    - \lambda\, \mathrm{softmax}\big(\tfrac{Q_2 K_2^\top}{\sqrt d}\big)\Big) V . $$
#
# Weight that both maps spread over the distractors cancels; what only the first map puts
# on the relevant key survives. Each row of $A_1 - \lambda A_2$ sums to $1 - \lambda$, and
# single weights may be negative. With $\lambda = 0$ it is ordinary attention; with two
# identical maps it is $(1 - \lambda)$ times ordinary attention.
#
# **$\lambda$ is learned, re-parameterised.** It is not a parameter itself. Each layer has
# four learned vectors $\lambda_{q1}, \lambda_{k1}, \lambda_{q2}, \lambda_{k2} \in \mathbb R^d$
# and
#
# $$ \lambda = \exp(\lambda_{q1} \cdot \lambda_{k1}) - \exp(\lambda_{q2} \cdot \lambda_{k2})
#    + \lambda_\text{init}, \qquad
#    \lambda_\text{init}(l) = 0.8 - 0.6\, e^{-0.3 (l - 1)}, $$
#
# with $l = 1, 2, \dots$ the **1-based** layer number: $\lambda_\text{init}$ is 0.2 in the
# first layer and tends to 0.8 in deep ones. (The paper's code writes
# `0.8 - 0.6 * exp(-0.3 * depth)` with a 0-based `depth = l - 1`: the same numbers.) The
# two exponentials let $\lambda$ move smoothly in both directions while the vectors start
# near zero, where $\lambda = \lambda_\text{init}$.
#
# **Per-head normalisation and the $(1 - \lambda_\text{init})$ scale.** Because the
# difference can be small and its size varies from head to head, each head's output
# $O_h = (A_1 - \lambda A_2) V$ (width $2d$) goes through RMSNorm over **its own $2d$
# features** (the last axis, one RMS per head, token and batch element; the paper calls it
# GroupNorm with one group per head), with eps $10^{-5}$ and a learned weight of size
# $2d$ shared by all heads (`self.subln`, as in the paper's code). The result is multiplied
# by the **constant** $(1 - \lambda_\text{init})$, not by $1 - \lambda$, so that at
# initialisation the output has the scale of ordinary attention. Then the heads are
# concatenated (head 0 first) and projected by `out_proj`.
#
# **Layout** (the paper's code, so that its weights load one-to-one). With $H$ heads,
# $d = d_\text{model} / (2H)$. `q_proj` and `k_proj` (`d_model -> d_model`) produce $2H$
# sub-heads of width $d$, numbered $0 .. 2H - 1$ along the feature axis; head $h$ uses
# sub-heads $2h$ as $(Q_1, K_1)$ and $2h + 1$ as $(Q_2, K_2)$. In tensors:
# `q_proj(x).view(B, T, H, 2, d)`, index `[:, :, h, 0]` is $Q_1$ of head $h$ and
# `[:, :, h, 1]` its $Q_2$. `v_proj` is **not** split: `view(B, T, H, 2 * d)`, each head's
# value has width $2d$. The attention scale is $1/\sqrt d$, of the half width $d$.
#
# ### Exercise 6a: `lambda_init_fn` and `differential_attention`
#
# `differential_attention(q1, k1, q2, k2, v, lam, mask=None, scale=None)`:
#
# * `q1, q2 (B, H, T_q, d)`, `k1, k2 (B, H, T_k, d)`, `v (B, H, T_k, d_v)`; `T_q` may
#   differ from `T_k`. Returns `(B, H, T_q, d_v)` in the inputs' dtype.
# * `lam` is a Python float or a tensor broadcastable to `(B, H, 1, 1)` (a 0-d tensor,
#   or one value per head).
# * `mask` follows Assignment 01 (bool, `True` = may attend, or a float bias, broadcastable
#   to `(B, H, T_q, T_k)`) and applies to **both** maps before their softmaxes. A row whose
#   keys are all masked gives zeros, as `attention_weights` does.
# * `scale` defaults to $1/\sqrt d$ (the width of `q1`).
#
# `attention_weights` from Assignment 01 is imported above; use it for each map.

# %% nbgrader={"grade": false, "grade_id": "lambda_init_fn", "locked": false, "schema_version": 3, "solution": true}
def lambda_init_fn(layer: int) -> float:
    """``lambda_init = 0.8 - 0.6 exp(-0.3 (l - 1))`` for the 1-based layer number ``l``.

    Raises ``ValueError`` for ``layer < 1``.
    """
    if layer < 1:
        raise ValueError(f"layer is the 1-based layer number l >= 1, got {layer}")
    ### BEGIN SOLUTION
    return 0.8 - 0.6 * math.exp(-0.3 * (layer - 1))
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "differential_attention", "locked": false, "schema_version": 3, "solution": true}
def differential_attention(
    q1: Tensor,
    k1: Tensor,
    q2: Tensor,
    k2: Tensor,
    v: Tensor,
    lam: Tensor | float,
    mask: Tensor | None = None,
    scale: float | None = None,
) -> Tensor:
    """``(softmax(q1 k1^T * scale) - lam * softmax(q2 k2^T * scale)) v``.

    Args:
        q1, q2: ``(B, H, T_q, d)``; k1, k2: ``(B, H, T_k, d)``; v: ``(B, H, T_k, d_v)``.
        lam: float, or a tensor broadcastable to ``(B, H, 1, 1)``.
        mask: as in ``attention_weights``, applied to both maps.
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``(B, H, T_q, d_v)``.
    """
    ### BEGIN SOLUTION
    a1 = attention_weights(q1, k1, mask, scale)  # softmax(Q1 K1^T / sqrt d)
    a2 = attention_weights(q2, k2, mask, scale)  # softmax(Q2 K2^T / sqrt d)
    return (a1 - lam * a2) @ v  # (A1 - lambda A2) V
    ### END SOLUTION


# %% [markdown]
# ### Exercise 6b: `DifferentialAttention`
#
# The constructor is given: the four projections (`nn.Linear(d_model, d_model,
# bias=bias)`), the four $\lambda$ vectors (width $d$, drawn from $N(0, 0.1^2)$ as in the
# paper's code), `self.lambda_init` for the layer, and `self.subln`, the shared per-head
# RMSNorm of width $2d$. Write
#
# * `lambda_full()`: $\lambda$ as a **0-d tensor** that keeps the graph to the four
#   vectors (training must reach them);
# * `forward(x, mask=None, causal=True)`: `x (B, T, d_model) -> (B, T, d_model)`. With
#   `causal=True` query $i$ sees keys $j \le i$ (`causal_mask(T)`); an extra bool `mask`
#   broadcastable to `(B, H, T, T)` (key padding, say) is ANDed in (`combine_masks`).
#   Split the sub-heads as described above, call your `differential_attention` with
#   `self.lambda_full()`, normalise each head with `self.subln`, multiply by
#   `1 - self.lambda_init`, merge the heads and apply `out_proj`.
#
# The hidden checks load the weights of the course's reference (with random RMSNorm
# weights and $\lambda$ vectors large enough that $\lambda \ne \lambda_\text{init}$) into
# your class and compare `lambda_full()` and `forward` with it for several layers, head
# counts and masks, in float32 (the dtype the class is built in; tolerance 2e-5 absolute,
# 1e-4 relative); `differential_attention` is compared in float64. They also check that a
# loss on the output reaches the four $\lambda$ vectors with the reference's gradients.

# %% nbgrader={"grade": false, "grade_id": "differential_attention_module", "locked": false, "schema_version": 3, "solution": true}
class DifferentialAttention(nn.Module):
    """Multi-head differential attention (arXiv 2410.05258).

    Args:
        d_model: model width, divisible by ``2 * n_heads``.
        n_heads: number of differential heads (each uses two query/key sub-heads).
        layer: 1-based layer number ``l``, sets ``lambda_init``.
        bias: bias in the projections.

    ``forward(x (B, T, d_model)) -> (B, T, d_model)``.
    """

    def __init__(self, d_model: int, n_heads: int, layer: int = 1, bias: bool = False):
        super().__init__()
        if n_heads < 1 or d_model % (2 * n_heads) != 0:
            raise ValueError(
                f"d_model={d_model} must be divisible by 2 * n_heads={2 * n_heads} "
                "(each head splits its query/key into two halves)"
            )
        self.d_model, self.n_heads = d_model, n_heads
        self.d_head = d_model // n_heads // 2  # d: width of Q1, Q2, K1, K2
        self.lambda_init = lambda_init_fn(layer)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.lambda_q1 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.lambda_k1 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.lambda_q2 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.lambda_k2 = nn.Parameter(torch.randn(self.d_head) * 0.1)
        self.subln = nn.RMSNorm(2 * self.d_head, eps=1e-5)  # per-head norm, width 2d

    def lambda_full(self) -> Tensor:
        """``lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init`` (a 0-d tensor)."""
        ### BEGIN SOLUTION
        lam1 = torch.exp(torch.dot(self.lambda_q1, self.lambda_k1))  # exp(lq1 . lk1)
        lam2 = torch.exp(torch.dot(self.lambda_q2, self.lambda_k2))  # exp(lq2 . lk2)
        return lam1 - lam2 + self.lambda_init
        ### END SOLUTION

    def forward(self, x: Tensor, mask: Tensor | None = None, causal: bool = True) -> Tensor:
        """
        Args:
            x: ``(B, T, d_model)``.
            mask: extra bool mask broadcastable to ``(B, n_heads, T, T)``.
            causal: AND a causal mask in.

        Returns:
            ``(B, T, d_model)``.
        """
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, {self.d_model}), got shape {tuple(x.shape)}")
        B, T, _ = x.shape
        H, d = self.n_heads, self.d_head
        ### BEGIN SOLUTION
        q = self.q_proj(x).view(B, T, H, 2, d).permute(3, 0, 2, 1, 4)  # (2, B, H, T, d)
        k = self.k_proj(x).view(B, T, H, 2, d).permute(3, 0, 2, 1, 4)  # sub-head 2h+i -> [i, h]
        v = self.v_proj(x).view(B, T, H, 2 * d).transpose(1, 2)  # (B, H, T, 2d)
        attn_mask = combine_masks(causal_mask(T, device=x.device) if causal else None, mask)
        out = differential_attention(q[0], k[0], q[1], k[1], v, self.lambda_full(), attn_mask)
        out = self.subln(out) * (1.0 - self.lambda_init)  # per-head RMSNorm, x (1 - lambda_init)
        return self.out_proj(out.transpose(1, 2).reshape(B, T, self.d_model))
        ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_differential", "locked": true, "points": 3, "schema_version": 3, "solution": false}
assert abs(lambda_init_fn(1) - 0.2) < 1e-12, f"lambda_init(1) = 0.8 - 0.6 = 0.2, got {lambda_init_fn(1)}"
assert abs(lambda_init_fn(3) - (0.8 - 0.6 * math.exp(-0.6))) < 1e-12, (
    "lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)) with l counted from 1")

g64 = torch.Generator().manual_seed(1)
q1, k1, q2, k2 = (torch.randn(2, 3, 5, 4, generator=g64, dtype=torch.float64) for _ in range(4))
v = torch.randn(2, 3, 5, 6, generator=g64, dtype=torch.float64)
out = differential_attention(q1, k1, q2, k2, v, 0.3)
assert out.shape == (2, 3, 5, 6), f"expected (B, H, T_q, d_v) = (2, 3, 5, 6), got {tuple(out.shape)}"
a1 = torch.softmax(q1 @ k1.transpose(-2, -1) / 2.0, dim=-1)  # scale 1/sqrt(d) = 1/2
a2 = torch.softmax(q2 @ k2.transpose(-2, -1) / 2.0, dim=-1)
assert torch.allclose(out, (a1 - 0.3 * a2) @ v, atol=1e-12), (
    "differential_attention should be (softmax(q1 k1^T / sqrt d) - lam softmax(q2 k2^T / sqrt d)) v")
assert torch.allclose(differential_attention(q1, k1, q2, k2, v, 0.0),
                      scaled_dot_product_attention(q1, k1, v), atol=1e-12), (
    "lam = 0 is ordinary attention with the first map")
assert torch.allclose(differential_attention(q1, k1, q1, k1, v, 0.3),
                      0.7 * scaled_dot_product_attention(q1, k1, v), atol=1e-12), (
    "two identical maps cancel to (1 - lam) x ordinary attention: common-mode rejection")
cm = causal_mask(5)
assert torch.allclose(differential_attention(q1, k1, q2, k2, v, 0.3, cm),
                      (a1.masked_fill(~cm, 0) / a1.masked_fill(~cm, 0).sum(-1, keepdim=True)
                       - 0.3 * a2.masked_fill(~cm, 0) / a2.masked_fill(~cm, 0).sum(-1, keepdim=True))
                      @ v, atol=1e-12), "the mask applies to both maps, before their softmaxes"

torch.manual_seed(0)
diff = DifferentialAttention(d_model=16, n_heads=2, layer=3).double()
with torch.no_grad():
    for p in (diff.lambda_q1, diff.lambda_k1, diff.lambda_q2, diff.lambda_k2):
        p.normal_(0, 0.5)  # far from zero: lambda != lambda_init
    diff.subln.weight.uniform_(0.5, 1.5)
lam = diff.lambda_full()
assert isinstance(lam, torch.Tensor) and lam.dim() == 0, "lambda_full() returns a 0-d tensor"
with torch.no_grad():
    lam_by_hand = (math.exp(float(diff.lambda_q1 @ diff.lambda_k1))
                   - math.exp(float(diff.lambda_q2 @ diff.lambda_k2)) + lambda_init_fn(3))
assert abs(float(lam.detach()) - lam_by_hand) < 1e-9, (
    f"lambda_full() = {float(lam.detach()):.6f}, expected exp(lq1.lk1) - exp(lq2.lk2) + lambda_init = "
    f"{lam_by_hand:.6f}")

x = torch.randn(2, 7, 16, dtype=torch.float64)
with torch.no_grad():
    y = diff(x)
    assert y.shape == (2, 7, 16), f"expected (B, T, d_model) = (2, 7, 16), got {tuple(y.shape)}"
    # The same computation head by head, written out: sub-heads 2h and 2h + 1.
    B, T, H, d = 2, 7, 2, 4
    qs, ks = diff.q_proj(x).view(B, T, 2 * H, d), diff.k_proj(x).view(B, T, 2 * H, d)
    vs = diff.v_proj(x).view(B, T, H, 2 * d)
    future = torch.ones(T, T, dtype=torch.bool).triu(1)
    heads = []
    for h in range(H):
        maps = [torch.softmax((qs[:, :, 2 * h + i] @ ks[:, :, 2 * h + i].transpose(1, 2) / d**0.5)
                              .masked_fill(future, float("-inf")), dim=-1) for i in (0, 1)]
        o = (maps[0] - lam * maps[1]) @ vs[:, :, h]  # (B, T, 2d)
        o = o / torch.sqrt(o.pow(2).mean(-1, keepdim=True) + 1e-5) * diff.subln.weight
        heads.append(o * (1 - lambda_init_fn(3)))
    by_hand = diff.out_proj(torch.cat(heads, dim=-1))
assert torch.allclose(y, by_hand, atol=1e-10), (
    f"DifferentialAttention differs from the head-by-head computation (max difference "
    f"{(y - by_hand).abs().max():.2e}): check the sub-head pairing (2h, 2h + 1), RMSNorm over "
    "each head's 2d features and the factor (1 - lambda_init)")
x2 = x.clone()
x2[:, 4:] += 1.0
with torch.no_grad():
    assert torch.allclose(diff(x2)[:, :4], y[:, :4], atol=1e-12), "causal: the future leaks"
diff(x).sum().backward()
assert diff.lambda_q1.grad is not None and diff.lambda_q1.grad.abs().sum() > 0, (
    "the loss must reach the lambda vectors: build lambda from them with torch operations")
print("✓ lambda_init_fn, differential_attention and DifferentialAttention pass the visible checks")

# %% [markdown]
# Your `differential_attention` on a sequence with distractors: the first query carries
# the needle's feature plus a chance direction that matches every key a little, the second
# query a weaker copy of the chance direction alone. Move $\lambda$ and watch the weight
# the two maps share cancel, the rows shrink to $1 - \lambda$, and the output's cosine with
# the needle's value change.

# %% tags=["skip-grading"]
differential_explorer(fns={"differential_attention": differential_attention})


# %% [markdown]
# ## Summary
#
# * Sparse patterns keep $O(T w)$ cells instead of $T^2$: a causal window
#   ($i - w < j \le i$), a band ($|i - j| \le r$), dilated windows, global and random
#   tokens. Count cells exactly: the edges lose neighbours. Stacked windows reach
#   $\approx L \times w$ tokens back.
#   Global tokens (their whole row and column visible) connect any two tokens in two
#   hops and hear the whole sequence in one layer, for $O(|G| T)$ extra cells.
# * Linear attention replaces $\exp(q \cdot k)$ by $\phi(q)^\top\phi(k)$, so the sums
#   factorise: $O(T)$ cost, and its causal form is an RNN whose state is $S_i$ and $z_i$.
#   Do not forget the normaliser $\phi(q_i)^\top z_i$.
# * The KV cache costs $2 \cdot L \cdot n_\text{kv} \cdot d_\text{head}$ numbers per token.
#   MQA and GQA share KV heads (query head $h$ reads KV head $h \,/\!/\, g$); decoding
#   through the cache needs the causal mask's offset and must equal the full pass.
# * MLA caches a latent (plus a small RoPE key) instead: $d_c + d_R$ numbers per token and
#   layer, and absorbing $W^{UK}$ into the query lets inference attend over the latents
#   directly.
#
# * Differential attention subtracts a second softmax map, scaled by a learned
#   $\lambda = e^{\lambda_{q1} \cdot \lambda_{k1}} - e^{\lambda_{q2} \cdot \lambda_{k2}}
#   + \lambda_\text{init}$, to cancel the weight both maps spread over distractors; each
#   head is RMS-normalised over its own features and scaled by $1 - \lambda_\text{init}$.
#
# Assignment 04 turns to the other cost,
# memory traffic: FlashAttention computes exact attention without ever storing the
# $T \times T$ scores.
