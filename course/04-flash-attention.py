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
# # Lecture 04: FlashAttention, exact attention in fast memory
#
# Lecture 03 made attention cheaper by computing *fewer* scores. FlashAttention (Dao et
# al., arXiv 2205.14135) computes *all* of them, exactly, and is still several times faster
# than the textbook version, because it never writes the $T \times T$ score matrix to the
# GPU's main memory. This lecture, before Assignment 04, builds the idea in four steps and
# a reading:
#
# 1. why memory traffic, not arithmetic, is the bottleneck;
# 2. the online softmax: a softmax computed in one pass over tiles;
# 3. tiled attention, forward and backward, from a saved log-sum-exp;
# 4. the same algorithm as a Triton GPU kernel (run by Triton's interpreter on a CPU);
# 5. reading: FlashAttention-2 and -3.
#
# The first cell switches Triton to its CPU interpreter when there is no GPU; it must run
# before anything imports `triton`.

# %%
# %matplotlib inline
import os

import torch

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"  # Triton's CPU interpreter; must precede `import triton`

import math  # noqa: E402

from toolkit.attention import scaled_dot_product_attention  # noqa: E402
from toolkit.flash import (  # noqa: E402
    NEG_INF,
    FlashAttention,
    PeakMemoryCounter,
    attention_forward_flops,
    attention_memory_bytes,
    flash_attention,
    flash_attention_backward,
    flash_attention_forward,
    online_softmax,
    online_softmax_trace,
)
from toolkit.notebook import friendly_errors  # noqa: E402
from toolkit.widgets.efficient import (  # noqa: E402
    attention_memory_explorer,
    example_row,
    online_softmax_stepper,
    plot_attention_memory,
    plot_online_softmax,
)

friendly_errors()
torch.manual_seed(0)

# %% [markdown]
# ## 1. The memory wall
#
# A GPU has two kinds of memory. The main memory (HBM) is large, 40 to 80 GB on an A100,
# and moves about 1.5 to 2 TB/s. The on-chip SRAM next to the arithmetic units is about ten
# times faster but tiny: some 20 MB in all, a couple of hundred kB per streaming
# multiprocessor (figures from arXiv 2205.14135). Textbook attention writes the scores
# $S = QK^\top$ to HBM, reads them back for the softmax, writes $P$, reads it again for
# $PV$: for long sequences it spends its time moving $T^2$ numbers, not multiplying them.
#
# **Try it.** How many floating-point operations does one causal forward pass of attention
# take for 32 heads of width 128 at $T = 4096$? How many bytes would the score matrices
# take in 16-bit floats? Predict (in GFLOP and GB), then run.

# %%
flops = attention_forward_flops(B=1, H=32, N=4096, d=128, causal=True)
naive = attention_memory_bytes(4096, 128, heads=32)
tiled = attention_memory_bytes(4096, 128, heads=32, tiled=True)
print(f"forward FLOPs: {flops / 1e9:.0f} GFLOP (4 B H N^2 d, halved by the causal mask)")
print(f"extra memory: naive {naive / 1e9:.2f} GB, tiled {tiled / 1e6:.2f} MB")

# %% [markdown]
# At hundreds of TFLOP/s the arithmetic takes a fraction of a millisecond; moving a
# gigabyte through HBM several times takes longer. The gap grows with $T$:

# %%
attention_memory_explorer()

# %% [markdown]
# ## 2. The online softmax
#
# To stop storing rows of scores, we must compute a softmax from a row we only see a tile
# at a time. The softmax needs the row's maximum $m$ (for stability) and the sum
# $\ell = \sum_j e^{s_j - m}$, and both seem to need the whole row first. The *online*
# softmax (Milakov and Gimelshein, arXiv 1805.02867) keeps a running maximum and a running
# sum, and whenever a new tile raises the maximum from $m$ to $m'$ it rescales what it has
# summed so far by $e^{m - m'}$:
#
# $$\ell' = \ell\, e^{m - m'} + \sum_{j \in \text{tile}} e^{s_j - m'} .$$
#
# FlashAttention does the same to the output accumulator $\sum_j e^{s_j - m} v_j$; in the
# FlashAttention-2 form used here it divides by $\ell$ once, at the end. Step through one
# query row, tile by tile:

# %%
online_softmax_stepper()

# %% [markdown]
# **Try it.** In the example row, the maximum arrives late. At which tiles does the
# running maximum change, and what are the rescale factors $e^{m - m'}$ there? Predict (a
# factor of 1 means "no change"), then run.

# %%
scores, values = example_row(n=16, d_v=3)
for step in online_softmax_trace(scores, values, block=4):
    print(f"tile {step['start']:>2}-{step['stop'] - 1:>2}: m {step['m_prev']:6.2f} -> "
          f"{step['m']:6.2f}, rescale {step['rescale']:.3f}, l = {step['l']:.3f}")
print("online == softmax:", torch.allclose(online_softmax(scores[None], block=4)[0],
                                           torch.softmax(scores, -1), atol=1e-6))
plot_online_softmax(scores, values, block=4)

# %% [markdown]
# The first factor is $e^{-\infty} = 0$: nothing had been summed yet. The second tile
# leaves the maximum where it was (factor 1), and each of the last two raises it, shrinking
# everything summed so far. After the last tile the result equals the ordinary softmax.
#
# ## 3. Tiled attention, forward and backward
#
# The forward we use (FlashAttention-2's loop order) loops over tiles of queries (outer)
# and of keys and values (inner). Each inner step computes one `block_q x block_k` tile of scores in fast memory,
# updates $m$, $\ell$ and the accumulator, and throws the tile away. The largest *score*
# tensor is one tile, and the largest tensor of all is the output ($T \times d$ per head):
# extra memory $O(T)$, not $O(T^2)$, and the result is *exact*, not an approximation.
#
# For the backward pass it keeps one number per query row, the log-sum-exp $L = m + \log
# \ell$. From it any tile of probabilities can be *recomputed*, $P = e^{S - L}$, instead of
# stored: some extra arithmetic (cheap) for much less memory traffic (expensive).
#
# **Try it.** Does the tiled forward give the same output as ordinary attention, and the
# same gradients? How much less memory does it hold at once? Predict, then run.

# %%
B, H, N, d = 1, 2, 256, 32
q, k, v = (torch.randn(B, H, N, d, requires_grad=True) for _ in range(3))
ours = flash_attention(q, k, v, causal=True, block_q=32, block_k=32)
causal = torch.ones(N, N, dtype=torch.bool).tril()
reference = scaled_dot_product_attention(q, k, v, causal)
print("outputs equal:  ", torch.allclose(ours, reference, atol=1e-5))
grads = torch.autograd.grad(ours.sum(), (q, k, v))
grads_ref = torch.autograd.grad(reference.sum(), (q, k, v))
print("gradients equal:", all(torch.allclose(a, b, atol=1e-4) for a, b in zip(grads, grads_ref)))

with torch.no_grad():
    with PeakMemoryCounter() as naive_memory:
        scaled_dot_product_attention(q, k, v, causal)
    with PeakMemoryCounter() as tiled_memory:
        out, lse = flash_attention_forward(q, k, v, causal=True, block_q=32, block_k=32)
print(f"peak extra memory: naive {naive_memory.peak / 1e3:.0f} kB, tiled "
      f"{tiled_memory.peak / 1e3:.0f} kB; largest tiled tensor "
      f"{max(tiled_memory.shapes, key=math.prod)} (the output); any {N} x {N} tensor: "
      f"{any(tuple(s[-2:]) == (N, N) for s in tiled_memory.shapes)}")

# %% [markdown]
# The backward pass, by hand: from the saved `lse` (one number per row) and the output, the
# gradients come back tile by tile, with no probability matrix kept from the forward.
# `FlashAttention.apply` is the autograd function that `flash_attention` wraps.

# %%
with torch.no_grad():
    dout = torch.ones_like(out)
    dq, dk, dv = flash_attention_backward(q, k, v, out, lse, dout, causal=True,
                                          block_q=32, block_k=32)
print("dq from the saved lse == autograd's:", torch.allclose(dq, grads_ref[0], atol=1e-4))
print("lse of the rows (first 4):", lse[0, 0, :4].numpy().round(3),
      " a row with no visible key would get", NEG_INF)
same = torch.allclose(FlashAttention.apply(q, k, v, True, 32, 32, None), ours, atol=1e-6)
print("FlashAttention.apply == flash_attention:", same)

# %% [markdown]
# Three ways to get the backward wrong without any error, which Assignment 04 names:
# recomputing $P$ from the forward's base-2 scores against the natural-log `lse`; a row
# with no visible key, whose `lse` is $-\infty$, so that $e^{S - L}$ overflows to
# $+\infty$ before a multiplicative mask makes it NaN (select with `where` instead); and
# gradient buffers left uninitialised (`dq` collects atomic adds from every key tile:
# zero it). And one way to get the forward wrong: `causal_tile_mask` is `True` where a
# key is *visible*, like every mask of the course, so the hidden keys are
# `~causal_tile_mask(...)` in `masked_fill`.
#
# With a causal mask, tiles entirely above the diagonal hold no visible key: they are
# skipped, which is where the factor 2 in the FLOPs comes from.
#
# ## 4. The same algorithm on a GPU: Triton
#
# [Triton](https://triton-lang.org) is a Python-embedded language for GPU kernels. You
# write what *one program* does (here: one tile of queries of one head), with pointer
# arithmetic and masked loads; Triton compiles it and runs a grid of programs in parallel.
# Assignment 04 asks you to write this kernel. The toolkit's tuned version runs below, in
# the interpreter on a CPU (slow, NumPy underneath, so the shapes are tiny) and compiled on
# a GPU; in a course, the toolkit you install holds it back until Assignment 04 is unlocked.

# %%
from toolkit.kernels import HAS_TRITON, flash_attention_tuned, interpreter_active  # noqa: E402

if HAS_TRITON:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    qt, kt, vt = (torch.randn(1, 2, 64, 16, device=device) for _ in range(3))
    out_triton, lse_triton = flash_attention_tuned(qt, kt, vt, causal=True)
    out_torch, _ = flash_attention_forward(qt, kt, vt, causal=True)
    print(f"interpreter: {interpreter_active()}, Triton == PyTorch tiles: "
          f"{torch.allclose(out_triton, out_torch, atol=1e-4)}")
else:
    print("Triton is not installed here (it ships for Linux); parts 1 to 3 still apply.")

# %% [markdown]
# ### When storing wins: short sequences on a CPU
#
# Recomputing the scores in the backward is the right trade when moving them costs more
# than computing them twice. That is a property of the machine and the size, not a law.
# On a CPU, a training batch of 128-token sequences has probabilities of a few MiB per
# layer: they fit in the caches, and keeping them is cheaper than a second pass. The
# capstone's CPU backend (`toolkit.models.blocked_attention`, used by `FastGPT` when it
# trains on a CPU) keeps the causal skipping of the tiled version (a block of 32 queries
# only meets the keys it can see) but stores each block's probabilities, and it stacks
# the query heads that share a KV head (GQA) so that one matrix product serves the whole
# group. The cell times it against PyTorch's fused CPU kernel, forward and backward, on the
# same tensors (the capstone's batch); the two agree to float rounding.

# %%
import time  # noqa: E402

import torch.nn.functional as F  # noqa: E402

from toolkit.models.blocked_attention import blocked_causal_attention  # noqa: E402


def step_ms(attend, q, k, v):
    """Wall-clock milliseconds of one forward and backward of ``attend``."""
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    start = time.perf_counter()
    attend(q, k, v).sum().backward()
    return 1e3 * (time.perf_counter() - start)


def fused(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


qb = torch.randn(16, 4, 128, 32)  # 16 sequences, 4 query heads, 128 positions, head size 32
kb, vb = torch.randn(16, 2, 128, 32), torch.randn(16, 2, 128, 32)  # 2 KV heads
same = torch.allclose(blocked_causal_attention(qb, kb, vb), fused(qb, kb, vb), atol=1e-5)
print("same output:", same)
# Taking turns, 21 times each (after one warm-up call), so that whatever else the machine
# does falls on both alike; the medians:
times = {"PyTorch's fused kernel": [], "blocked": []}
for _ in range(22):
    for name, attend in zip(times, (fused, blocked_causal_attention)):
        times[name].append(step_ms(attend, qb, kb, vb))
print("forward + backward:", ", ".join(f"{name} {sorted(t[1:])[10]:.1f} ms"
                                       for name, t in times.items()))

# %% [markdown]
# Try a longer sequence, a head size of 64, or one KV head per query head, and see where
# the stored probabilities stop paying (`benchmarks/attention.py --cpu-backends` measures
# the grid). A GPU's fast memory is a few hundred KiB per multiprocessor: there the
# probabilities do not fit, which is the case FlashAttention was built for, and `FastGPT`
# keeps PyTorch's fused kernel.
#
# The memory model once more, as a static figure for a 4-head, head-size-64 model:

# %%
plot_attention_memory(d=64, heads=4)

# %% [markdown]
# ## 5. Reading: FlashAttention-2 and -3
#
# **FlashAttention-2** (arXiv 2307.08691) keeps the maths and reorganises the work. It
# swaps the loops: FlashAttention-1 kept the key/value tiles outside and rescaled each
# query tile's output in main memory at every step, while FlashAttention-2 keeps one query
# tile's accumulator in fast memory for the whole inner loop and divides by $\ell$ once at
# the very end. Its outer loop over query tiles runs in parallel across the GPU (also along
# the sequence, not only over batch and heads), and the non-matmul work (rescaling) is cut
# down because matrix units are much faster than the rest. Same result, about twice as
# fast. That is the version this lecture and Assignment 04 follow.
#
# **FlashAttention-3** (Shah et al., arXiv 2407.08608) targets NVIDIA's Hopper GPUs
# (H100), where FlashAttention-2 used only about a third of the peak throughput. It
# overlaps everything that can run at once: separate groups of threads ("warps") load tiles
# with the asynchronous copy engine (TMA) while others compute; while one group of warps
# runs its softmax, another runs its matrix multiplies ("ping-pong" scheduling), and within
# a group the softmax of one tile overlaps the multiply of the next. It also adds
# an FP8 path, with a random orthogonal transform of q and k (incoherent processing) that
# spreads outliers before rounding to 8 bits, which keeps the error low. The paper reports
# up to 75% of the H100's FP16 peak. None of this changes the maths you implement; it is
# the same online softmax, scheduled for one particular chip.
#
# Related: Rabe and Staats (arXiv 2112.05682) showed independently that attention needs
# only $O(\sqrt{T})$ or $O(\log T)$ extra memory, by the same chunking trick.
#
# ## Summary
#
# * Attention is limited by memory traffic: the $T^2$ scores are cheap to compute and
#   expensive to move.
# * The online softmax keeps a running max $m$ and sum $\ell$, rescaling by $e^{m - m'}$
#   whenever the max grows; the output accumulator is rescaled the same way.
# * Tiled attention is exact, holds $O(T)$ extra memory, and saves only the log-sum-exp
#   for a backward pass that recomputes each tile.
# * A Triton kernel is one program per query tile; masks handle the tiles that stick out.
#
# Now open **Assignment 04**: the online softmax, tiled attention with its log-sum-exp,
# and the Triton kernel with causal masking and grouped-query heads.
