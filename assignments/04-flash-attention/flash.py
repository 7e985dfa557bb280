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
# # Assignment 04: FlashAttention and a Triton kernel
#
# Attention as written in Assignment 01 builds the whole $N \times N$ score matrix, runs a
# softmax over it and multiplies by $V$. On a GPU the arithmetic is not the problem: the
# problem is **memory traffic**. The score matrix is too big for the fast on-chip memory
# (SRAM, a few hundred KB per streaming multiprocessor), so it is written to and read back
# from the slow main memory (HBM), several times. **FlashAttention** (Dao et al., arXiv
# 2205.14135; FlashAttention-2, arXiv 2307.08691) computes *exactly* the same result
# without ever storing the scores: it walks over the keys tile by tile and keeps only a
# few numbers per query. The trick that makes this possible is the **online softmax**.
#
# | part | you write | points |
# |---|---|---|
# | 1 | `online_softmax`: the softmax in one streaming pass over blocks | 2 |
# | 2 | `flash_attention_forward`: tiled attention in PyTorch, returning `(out, lse)` | 4 |
# | 3 | `flash_attention_kernel` + `flash_attention_triton`: the same as a Triton kernel, with causal masking and GQA | 5 |
# | 4 | `flash_attention_backward_kernel` + `flash_attention_backward_triton`: the backward pass in Triton, gradients summed over each GQA group | 4 |
# | 5 | a short written answer: why FlashAttention is exact, and why it is faster | 3 (read by a person) |
#
# **How this notebook is graded.** Fill in each region marked `YOUR CODE HERE`; the test
# cells run quick checks, the grader its own hidden ones. While they run, PyTorch's
# softmax, logsumexp, fused attention and autograd (`backward`, `torch.autograd.grad`),
# and the toolkit's reference versions of what you write here, are switched off.
#
# **No GPU?** Triton kernels then run in Triton's *interpreter*, which executes each
# program instance with NumPy on the CPU: slow, but exact for fp32 and fp16 on small
# shapes. It must be switched on before `triton` is first imported, which the next cell
# does. (If you change it later, restart the kernel.) The interpreter computes bf16 dot
# products wrongly without any error, so bf16 is refused there.

# %%
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # Triton's CPU interpreter; must precede `import triton`

# %%
from __future__ import annotations

import math

from torch import Tensor

try:
    import triton
    import triton.language as tl
except ImportError:  # Triton ships for Linux only: parts 1 and 2 still work without it
    from toolkit.kernels.runtime import tl, triton  # stand-ins: define kernels, never run

# Given helpers: input checks, the causal mask of one tile, the launch checks of parts 3 and 4.
from toolkit.arguments import check_flash_inputs
from toolkit.flash import NEG_INF, PeakMemoryCounter, causal_tile_mask
from toolkit.kernels.flash_backward_teaching import check_backward_launch
from toolkit.kernels.flash_teaching import check_kernel_launch
from toolkit.kernels.runtime import LOG2E
from toolkit.notebook import friendly_errors
from toolkit.widgets.efficient import attention_memory_explorer, online_softmax_stepper

friendly_errors()  # one short line, not a long traceback, for an exercise not written yet

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. The online softmax
#
# The softmax of a row $x_1, \dots, x_N$ is computed safely by subtracting the maximum
# $m = \max_j x_j$ first (so that no $e^{x_j}$ overflows):
#
# $$ \mathrm{softmax}(x)_j = \frac{e^{x_j - m}}{\ell}, \qquad \ell = \sum_j e^{x_j - m}. $$
#
# That seems to need the whole row twice: once for $m$, once for $\ell$. The **online
# softmax** (Milakov and Gimelshein, arXiv 1805.02867) gets both in *one* pass over blocks
# of the row. Keep a running maximum $m$ and a running sum $\ell$ of the blocks seen so far.
# When the next block $x_B$ arrives:
#
# $$ m' = \max\big(m, \max_{j \in B} x_j\big), \qquad
#    \ell' = \ell \, e^{m - m'} + \sum_{j \in B} e^{x_j - m'}. $$
#
# The factor $e^{m - m'}$ is the point: every term in $\ell$ was computed relative to the
# old maximum $m$, and $e^{x - m} e^{m - m'} = e^{x - m'}$ re-expresses it relative to the
# new one. If the maximum did not change, the factor is 1; forgetting it gives a wrong sum
# whenever a later block holds a larger value. Start with $m = -\infty$, $\ell = 0$
# (then $e^{m - m'} = 0$ on the first block).
#
# ### Exercise 1: `online_softmax`
#
# Gather $m$ and $\ell$ block by block along the last axis, then normalise in a second
# pass: `exp(x - m) / l`. Inputs are finite. (The last block may be shorter than `block`.)

# %% nbgrader={"grade": false, "grade_id": "online_softmax", "locked": false, "schema_version": 3, "solution": true}
def online_softmax(x: Tensor, block: int) -> Tensor:
    """Softmax over the last axis, with ``m`` and ``l`` gathered in one pass over blocks.

    Args:
        x: ``(..., N)``, finite values.
        block: how many entries of the row each step reads.

    Returns:
        ``(..., N)``, equal to ``torch.softmax(x, -1)``, in ``x``'s dtype.

    Hints: ``torch.full(shape, float("-inf"))``, ``Tensor.amax(dim=-1)``, ``torch.maximum``,
    ``torch.exp``, ``unsqueeze(-1)`` to broadcast a per-row value over the row.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    ### BEGIN SOLUTION
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype, device=x.device)  # running max
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # running sum
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        m_new = torch.maximum(m, xb.amax(dim=-1))  # m' = max(m, max_j x_j)
        # l' = l * exp(m - m') + sum_j exp(x_j - m'): old terms re-expressed relative to m'
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)  # softmax_j = exp(x_j - m) / l
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_online_softmax", "locked": true, "points": 2, "schema_version": 3, "solution": false}
x = torch.randn(3, 10, dtype=torch.float64)
for block in (1, 3, 4, 10, 32):
    got = online_softmax(x, block)
    assert got.shape == x.shape, f"block={block}: expected shape {tuple(x.shape)}, got {tuple(got.shape)}"
    assert torch.allclose(got, torch.softmax(x, -1), atol=1e-12), (
        f"block={block}: online_softmax differs from torch.softmax by "
        f"{(got - torch.softmax(x, -1)).abs().max():.2e}")
rising = torch.arange(12.0, dtype=torch.float64)  # the maximum keeps moving: rescaling matters
assert torch.allclose(online_softmax(rising, 4), torch.softmax(rising, -1), atol=1e-12), (
    "a row whose maximum grows block after block is wrong: multiply the running sum by "
    "exp(m - m') whenever the maximum changes")
big = torch.tensor([1000.0, 1001.0, 1002.0, 999.0])  # exp(1000) overflows float32
assert torch.allclose(online_softmax(big, 2), torch.softmax(big, -1), atol=1e-6), (
    "large inputs overflow: subtract the running maximum inside exp")
print("✓ online_softmax passes the visible checks")

# %% [markdown]
# The stepper walks through one query row of attention tile by tile: the running maximum,
# the rescale factor $e^{m - m'}$ (it drops below 1 exactly when a tile raises the
# maximum), the running sum, and the accumulator of the next part.

# %% tags=["skip-grading"]
online_softmax_stepper()

# %% [markdown]
# ## 2. Tiled attention: FlashAttention in PyTorch
#
# Attention needs $\sum_j \mathrm{softmax}_j \, v_j$, not the softmax itself, so carry an
# **unnormalised accumulator** $\mathrm{acc} = \sum_j e^{s_j - m} v_j$ next to $m$ and
# $\ell$. When a tile of keys raises the maximum, the accumulator was computed relative to
# the old maximum and needs the *same* rescale as $\ell$:
#
# $$ \mathrm{acc}' = \mathrm{acc}\; e^{m - m'} + \tilde P\, V_\text{tile}, \qquad
#    \tilde P = e^{S_\text{tile} - m'} . $$
#
# After the last tile one division normalises: $O = \mathrm{acc} / \ell$. Forgetting to
# rescale the accumulator is *the* classic FlashAttention bug: the result is right
# whenever the first tile happens to hold each row's maximum, and wrong otherwise.
#
# The algorithm, for each tile of `block_q` queries (FA2's loop order, arXiv 2307.08691,
# Algorithm 1):
#
# ```
# m = -inf, l = 0, acc = 0                        (per query row)
# for each tile of block_k keys:
#     S   = Q_tile K_tile^T * scale                (block_q x block_k: the largest score tensor)
#     mask S (causal) with -inf
#     m'  = max(m, rowmax(S));  P~ = exp(S - m')
#     alpha = exp(m - m');  l = alpha l + rowsum(P~);  acc = alpha acc + P~ V_tile;  m = m'
# O = acc / l,   L = m + log l
# ```
#
# **The logsumexp.** $L_i = m_i + \log \ell_i = \log \sum_j e^{s_{ij}}$ is the one extra
# number per query that FlashAttention saves for the backward pass. With it, any tile's
# probabilities can be recomputed exactly, $P_{ij} = e^{s_{ij} - L_i}$, so the backward
# never needs a stored $N \times N$ matrix either: $O(N)$ extra memory in total. Returning
# $m$ alone (forgetting $\log \ell$) is a silent bug: the forward output is still right,
# the gradients are not.
#
# **Details you need.**
#
# * **GQA without copies.** `q` has `H` heads, `k` and `v` only `H_kv`; query head `h`
#   reads KV head `h // g` with `g = H // H_kv`. Reshape the queries to
#   `(B, H_kv, g, N_q, d)`: head `h = kv * g + r` lands at `[kv, r]`, and a key tile
#   `k[:, :, None, ks:ke]` of shape `(B, H_kv, 1, bk, d)` broadcasts over the group.
#   Reshape back to `(B, H, ...)` at the end.
# * **Causal, bottom-right.** Query `i` sees keys `j <= i + shift` with
#   `shift = N_k - N_q`: with a KV cache, the new queries are the *last* `N_q` positions
#   (for `N_q == N_k` this is the usual `j <= i`). Key tiles that start at or after
#   `min(N_k, qe + shift)`, one past the query tile's last visible key `qe - 1 + shift`,
#   are skipped entirely: that is where
#   causal attention saves half the work. Only tiles that *cross* the diagonal
#   (`ke - 1 > qs + shift`) need the mask `causal_tile_mask(qs, qe, ks, ke, shift, device)`,
#   a bool `(qe - qs, ke - ks)` tile that is **True where the key is visible** (`j <= i +
#   shift`), the polarity of every mask in this course. `masked_fill` fills where its mask
#   is True, so hide the others with `s.masked_fill(~causal_tile_mask(...), NEG_INF)`;
#   without the `~` you hide exactly the visible keys.
# * **A row with nothing visible** (possible when `N_q > N_k` with a causal mask) keeps
#   $m = -\infty$; use `m_safe = where(m' == -inf, 0, m')` in the exponentials so that
#   no `-inf - (-inf) = NaN` appears. Such a row ends with `acc = 0` and `l = 0`, so
#   divide by `l_safe = where(l > 0, l, 1)`, not by `l` (0/0 is NaN): it returns zeros,
#   and its `lse` is `-inf`.
# * **Precision.** Accumulate in at least float32 (`acc_dtype`); write `out` in the input
#   dtype; `lse` stays in `acc_dtype`.
# * **What "never builds an $N_q \times N_k$ tensor" means, and how it is checked.** A
#   hidden check records the shape of every tensor created during one causal call with
#   $N = 48$, $d = 8$ and $16 \times 16$ tiles, and fails if one has at least 48 entries on
#   its last axis and at least 16 on the one before: a score-shaped tensor that holds a
#   whole row of keys. Full-size tensors of another shape are fine: `out`, `lse`, `m`,
#   `l`, the reshaped inputs, and any `(..., N_q, d)` accumulator.
#
# ### Exercise 2: `flash_attention_forward`

# %% nbgrader={"grade": false, "grade_id": "flash_attention_forward", "locked": false, "schema_version": 3, "solution": true}
def flash_attention_forward(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_q: int = 64,
    block_k: int = 64,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """Tiled attention forward with the online softmax; never builds an ``N_q x N_k`` tensor
    (no tensor holding a whole row of keys for a tile of queries; see the rule above).

    Args:
        q: ``(B, H, N_q, d)``; k: ``(B, H_kv, N_k, d)``; v: ``(B, H_kv, N_k, d_v)``,
            ``H`` a multiple of ``H_kv`` (query head ``h`` reads KV head ``h // (H / H_kv)``).
        causal: query ``i`` sees keys ``j <= i + N_k - N_q`` (bottom-right alignment).
        block_q, block_k: tile sizes; the largest intermediate is ``(B, H, block_q, block_k)``.
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``out (B, H, N_q, d_v)`` in ``q``'s dtype and ``lse (B, H, N_q)`` in ``acc_dtype``,
        ``lse = m + log l`` (``-inf`` for a row with no visible key, whose output is 0).
    """
    g = check_flash_inputs(q, k, v, block_q, block_k)
    B, H, N_q, d = q.shape
    H_kv, N_k, d_v = k.shape[1], k.shape[2], v.shape[-1]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    acc_dtype = torch.promote_types(q.dtype, torch.float32)  # accumulate in >= fp32
    ### BEGIN SOLUTION
    shift = N_k - N_q  # bottom-right causal alignment
    qg = q.reshape(B, H_kv, g, N_q, d)  # head h = kv * g + r: no copy of K or V for GQA
    out = torch.empty(B, H_kv, g, N_q, d_v, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, H_kv, g, N_q, dtype=acc_dtype, device=q.device)

    for qs in range(0, N_q, block_q):
        qe = min(qs + block_q, N_q)
        q_tile = qg[..., qs:qe, :].to(acc_dtype)  # (B, H_kv, g, bq, d)
        m = torch.full((B, H_kv, g, qe - qs), NEG_INF, dtype=acc_dtype, device=q.device)
        l = torch.zeros_like(m)
        acc = torch.zeros(B, H_kv, g, qe - qs, d_v, dtype=acc_dtype, device=q.device)
        # With a causal mask, key tiles starting after the tile's last visible key are skipped.
        k_end = min(N_k, qe + shift) if causal else N_k
        for ks in range(0, max(k_end, 0), block_k):
            ke = min(ks + block_k, N_k)
            k_tile = k[:, :, None, ks:ke, :].to(acc_dtype)  # (B, H_kv, 1, bk, d)
            v_tile = v[:, :, None, ks:ke, :].to(acc_dtype)  # (B, H_kv, 1, bk, d_v)
            s = (q_tile @ k_tile.transpose(-2, -1)) * scale  # S = Q K^T / sqrt(d): (.., bq, bk)
            if causal and ke - 1 > qs + shift:  # tile crosses the diagonal
                s = s.masked_fill(~causal_tile_mask(qs, qe, ks, ke, shift, q.device), NEG_INF)
            m_new = torch.maximum(m, s.amax(dim=-1))  # m' = max(m, rowmax(S))
            m_safe = torch.where(m_new == NEG_INF, 0.0, m_new)  # rows with no visible key yet
            p = torch.exp(s - m_safe.unsqueeze(-1))  # P~ = exp(S - m')
            alpha = torch.exp(m - m_safe)  # exp(m - m'): rescales what was summed so far
            l = alpha * l + p.sum(dim=-1)  # l' = l exp(m - m') + rowsum(P~)
            acc = alpha.unsqueeze(-1) * acc + p @ v_tile  # acc' = acc exp(m - m') + P~ V
            m = m_new
        visible = l > 0
        l_safe = torch.where(visible, l, 1.0)
        out[..., qs:qe, :] = (acc / l_safe.unsqueeze(-1)).to(q.dtype)  # O = acc / l
        lse[..., qs:qe] = torch.where(visible, m + torch.log(l_safe), NEG_INF)  # L = m + log l
    return out.reshape(B, H, N_q, d_v), lse.reshape(B, H, N_q)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_flash_forward", "locked": true, "points": 4, "schema_version": 3, "solution": false}
def dense_attention(q, k, v, causal=False, scale=None):
    """The plain N x N computation in float64, for comparison: (out, lse)."""
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)  # head h -> h // g
    s = q @ k.transpose(-2, -1) * (1 / math.sqrt(q.shape[-1]) if scale is None else scale)
    if causal:
        N_q, N_k = s.shape[-2:]
        hidden = torch.arange(N_k)[None, :] > torch.arange(N_q)[:, None] + (N_k - N_q)
        s = s.masked_fill(hidden, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, torch.logsumexp(s, -1)


q, k, v = torch.randn(2, 4, 23, 8), torch.randn(2, 2, 23, 8), torch.randn(2, 2, 23, 8)
for causal in (False, True):
    out, lse = flash_attention_forward(q, k, v, causal, block_q=8, block_k=8)
    ref_out, ref_lse = dense_attention(q, k, v, causal)
    assert out.shape == (2, 4, 23, 8) and lse.shape == (2, 4, 23), (
        f"expected out (B, H, N_q, d_v) = (2, 4, 23, 8) and lse (2, 4, 23), got "
        f"{tuple(out.shape)} and {tuple(lse.shape)}")
    assert torch.allclose(out.double(), ref_out, atol=1e-5), (
        f"causal={causal}: the output differs from dense attention by "
        f"{(out.double() - ref_out).abs().max():.2e}. Rescale acc by exp(m - m') as well as l; "
        "query head h reads KV head h // g")
    assert torch.allclose(lse.double(), ref_lse, atol=1e-5), (
        f"causal={causal}: lse should be m + log(l) = logsumexp of each row's scaled scores")

# Decoding-style: 5 new queries after 18 cached keys, bottom-right causal.
out, lse = flash_attention_forward(q[:, :, :5], k, v, causal=True, block_q=4, block_k=8)
assert torch.allclose(out.double(), dense_attention(q[:, :, :5], k, v, True)[0], atol=1e-5), (
    "with N_q < N_k the causal diagonal is aligned bottom-right: query i sees j <= i + N_k - N_q")

# No N x N tensor anywhere: the largest score tile is block_q x block_k.
x = torch.randn(1, 1, 64, 8)
with PeakMemoryCounter() as counter:
    flash_attention_forward(x, x, x, causal=True, block_q=16, block_k=16)
assert all(tuple(s[-2:]) != (64, 64) for s in counter.shapes if len(s) >= 2), (
    "a 64 x 64 tensor was created: work tile by tile")
print("✓ flash_attention_forward passes the visible checks")

# %% [markdown]
# How much memory does that save? Naive attention keeps the $N \times N$ scores (and the
# probabilities) per head; the tiled version one tile plus $O(N)$ statistics. Measured
# with `PeakMemoryCounter`, which records every tensor the computation creates:

# %% tags=["skip-grading"]
for n in (256, 512, 1024):
    xs = torch.randn(1, 4, n, 32)
    with PeakMemoryCounter() as naive:
        torch.softmax(xs @ xs.transpose(-2, -1) / math.sqrt(32), -1) @ xs
    with PeakMemoryCounter() as tiled:
        flash_attention_forward(xs, xs, xs, block_q=64, block_k=64)
    print(f"N = {n:5d}: naive {naive.peak / 2**20:6.2f} MiB, tiled {tiled.peak / 2**20:5.2f} MiB")

# %% [markdown]
# The explorer models the same comparison for real sizes (heads, head size, tile size,
# dtype): the naive curve grows like $N^2$, the tiled one like $N$.

# %% tags=["skip-grading"]
attention_memory_explorer()

# %% [markdown]
# ## 3. The same algorithm as a Triton kernel
#
# [Triton](https://triton-lang.org) (Tillet et al., MAPL 2019) lets you write GPU kernels in
# Python, one level above CUDA: you program a **block** of data at a time and the
# compiler distributes the work over threads. A launch runs many **program instances**
# in parallel over a *grid*; `tl.program_id(axis)` tells each one which part is its own.
# Inside a program:
#
# * `tl.arange(0, BLOCK)` is a vector of indices (`BLOCK` a power of two);
# * pointers are plain arithmetic: a tensor argument is a pointer to its first element,
#   and `X + offsets` is a block of pointers. A contiguous `(rows, cols)` tensor holds
#   element `[r, c]` at `X + r * cols + c`, so `X + rows[:, None] * cols + cs[None, :]`
#   addresses a 2-d tile;
# * `tl.load(ptrs, mask=..., other=0.0)` reads a block, with lanes outside the tensor
#   masked off; `tl.store(ptrs, values, mask=...)` writes one;
# * `tl.dot(a, b)` multiplies two tiles (each side at least 16), `tl.max`, `tl.sum` reduce
#   along an axis, `tl.where`, `tl.exp`, `tl.exp2`, `tl.log` work elementwise;
# * arguments annotated `tl.constexpr` are compile-time constants (tile sizes, flags).
#
# Here is a complete small kernel, a row softmax: one program per row.

# %% tags=["skip-grading"]
@triton.jit
def row_softmax_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)  # this program's row
    cols = tl.arange(0, BLOCK)  # BLOCK >= n_cols, a power of two
    ok = cols < n_cols  # lanes past the end of the row are masked off
    x = tl.load(X + row * n_cols + cols, mask=ok, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * n_cols + cols, e / tl.sum(e, axis=0), mask=ok)


x = torch.randn(4, 10, device=DEVICE)
y = torch.empty_like(x)
row_softmax_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=16)  # grid: 4 programs
print("row softmax kernel matches torch.softmax:", torch.allclose(y, torch.softmax(x, -1), atol=1e-6))

# %% [markdown]
# ### The FlashAttention kernel
#
# Each program computes one tile of `BLOCK_M` queries for one (batch, query head) pair,
# so the grid is `(ceil(N_q / BLOCK_M), B * H)`:
#
# 1. from the program ids: the query tile `pid_m`, the batch `b` and query head `h`
#    (`pid_bh = b * H + h`), and the **KV head** `h // (H // H_kv)` (not `h % H_kv`);
# 2. the tensors are contiguous `(B, heads, N, D)`, so row `n` of head `(b, h)` starts at
#    `((b * heads + h) * N + n) * D`: compute the base pointers of this program's query
#    head in `Q` and KV head in `K`, `V`; load the query tile `(BLOCK_M, D)` once, with
#    the rows past `N_Q` masked;
# 3. loop over the keys `BLOCK_N` at a time: load the tile **transposed**, `(D, BLOCK_N)`,
#    straight through the pointers (`k_base + cols[None, :] * D + offs_d[:, None]`), compute
#    `S = tl.dot(q, kT) * qk_scale`, mask keys past `N_K` (and, if `CAUSAL`, keys `j > i + shift`) with
#    `-inf`, then the online-softmax update of part 2 and `acc += tl.dot(p, v)`. With
#    `CAUSAL`, stop the loop at `min(N_K, (pid_m + 1) * BLOCK_M + shift)`;
# 4. write `O = acc / l` (in `O`'s dtype: `out.to(O.dtype.element_ty)`) and `LSE`.
#
# Two GPU habits, both in the reference kernels of the toolkit:
#
# * **Base 2.** `exp2` is a single hardware instruction; `exp(x) = 2^(x log2 e)`. The wrapper
#   passes `qk_scale = scale * log2(e)`; multiplying the scores by it puts `S` in base 2,
#   and the kernel then uses `tl.exp2` throughout. Then $m$ is in base-2 units, and the natural-log
#   $L = \ln \sum_j e^{s_j} = m \ln 2 + \ln \ell$: convert back before storing
#   (`m_i * 0.6931471805599453 + tl.log(l_safe)`; compiled Triton reads only globals made
#   with `tl.constexpr(...)`, and the CPU interpreter is laxer, so a plain global that
#   works here fails on a GPU: write the constant inline).
# * **Accumulate in fp32**: `m`, `l`, `acc` are float32 (`tl.full`, `tl.zeros` with
#   `dtype=tl.float32`); `p` is cast to `v`'s dtype for the second `tl.dot`. Pass
#   `input_precision=DOT_PRECISION` to `tl.dot` (the wrapper chooses exact fp32 products
#   on a GPU).
#
# Rows with no visible key are handled as in part 2: `m_safe` in the exponentials, then
# divide by `l_safe = tl.where(l > 0, l, 1.0)` (such a row has `acc = l = 0`, and 0/0 is
# NaN), so its output is 0, and store `lse = -inf` for it.
#
# ### Exercise 3a: the kernel

# %% nbgrader={"grade": false, "grade_id": "flash_attention_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def flash_attention_kernel(
    Q, K, V, O, LSE,  # contiguous: Q, O (B, H, N_Q, D); K, V (B, H_KV, N_K, D); LSE (B, H, N_Q)
    n_heads, n_kv_heads, N_Q, N_K,
    qk_scale,  # softmax scale times log2(e)
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,  # d, a power of two >= 16
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: ``BLOCK_M`` queries of one (batch, query head), online softmax over keys.

    Writes ``O[b, h, rows]`` (``acc / l``) and ``LSE[b, h, rows]`` (natural log).
    """
    pid_m = tl.program_id(0)  # which tile of queries
    pid_bh = tl.program_id(1)  # which (batch, query head)
    b = pid_bh // n_heads
    h = pid_bh % n_heads
    ### BEGIN SOLUTION
    kv_h = h // (n_heads // n_kv_heads)  # GQA: group g = H / H_kv, KV head h // g

    # Contiguous (B, heads, N, D): row n of head (b, h) starts at ((b * heads + h) * N + n) * D.
    q_base = Q + (b * n_heads + h) * N_Q * HEAD_DIM
    k_base = K + (b * n_kv_heads + kv_h) * N_K * HEAD_DIM
    v_base = V + (b * n_kv_heads + kv_h) * N_K * HEAD_DIM
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)  # query rows of this tile
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    row_ok = offs_m < N_Q  # the last tile may stick out of the sequence
    q_ptrs = q_base + offs_m[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_M, HEAD_DIM)
    q = tl.load(q_ptrs, mask=row_ok[:, None], other=0.0)

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)  # running max (base 2)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)  # running sum
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)  # unnormalised output

    shift = N_K - N_Q  # bottom-right causal alignment: query i sees keys j <= i + shift
    hi = N_K
    if CAUSAL:
        hi = tl.minimum(N_K, (pid_m + 1) * BLOCK_M + shift)  # later key tiles are all masked

    for start_n in range(0, hi, BLOCK_N):
        cols = start_n + offs_n  # key indices of this tile
        col_ok = cols < N_K
        kT_ptrs = k_base + cols[None, :] * HEAD_DIM + offs_d[:, None]  # K^T: (HEAD_DIM, BLOCK_N)
        kT = tl.load(kT_ptrs, mask=col_ok[None, :], other=0.0)
        s = tl.dot(q, kT, input_precision=DOT_PRECISION) * qk_scale  # S = Q K^T scale log2(e)
        keep = col_ok[None, :]
        if CAUSAL:
            keep = keep & (cols[None, :] <= offs_m[:, None] + shift)  # j <= i + shift
        s = tl.where(keep, s, float("-inf"))

        m_new = tl.maximum(m_i, tl.max(s, axis=1))  # m' = max(m, rowmax(S))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)  # rows with nothing visible yet
        p = tl.exp2(s - m_safe[:, None])  # P~ = 2^(S - m')
        alpha = tl.exp2(m_i - m_safe)  # 2^(m - m'): rescales the old sum and accumulator
        l_i = l_i * alpha + tl.sum(p, axis=1)  # l' = l alpha + rowsum(P~)
        v_ptrs = v_base + cols[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
        v = tl.load(v_ptrs, mask=col_ok[:, None], other=0.0)
        acc = acc * alpha[:, None]  # acc' = acc alpha + P~ V
        acc += tl.dot(p.to(v.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    visible = l_i > 0.0
    l_safe = tl.where(visible, l_i, 1.0)
    out = acc / l_safe[:, None]  # O = acc / l (a row with no visible key stays 0)
    # L = ln(sum_j e^(s_j)) = m ln 2 + ln l: back from base 2 to the natural log
    lse = tl.where(visible, m_i * 0.6931471805599453 + tl.log(l_safe), float("-inf"))
    o_ptrs = O + (b * n_heads + h) * N_Q * HEAD_DIM + offs_m[:, None] * HEAD_DIM + offs_d[None, :]
    tl.store(o_ptrs, out.to(O.dtype.element_ty), mask=row_ok[:, None])
    tl.store(LSE + (b * n_heads + h) * N_Q + offs_m, lse, mask=row_ok)
    ### END SOLUTION


# %% [markdown]
# ### Exercise 3b: the launch
#
# The wrapper checks its arguments (given: `check_kernel_launch` raises a clear error for
# wrong shapes or dtypes, a head size that is not a power of two, bf16 in the
# interpreter, or a CPU tensor without the interpreter), makes the inputs contiguous,
# allocates `out` (like `q`) and `lse` (`(B, H, N_q)` float32), and launches the kernel
# on the grid `(triton.cdiv(N_q, block_m), B * H)`: `kernel[grid](arguments...)`, with
# the `tl.constexpr` arguments by keyword. Pass `DOT_PRECISION="ieee"` for float32 inputs
# and `"tf32"` otherwise.

# %% nbgrader={"grade": false, "grade_id": "flash_attention_triton", "locked": false, "schema_version": 3, "solution": true}
def flash_attention_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    block_m: int = 32,
    block_n: int = 32,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """FlashAttention forward with ``flash_attention_kernel``.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)``.
        causal: bottom-right aligned causal mask.
        block_m, block_n: query / key tile sizes (powers of two >= 16).
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``out (B, H, N_q, d)`` in the input dtype and ``lse (B, H, N_q)`` float32.
    """
    check_kernel_launch(flash_attention_kernel, q, k, v, block_m, block_n)
    ### BEGIN SOLUTION
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()  # the kernel assumes this layout
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    out = torch.empty_like(q)
    lse = torch.empty(B, H, N_q, dtype=torch.float32, device=q.device)
    grid = (triton.cdiv(N_q, block_m), B * H)  # one program per (query tile, batch x head)
    flash_attention_kernel[grid](
        q, k, v, out, lse,
        H, H_kv, N_q, N_k,
        scale * LOG2E,  # exp(x) = 2^(x log2 e): the kernel works in base 2
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    return out, lse
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_triton_kernel", "locked": true, "points": 5, "schema_version": 3, "solution": false}
def _randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, dtype=dtype).to(DEVICE)


# (B, H, H_kv, N_q, N_k, causal): MHA, GQA with a sequence that is not a multiple of the
# tile, MQA, and decoding-style queries after cached keys.
for B, H, H_kv, N_q, N_k, causal in ((1, 2, 2, 16, 16, False), (2, 4, 2, 20, 20, True),
                                     (1, 4, 1, 16, 16, True), (1, 2, 2, 16, 40, True)):
    q, k, v = _randn(B, H, N_q, 16), _randn(B, H_kv, N_k, 16), _randn(B, H_kv, N_k, 16)
    out, lse = flash_attention_triton(q, k, v, causal, block_m=16, block_n=16)
    ref_out, ref_lse = dense_attention(q.cpu(), k.cpu(), v.cpu(), causal)
    label = f"B={B}, H={H}, H_kv={H_kv}, N_q={N_q}, N_k={N_k}, causal={causal}"
    assert out.shape == q.shape and out.dtype == q.dtype, (
        f"{label}: out should be like q {tuple(q.shape)} {q.dtype}, got {tuple(out.shape)} {out.dtype}")
    assert torch.allclose(out.cpu().double(), ref_out, atol=1e-4), (
        f"{label}: the output differs from dense attention by "
        f"{(out.cpu().double() - ref_out).abs().max():.2e}. Check the KV head (h // group), the "
        "causal condition j <= i + shift, and the rescaling of acc")
    assert torch.allclose(lse.cpu().double(), ref_lse, atol=1e-4), (
        f"{label}: lse should be the natural-log logsumexp m * ln(2) + ln(l)")

if DEVICE == "cpu":  # the interpreter refuses bf16
    try:
        flash_attention_triton(*(_randn(1, 1, 16, 16, dtype=torch.bfloat16) for _ in range(3)))
        raise AssertionError("bf16 should be refused in the interpreter")
    except ValueError as exc:
        assert "bfloat16" in str(exc)
print("✓ flash_attention_triton passes the visible checks")

# %% [markdown]
# On a GPU, compare your kernel's speed with PyTorch's fused attention (the course's
# `benchmarks/attention.py` does this for the toolkit's kernel). In the interpreter,
# time is no measure of anything: it runs every program instance one after the other
# in NumPy.

# %% tags=["skip-grading"]
if DEVICE == "cuda":
    import torch.nn.functional as F
    import triton.testing

    q, k, v = (torch.randn(4, 16, 2048, 64, device="cuda", dtype=torch.float16) for _ in range(3))
    for name, fn in (("yours", lambda: flash_attention_triton(q, k, v, True, 64, 64)),
                     ("torch SDPA", lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))):
        ms = triton.testing.do_bench(fn)
        print(f"{name:>10}: {ms:.3f} ms, {4 * 4 * 16 * 2048**2 * 64 / 2 / ms / 1e9:.1f} TFLOP/s")

# %% [markdown]
# ## 4. The backward pass, as a Triton kernel
#
# Training needs gradients. Autograd through plain attention would keep the $N \times N$
# probabilities of every head until the backward pass, which is exactly the memory
# FlashAttention set out to save. FlashAttention's backward (FA2, arXiv 2307.08691,
# Algorithm 2) keeps nothing of size $N^2$ either: it **recomputes** each tile of
# probabilities from the log-sum-exp $L$ saved by the forward,
#
# $$ P_{ij} = e^{S_{ij} - L_i}, \qquad S = Q K^\top \cdot \text{scale}, $$
#
# which is exact: $e^{S_{ij} - L_i} = e^{S_{ij}} / \sum_l e^{S_{il}}$. With
# $dO = \partial \text{loss} / \partial O$ given, the chain rule through $O = P V$ and the
# softmax gives, tile by tile:
#
# $$ dV = P^\top dO, \qquad dP = dO\, V^\top, \qquad dS = P \circ (dP - D), \qquad
#    dQ = dS\, K \cdot \text{scale}, \qquad dK = dS^\top Q \cdot \text{scale}. $$
#
# **Where $D$ comes from.** The softmax's Jacobian gives
# $dS_{ij} = P_{ij}\,(dP_{ij} - \sum_l P_{il}\, dP_{il})$. The sum runs over a whole row
# of keys, which no single tile holds, but it simplifies:
# $\sum_l P_{il}\, dP_{il} = \sum_l P_{il}\, (dO_i \cdot v_l) = dO_i \cdot O_i$. So
# $D_i = \mathrm{rowsum}(dO \circ O)_i$, one dot product per query, computed once before
# the kernel. Leaving $D$ out is a silent bug: $dV$ stays right, $dQ$ and $dK$ do not.
#
# **Who computes what.** One program owns a tile of `BLOCK_N` keys of one (batch, KV
# head): it loads $K_j$ and $V_j$ once and walks over every query tile that can see them,
# accumulating $dK_j$ and $dV_j$ in registers (float32). No other program touches those
# rows, so they are written once, at the end. $dQ_i$, on the other hand, collects a share
# from *every* key tile; each program adds its share with `tl.atomic_add` into a float32
# buffer that the wrapper zeroes (FA2 does the same; the toolkit's tuned kernel runs a
# second kernel for $dQ$ instead).
#
# **GQA: sum over the group.** KV head `kv_h` serves the query heads
# `kv_h * g, ..., kv_h * g + g - 1` (`g = H // H_kv`). Its gradient is the **sum** of
# what each of them sends back, so the program loops over those `g` heads *inside*, with
# one pair of accumulators for all of them. (Restarting the accumulators for each head,
# or writing one head's result over another's, keeps a single head's share.)
#
# **Causal, bottom-right.** The recomputed $P$ must be masked exactly as in the forward:
# key `j` is visible to query `i` iff `j <= i + shift`, `shift = N_K - N_Q`. The saved
# $L$ only normalises the visible keys, so an unmasked $P$ sends gradient to the future.
# Queries before `n0 - shift` (`n0` the tile's first key) see none of the tile's keys:
# start the loop over queries at `max(0, n0 - shift)`.
#
# ```
# program (key tile j, batch b, KV head kv_h):
#     load K_j, V_j;  dK = dV = 0
#     for each query head h of the group, for each query tile i (from the first that sees j):
#         load Q_i, dO_i, L_i, D_i
#         S = Q_i K_j^T scale;   P = exp(S - L_i), 0 where masked
#         dV += P^T dO_i;   dP = dO_i V_j^T;   dS = P * (dP - D_i)
#         dK += dS^T Q_i;   atomic_add(dQ_i, dS K_j scale)
#     store dK_j * scale, dV_j
# ```
#
# Mind the cases of part 3: rows past `N_Q` and keys past `N_K` must contribute nothing
# (mask `P` there), and `tl.trans(x)` transposes a tile for `tl.dot`. Cast `p` and `ds`
# to the input dtype before their `tl.dot` (`p.to(do.dtype)`), as in the forward.
#
# **Three traps, named.** Each gives wrong gradients or NaN without any error:
#
# 1. *Base 2 against natural log.* The forward ran in base 2 (`qk_scale = scale *
#    log2(e)`, `tl.exp2`), but the `lse` it stored is a **natural** log, and the kernel
#    receives the plain `scale`. Recompute $S = Q K^\top \cdot \text{scale}$ and
#    $P = e^{S - L}$ with `tl.exp`; `tl.exp2(s - lse)`, or $S$ scaled by `qk_scale`, with
#    this `lse` gives probabilities that do not sum to 1.
# 2. *A row with no visible key.* Its `lse` is $-\infty$ (causal with `N_Q > N_K`), so
#    `tl.exp(s - lse)` is $+\infty$ there, and a multiplicative mask (`p * visible`) turns
#    $\infty \cdot 0$ into NaN. Select with `tl.where(visible, tl.exp(s - lse), 0.0)`, which
#    discards the infinity, and start the query loop at `max(0, n0 - shift)` (such rows
#    are then never loaded at all).
# 3. *Buffers the kernel does not fully write.* `dq` receives `tl.atomic_add`s, so the
#    wrapper must create it zeroed (`torch.zeros`, float32), never with `torch.empty`.
#    `dk` and `dv` may be `torch.empty` only because every program stores its whole key
#    tile at the end, even a tile that no query sees (its gradient is then 0): a program
#    that returns early without storing leaves garbage in them.
#
# The hidden checks compare `dq`, `dk`, `dv` with autograd through dense float64 attention:
# causal and not, with GQA and MQA, with `N_Q < N_K` and `N_Q > N_K` (24 rows with no
# visible key, whose `dq` must be exactly 0), in float16, and with another scale and other
# tiles. A garbage `dq` buffer shows up there only if the memory it gets is not already
# zero, so do not count on a check to catch trap 3: zero it.
#
# ### Exercise 4a: the backward kernel

# %% nbgrader={"grade": false, "grade_id": "flash_attention_backward_kernel", "locked": false, "schema_version": 3, "solution": true}
@triton.jit
def flash_attention_backward_kernel(
    Q, K, V, DO, LSE, DELTA, DQ, DK, DV,  # contiguous; shapes in flash_attention_backward_triton
    n_heads, n_kv_heads, N_Q, N_K,
    scale,  # the softmax scale, 1 / sqrt(d) by default
    CAUSAL: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    HEAD_DIM: tl.constexpr,  # d, a power of two >= 16
    DOT_PRECISION: tl.constexpr,
):  # fmt: skip
    """One program: ``BLOCK_N`` keys of one (batch, KV head).

    Writes ``DK``, ``DV`` for those keys (summed over the query heads of the group) and
    adds this tile's share of ``dS K scale`` to the float32 ``DQ`` with ``tl.atomic_add``.
    """
    pid_n = tl.program_id(0)  # which tile of keys
    pid_bkv = tl.program_id(1)  # which (batch, KV head)
    b = pid_bkv // n_kv_heads
    kv_h = pid_bkv % n_kv_heads
    ### BEGIN SOLUTION
    group = n_heads // n_kv_heads  # query heads kv_h * group + r, r < group, read this KV head

    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # key rows of this tile
    offs_m = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    key_ok = offs_n < N_K  # the last tile may stick out of the sequence
    kv_rows = (b * n_kv_heads + kv_h) * N_K + offs_n  # row index in (B * H_kv * N_K, D)
    kv_ptrs = kv_rows[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_N, HEAD_DIM)
    k = tl.load(K + kv_ptrs, mask=key_ok[:, None], other=0.0)  # stays on chip all along
    v = tl.load(V + kv_ptrs, mask=key_ok[:, None], other=0.0)

    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)  # dK, dV: summed over the group
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    shift = N_K - N_Q  # query i sees keys j <= i + shift
    first_row = 0
    if CAUSAL:
        first_row = tl.maximum(0, pid_n * BLOCK_N - shift)  # earlier queries see none of these keys

    for r in range(0, group):
        h = kv_h * group + r  # GQA: the query heads of KV head kv_h are consecutive
        for start_m in range(first_row, N_Q, BLOCK_M):
            rows = start_m + offs_m  # query indices of this tile
            row_ok = rows < N_Q
            q_rows = (b * n_heads + h) * N_Q + rows  # row index in (B * H * N_Q, D)
            q_ptrs = q_rows[:, None] * HEAD_DIM + offs_d[None, :]  # (BLOCK_M, HEAD_DIM)
            q = tl.load(Q + q_ptrs, mask=row_ok[:, None], other=0.0)
            do = tl.load(DO + q_ptrs, mask=row_ok[:, None], other=0.0)
            lse = tl.load(LSE + q_rows, mask=row_ok, other=0.0)
            delta = tl.load(DELTA + q_rows, mask=row_ok, other=0.0)

            s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale  # S = Q K^T scale
            visible = row_ok[:, None] & key_ok[None, :]
            if CAUSAL:
                visible = visible & (offs_n[None, :] <= rows[:, None] + shift)  # j <= i + shift
            p = tl.where(visible, tl.exp(s - lse[:, None]), 0.0)  # P = exp(S - L), recomputed

            dv += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=DOT_PRECISION)  # P^T dO
            dp = tl.dot(do, tl.trans(v), input_precision=DOT_PRECISION)  # dP = dO V^T
            ds = p * (dp - delta[:, None])  # dS = P * (dP - D)
            dk += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=DOT_PRECISION)  # dK += dS^T Q
            dq = tl.dot(ds.to(k.dtype), k, input_precision=DOT_PRECISION) * scale  # dS K scale
            tl.atomic_add(DQ + q_ptrs, dq, mask=row_ok[:, None])  # other key tiles add theirs

    tl.store(DK + kv_ptrs, (dk * scale).to(DK.dtype.element_ty), mask=key_ok[:, None])  # dK scale
    tl.store(DV + kv_ptrs, dv.to(DV.dtype.element_ty), mask=key_ok[:, None])
    ### END SOLUTION


# %% [markdown]
# ### Exercise 4b: the launch
#
# `check_backward_launch` (given) checks every argument as in part 3, plus `out`, `dout`
# (like `q`) and `lse` (`(B, H, N_q)` float32). Then: make `q, k, v, dout` contiguous;
# compute $D$ = `(dout.float() * out.float()).sum(-1)`; allocate `dq` as float32 **zeros**
# (the kernel adds into it) and `dk`, `dv` like `k`, `v`; launch one program per
# (key tile, batch x KV head), grid `(triton.cdiv(N_k, block_n), B * H_kv)`; return
# `dq` cast to `q`'s dtype, `dk`, `dv`. `DOT_PRECISION` as in part 3.

# %% nbgrader={"grade": false, "grade_id": "flash_attention_backward_triton", "locked": false, "schema_version": 3, "solution": true}
def flash_attention_backward_triton(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    out: Tensor,
    lse: Tensor,
    dout: Tensor,
    causal: bool = False,
    block_m: int = 32,
    block_n: int = 32,
    *,
    scale: float | None = None,
) -> tuple[Tensor, Tensor, Tensor]:
    """FlashAttention backward with ``flash_attention_backward_kernel``.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)``: the forward's inputs.
        out: ``(B, H, N_q, d)``, lse: ``(B, H, N_q)`` float32: the forward's outputs.
        dout: ``(B, H, N_q, d)``, the gradient of the loss with respect to ``out``.
        causal: bottom-right aligned causal mask, as in the forward.
        block_m, block_n: query / key tile sizes (powers of two >= 16).
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``dq (B, H, N_q, d)``, ``dk``, ``dv (B, H_kv, N_k, d)`` in the input dtype; ``dk``
        and ``dv`` summed over the query heads that share a KV head.
    """
    kernel = flash_attention_backward_kernel
    check_backward_launch(kernel, q, k, v, out, lse, dout, block_m, block_n)
    ### BEGIN SOLUTION
    q, k, v, dout = q.contiguous(), k.contiguous(), v.contiguous(), dout.contiguous()
    B, H, N_q, d = q.shape
    H_kv, N_k = k.shape[1], k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    delta = (dout.float() * out.float()).sum(-1)  # D_i = rowsum(dO * O)_i: (B, H, N_q) float32
    dq = torch.zeros(B, H, N_q, d, dtype=torch.float32, device=q.device)  # atomic adds land here
    dk, dv = torch.empty_like(k), torch.empty_like(v)
    grid = (triton.cdiv(N_k, block_n), B * H_kv)  # one program per (key tile, batch x KV head)
    flash_attention_backward_kernel[grid](
        q, k, v, dout, lse.contiguous(), delta, dq, dk, dv,
        H, H_kv, N_q, N_k,
        scale,
        CAUSAL=bool(causal),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        HEAD_DIM=d,
        DOT_PRECISION="ieee" if q.dtype == torch.float32 else "tf32",
    )  # fmt: skip
    return dq.to(q.dtype), dk, dv
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_triton_backward", "locked": true, "points": 4, "schema_version": 3, "solution": false}
def dense_gradients(q, k, v, dout, causal=False, scale=None):
    """Autograd through the dense float64 attention of part 2: (dq, dk, dv)."""
    q, k, v = (t.detach().cpu().double().requires_grad_() for t in (q, k, v))
    out, _ = dense_attention(q, k, v, causal, scale)
    return torch.autograd.grad(out, (q, k, v), dout.cpu().double())


# (B, H, H_kv, N_q, N_k, causal): MHA, GQA with ragged tiles, MQA, queries after cached keys
for B, H, H_kv, N_q, N_k, causal in ((1, 2, 2, 16, 16, False), (2, 4, 2, 20, 20, True),
                                     (1, 4, 1, 16, 16, True), (1, 2, 2, 16, 40, True)):
    q, k, v = _randn(B, H, N_q, 16), _randn(B, H_kv, N_k, 16), _randn(B, H_kv, N_k, 16)
    dout = _randn(B, H, N_q, 16)
    out, lse = (t.float().to(DEVICE) for t in dense_attention(q.cpu(), k.cpu(), v.cpu(), causal))
    grads = flash_attention_backward_triton(q, k, v, out, lse, dout, causal, 16, 16)
    label = f"B={B}, H={H}, H_kv={H_kv}, N_q={N_q}, N_k={N_k}, causal={causal}"
    for name, got, want, x in zip(("dq", "dk", "dv"), grads, dense_gradients(q, k, v, dout, causal),
                                  (q, k, v)):
        assert got.shape == x.shape and got.dtype == x.dtype, (
            f"{label}: {name} should be like its input {tuple(x.shape)} {x.dtype}, got "
            f"{tuple(got.shape)} {got.dtype}")
        assert torch.allclose(got.cpu().double(), want, atol=1e-4), (
            f"{label}: {name} differs from autograd by {(got.cpu().double() - want).abs().max():.2e}. "
            "Check D = rowsum(dO * O) in dS = P * (dP - D), the causal mask on the recomputed P, "
            "and that dK, dV add up every query head of the group")
print("✓ flash_attention_backward_triton passes the visible checks")

# %% [markdown]
# Forward and backward together make a differentiable attention: a
# `torch.autograd.Function` saves `q, k, v, out, lse` in the forward (never $P$) and
# calls your backward kernel with the incoming gradient. (The toolkit's version, on its
# tuned kernels, is `toolkit.kernels.triton_attention`.) Its gradients agree with
# PyTorch's own attention, including grouped-query attention:

# %% tags=["skip-grading"]
import torch.nn.functional as F


class TritonAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, causal):
        out, lse = flash_attention_triton(q, k, v, causal, 16, 16)
        ctx.save_for_backward(q, k, v, out, lse)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        return (*flash_attention_backward_triton(q, k, v, out, lse, dout, ctx.causal, 16, 16), None)


q = _randn(1, 4, 24, 16).requires_grad_()
k, v = _randn(1, 2, 24, 16).requires_grad_(), _randn(1, 2, 24, 16).requires_grad_()
TritonAttention.apply(q, k, v, True).pow(2).sum().backward()
mine = [t.grad.clone() for t in (q, k, v)]
for t in (q, k, v):
    t.grad = None
F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).pow(2).sum().backward()
for name, a, t in zip(("dq", "dk", "dv"), mine, (q, k, v)):
    print(f"{name}: largest difference from PyTorch {(a - t.grad).abs().max():.1e}")

# %% [markdown]
# ### Question: exact, and faster
#
# FlashAttention is sometimes described as an approximation of attention. It is not.
# Answer in a few sentences each, from what you built:
#
# 1. Why do the online softmax and the tiles give the same output as
#    $\mathrm{softmax}(QK^\top/\sqrt d)\,V$, up to rounding? Say what is rescaled when the
#    running maximum grows, and which identity makes the final division right.
# 2. FlashAttention does at least as many floating-point operations as the plain
#    implementation (more in the backward pass). Why is it faster on a GPU?
# 3. What does the forward pass keep for the backward pass, what does the backward pass
#    recompute, and why is that a good trade?

# %% [markdown] nbgrader={"grade": true, "grade_id": "flash_exact_question", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# 1. For any constant $m$, $\sum_j \frac{e^{s_j}}{\sum_k e^{s_k}} v_j
#    = \frac{\sum_j e^{s_j - m} v_j}{\sum_j e^{s_j - m}}$: the factor $e^{-m}$ cancels.
#    The kernel keeps, per query row, the running maximum $m$, the running sum
#    $\ell = \sum_j e^{s_j - m}$ and the accumulator $o = \sum_j e^{s_j - m} v_j$ over
#    the key tiles seen so far. When a tile raises the maximum to $m'$, both $\ell$ and
#    $o$ are multiplied by $e^{m - m'}$, which turns them exactly into the sums relative
#    to $m'$; the new tile's terms are added relative to $m'$. After the last tile,
#    $o / \ell$ is the softmax-weighted sum. Only the order of the floating-point
#    additions differs, so the results agree to rounding, like any reordered sum.
# 2. At these sizes attention is limited by memory traffic, not arithmetic. The plain
#    implementation writes the $T \times T$ scores to the GPU's main memory (HBM), reads
#    them back for the softmax, writes the probabilities, and reads them again for the
#    product with $V$: $O(T^2)$ bytes per head moved through the slow memory.
#    FlashAttention fuses it all into one kernel: each tile of scores lives in on-chip
#    SRAM and registers, and only $Q$, $K$, $V$ are read and $O$ written, many times
#    fewer bytes; the arithmetic it adds is cheap next to the traffic it saves.
# 3. It keeps the output $O$ and one number per query row, the log-sum-exp
#    $L = m + \log \ell$: $O(T)$ memory instead of the $T \times T$ probability matrix.
#    The backward pass recomputes $S = QK^\top/\sqrt d$ tile by tile and gets the exact
#    probabilities $P = e^{S - L}$ without a second pass for the normaliser, then the
#    gradients. Recomputing costs one more $QK^\top$ product, but memory drops from
#    $O(T^2)$ to $O(T)$ (longer sequences and larger batches fit) and the reads of a
#    stored $P$, which would cost more time than the recomputation, are gone.
#
# Marking: 1 point per part. (1) the rescaling of both the sum and the accumulator by
# $e^{m - m'}$ and the cancelling constant; (2) memory traffic (HBM reads and writes of
# the $T \times T$ matrices), not FLOPs, is the bottleneck; (3) $O$ and the log-sum-exp
# saved, scores and probabilities recomputed, memory $O(T)$ for extra FLOPs.
# ### END SOLUTION

# %% [markdown]
# ## Summary
#
# * The online softmax keeps a running max $m$ and sum $\ell$, rescaling $\ell$ by
#   $e^{m - m'}$ whenever the max grows; FlashAttention rescales the output accumulator by
#   the same factor and divides by $\ell$ once at the end.
# * Working tile by tile, the largest score tensor is one `block_q x block_k` tile: $O(N)$
#   extra memory, and the result is exact, not an approximation. The forward costs $4BHN^2d$ FLOPs,
#   half with a causal mask, whose future tiles are skipped.
# * The saved logsumexp $L = m + \log \ell$ lets the backward pass recompute
#   $P = e^{S - L}$ tile by tile; with $D = \mathrm{rowsum}(dO \circ O)$ the softmax's
#   Jacobian costs one dot product per row. A program per key tile accumulates $dK$, $dV$
#   (summed over the GQA group) and adds its share of $dQ$ atomically.
# * GQA costs nothing extra: a query head reads KV head $h \,/\!/\, g$, by reshaping the
#   queries (PyTorch) or by computing the KV head's base pointer (Triton).
# * In the Triton forward a program owns one query tile of one head (in the backward, one
#   key tile of one KV head); pointers are arithmetic on strides; masks handle the tiles
#   that stick out. FlashAttention-3 (arXiv 2407.08608) adds Hopper-specific asynchrony
#   and FP8 *(reading)*.
