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
# # Assignment 02: Positional encoding, from sinusoids to YaRN
#
# In Assignment 01 you showed that self-attention without a mask is
# **permutation-equivariant**: shuffle the tokens and the outputs come back shuffled the
# same way. On its own, attention reads a *set*. Every Transformer therefore injects
# position somewhere, and the schemes differ in two ways:
#
# * **where** the position enters: added once to the token embeddings at the bottom
#   (sinusoidal, learned), or inside every attention layer (RoPE on the queries and keys,
#   ALiBi and T5 as a bias on the scores);
# * **what** the model can read from it: the absolute index $p$ of a token, or only the
#   offset $m - n$ between a query and a key.
#
# The second question decides what happens when a model meets a sequence longer than any
# it was trained on, which is where the second half of this assignment goes: position
# interpolation, NTK-aware scaling and YaRN, the methods that stretch a RoPE model
# trained on 4k tokens to 32k or 128k.
#
# | part | you write | points |
# |---|---|---|
# | 1 | spot the bug in circulating sinusoid code: `sinusoid_frequencies` | 1 |
# | 1 | a short written answer: what was wrong with the blog code | 2 (read by a person) |
# | 1 | `sinusoidal_encoding` | 2 |
# | 2 | RoPE, half-split layout: `rope_inv_freq`, `rotate_half`, `rope_cos_sin`, `apply_rope` | 4 |
# | 2 | RoPE, interleaved layout: `rotate_interleaved` and `layout="interleaved"` | 2 |
# | 2 | a short written answer: why RoPE scores see only $m - n$ | 2 (read by a person) |
# | 3 | position interpolation and NTK-aware scaling: `rope_inv_freq_linear`, `rope_inv_freq_ntk` | 1 |
# | 3 | YaRN: `yarn_band_ratios`, `yarn_inv_freq_and_temperature` | 3 |
# | 3 | dynamic NTK and LongRoPE: `rope_inv_freq_dynamic_ntk`, `longrope_inv_freq_and_attention_factor` (and two helpers) | 3 |
# | 4 | ALiBi slopes for any number of heads: `alibi_slopes` | 2 |
# | 4 | the ALiBi bias, with a KV cache: `alibi_bias` | 2 |
# | 6 | measuring a trained model past its length: `loss_by_position`, `passkey_accuracy`, `rope_extension` | 6 |
# | 6 | a written question: which method the measurements support, and why | 3 (read by a person) |
#
# **How this notebook is graded.** Fill in each cell marked `YOUR CODE HERE`. The test
# cell below each exercise runs quick checks so you can see whether you are on the right
# track; passing them is a good sign, not a guarantee. The grader runs its own hidden
# checks on other inputs (other sizes, bases, positions, head counts) and also checks
# *properties* (a RoPE score depends only on the offset, a KV cache gives the same
# result as the full sequence, ...). Each part scores the fraction of its checks that
# pass. While the hidden checks run, the course toolkit's reference versions of these
# functions (`toolkit.position.*`) are switched off, and so are Hugging Face's RoPE and
# ALiBi helpers (its rope-scaling functions, LLaMA's, GPT-NeoX's and GPT-J's rotations,
# BLOOM's `build_alibi_tensor`): write the maths yourself with plain tensor operations.
#
# **Conventions.**
#
# * Attention tensors have shape `(batch, heads, seq, d_head)`, written `(B, H, T, d)`.
# * Positions are absolute integers $0, 1, 2, \dots$. With a KV cache that already holds
#   $P$ tokens, the new tokens have positions $P, P+1, \dots$
# * Feature *pairs* are indexed by $i = 0 \dots d/2 - 1$. Everything below rotates or
#   encodes features two at a time, so $d$ is always even.
# * Compute angles in `float64` where a docstring says so: `float32` has about 7
#   significant digits, so at position 100 000 an angle is only known to about 0.01 rad.

# %%
from __future__ import annotations

import math

import torch
from torch import Tensor

# Argument checks shared by every function below (they raise ValueError with a clear
# message). Use them in your solutions; they are not exercises.
from toolkit.arguments import (
    check_context_scale,
    check_even,
    check_frequency_base,
    check_int,
    check_rope_layout,
)
from toolkit.long_context import (
    DIGITS,
    EXTENSIONS,
    ExperimentConfig,
    check_measurements_written,
    measure,
    passkey_tokens,
    position_model,
    trained_models,
)
from toolkit.notebook import friendly_errors
from toolkit.widgets.position import (
    alibi_explorer,
    context_extension_explorer,
    long_context_explorer,
    rope_rotation_explorer,
    rope_spectrum_explorer,
    score_vs_distance_explorer,
    train_short_test_long_explorer,
)

friendly_errors()  # one short line, not a long traceback, for an exercise not written yet

_ = torch.manual_seed(0)  # reproducible examples

# %% [markdown]
# ## 1. Sinusoidal positions (arXiv 1706.03762)
#
# The original Transformer adds a fixed vector $PE(p) \in \mathbb{R}^d$ to the embedding
# of the token at position $p$. Its features come in pairs; pair $i$ holds a sine and a
# cosine of the same angle:
#
# $$
# PE(p, 2i) = \sin(p\, w_i), \qquad PE(p, 2i+1) = \cos(p\, w_i), \qquad
# w_i = \frac{1}{\text{base}^{2i/d}}, \quad i = 0, \dots, d/2 - 1,
# $$
#
# with base $= 10000$. Read $(\sin(p w_i), \cos(p w_i))$ as a point on a circle: as $p$
# grows, pair $i$ walks around its circle at $w_i$ radians per token. Pair 0 is fast
# ($w_0 = 1$, one turn every $2\pi \approx 6.3$ tokens), like the seconds hand of a clock;
# the last pair is very slow (one turn every $2\pi \cdot \text{base}^{(d-2)/d}$ tokens,
# about 60 000 for $d = 512$), like the hour hand. Together the hands tell every position
# apart, from neighbours to tokens thousands apart.
#
# Two properties make this more than an arbitrary barcode:
#
# * **A shift is a fixed rotation.** By the angle-addition formulas, moving $k$ positions
#   turns every pair by the angle $k w_i$, whatever $p$ is: $PE(p + k) = M_k\, PE(p)$ for
#   a matrix $M_k$ (one $2\times2$ rotation per pair) that depends on $k$ alone. A linear
#   layer can therefore learn "look $k$ tokens back".
# * **Dot products see only the offset.** $PE(m) \cdot PE(n) = \sum_i \big(\sin m w_i
#   \sin n w_i + \cos m w_i \cos n w_i\big) = \sum_i \cos\big((m - n) w_i\big)$.
#
# ### Exercise 1a: spot the bug
#
# The function below is a close copy of sinusoid code that circulates in blog posts and
# tutorials. It runs, it returns the right shape, the plots look plausible. Run the next
# two cells and compare its slowest wavelength with what the formula above predicts.

# %%
def sinusoid_frequencies_from_a_blog(d_model: int, base: float = 10000.0) -> Tensor:
    """Circulating code: one angular speed per pair of features. Something is off."""
    dim = torch.arange(0, d_model, 2, dtype=torch.float64)  # 0, 2, 4, ..., d-2
    return 1.0 / (base ** (2 * dim / d_model))


# %% tags=["skip-grading"]
d_demo = 512
w_blog = sinusoid_frequencies_from_a_blog(d_demo)
print("expected slowest wavelength 2*pi*base^((d-2)/d):",
      f"{2 * math.pi * 10000 ** ((d_demo - 2) / d_demo):.4g} tokens")
print("the blog code's slowest wavelength             :",
      f"{2 * math.pi / w_blog[-1].item():.4g} tokens")
print("the blog code's w_i for i = 0..4:", [f"{w:.3g}" for w in w_blog[:5].tolist()])

# %% [markdown]
# Find the mistake, then write the corrected function: `sinusoid_frequencies` returns
# the speeds $w_i = \text{base}^{-2i/d}$ (`sinusoidal_encoding` below uses it). Then, in
# the written cell under the test cell, say what was wrong with the blog code and what it
# does to the wavelengths (read by a person, 2 points).

# %% nbgrader={"grade": false, "grade_id": "sinusoid_frequencies", "locked": false, "schema_version": 3, "solution": true}
def sinusoid_frequencies(d_model: int, base: float) -> Tensor:
    """The angular speeds ``w_i = base^(-2i/d)`` for ``i = 0 .. d/2 - 1``.

    Returns:
        ``(d_model / 2,)`` float64 tensor, from ``w_0 = 1`` down to ``base^(-(d-2)/d)``.
    """
    ### BEGIN SOLUTION
    # The blog code's `dim` already *is* 2i (it steps by 2), so `2 * dim / d` is 4i/d: the
    # exponent is doubled and the slowest wavelength becomes about 2 pi base^2 instead of
    # about 2 pi base.
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i = 0, 2, ..., d-2
    return base ** (-two_i / d_model)  # w_i = base^(-2i/d)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_spot_the_bug", "locked": true, "points": 1, "schema_version": 3, "solution": false}
w = sinusoid_frequencies(4, 100.0)  # d = 4, base = 100: w = [100^0, 100^(-2/4)] = [1, 0.1]
assert isinstance(w, torch.Tensor) and w.shape == (2,), (
    f"expected a (d/2,) = (2,) tensor, got {getattr(w, 'shape', type(w))}")
assert w.dtype == torch.float64, f"return float64 speeds, got {w.dtype}"
assert torch.allclose(w, torch.tensor([1.0, 0.1], dtype=torch.float64)), (
    f"got {w.tolist()}, expected [1.0, 0.1] for d = 4 and base = 100: w_i = base^(-2i/d) "
    "for i = 0, 1")
w = sinusoid_frequencies(512, 10000.0)
slowest = 2 * math.pi / w[-1].item()
assert abs(slowest / (2 * math.pi * 10000 ** (510 / 512)) - 1) < 1e-9, (
    f"the slowest wavelength should be 2 pi base^((d-2)/d), about 60,600 tokens; got {slowest:.4g}")
print("✓ sinusoid_frequencies passes the visible checks")

# %% [markdown]
# ### Question: what was wrong with the blog code?
#
# In one to three sentences: which line of `sinusoid_frequencies_from_a_blog` is wrong and
# why, and what it does to the angular speeds and to the slowest wavelength (for
# $d = 512$, base $10^4$).

# %% [markdown] nbgrader={"grade": true, "grade_id": "spot_the_bug_question", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# `dim = torch.arange(0, d_model, 2)` already *is* $2i$ (it steps by 2), so
# `2 * dim / d_model` is $4i/d$: the exponent is doubled and the code computes
# $w_i = \text{base}^{-4i/d}$ instead of $\text{base}^{-2i/d}$. The speeds fall twice as
# fast on a log scale: the slowest wavelength becomes about
# $2\pi\,\text{base}^{2(d-2)/d} \approx 6 \times 10^8$ tokens instead of about
# $2\pi\,\text{base}^{(d-2)/d} \approx 60{,}600$, and the upper half of the pairs turn
# so slowly that they are nearly constant over any real context: wasted dimensions.
#
# Marking: 1 point for naming the doubled exponent (`dim` is already $2i$, so the code
# uses $4i/d$); 1 point for its effect (speeds fall too fast, the slowest wavelength
# near $2\pi\,\text{base}^2$ instead of $2\pi\,\text{base}$, slow pairs nearly constant).
# ### END SOLUTION

# %% [markdown]
# ### Exercise 1b: the sinusoidal table
#
# Now build the whole table, `(n_positions, d_model)`, with sine and cosine
# **interleaved**: column $2i$ holds $\sin(p w_i)$ and column $2i+1$ holds $\cos(p w_i)$.
# (Some libraries put all the sines first and all the cosines after. That is a fixed
# permutation of the columns and works just as well inside a model, but here we follow the
# paper's layout.) Compute the angles $p\, w_i$ in float64 and cast the finished table to
# `dtype` at the end. Strided assignment (`pe[:, 0::2] = ...`) fills every other column.

# %% nbgrader={"grade": false, "grade_id": "sinusoidal_encoding", "locked": false, "schema_version": 3, "solution": true}
def sinusoidal_encoding(
    n_positions: int, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The sinusoidal table ``PE`` of arXiv 1706.03762.

    ``PE[p, 2i] = sin(p w_i)`` and ``PE[p, 2i+1] = cos(p w_i)`` with ``w_i`` from
    :func:`sinusoid_frequencies`, for positions ``p = 0 .. n_positions - 1``.

    Args:
        n_positions: number of rows (``0`` gives an empty table).
        d_model: even width ``d``.
        base: geometric base of the wavelengths.
        dtype: dtype of the returned table (angles are computed in float64 first).

    Returns:
        ``(n_positions, d_model)`` tensor of ``dtype``.

    Raise ``ValueError`` for a negative ``n_positions``, an odd or non-positive
    ``d_model`` or a ``base <= 1``: ``check_int("n_positions", n_positions, minimum=0)``,
    ``check_even("d_model", d_model)`` and ``check_frequency_base(base)`` do it for you.
    """
    ### BEGIN SOLUTION
    check_int("n_positions", n_positions, minimum=0)
    check_even("d_model", d_model)
    check_frequency_base(base)
    p = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    angles = p * sinusoid_frequencies(d_model, base)  # p w_i, (P, d/2)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)  # even columns: sines
    pe[:, 1::2] = torch.cos(angles)  # odd columns: cosines of the same angles
    return pe.to(dtype)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_sinusoidal", "locked": true, "points": 2, "schema_version": 3, "solution": false}
pe = sinusoidal_encoding(6, 4, base=100.0)  # w = [1, 0.1]
assert isinstance(pe, torch.Tensor) and pe.shape == (6, 4), (
    f"expected (n_positions, d_model) = (6, 4), got {getattr(pe, 'shape', type(pe))}")
assert pe.dtype == torch.float32, f"the default dtype is float32, got {pe.dtype}"
assert torch.allclose(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0])), (
    f"position 0 has every angle 0: [sin 0, cos 0, sin 0, cos 0] = [0, 1, 0, 1]; got {pe[0].tolist()}")
p = torch.arange(6, dtype=torch.float64)
expected = torch.stack([torch.sin(p), torch.cos(p), torch.sin(p / 10), torch.cos(p / 10)], dim=1)
assert torch.allclose(pe.double(), expected, atol=1e-6), (
    "column 2i is sin(p w_i) and column 2i+1 is cos(p w_i), sine and cosine interleaved; "
    f"row 3 should be {[round(v, 4) for v in expected[3].tolist()]}, got "
    f"{[round(v, 4) for v in pe[3].tolist()]}")
assert sinusoidal_encoding(3, 8, dtype=torch.float64).dtype == torch.float64, "respect `dtype`"
assert sinusoidal_encoding(0, 8).shape == (0, 8), "n_positions = 0 gives an empty (0, d) table"

# PE(m) . PE(n) depends only on m - n: the Gram matrix is constant along its diagonals.
pe = sinusoidal_encoding(40, 16, dtype=torch.float64)
gram = pe @ pe.T
for k in (0, 1, 5):
    diagonal = torch.diagonal(gram, offset=k)
    assert torch.allclose(diagonal, diagonal[0].expand_as(diagonal), atol=1e-9), (
        f"PE(p) . PE(p + {k}) should be the same for every p")
print("✓ sinusoidal_encoding passes the visible checks")

# %% [markdown]
# ### Learned absolute positions (reading)
#
# BERT and GPT-2 replace the fixed table with a trainable one: an `nn.Embedding` with one
# row per position, `max_seq_len` rows in all (512 for BERT, 1024 for GPT-2). It can learn
# whatever pattern helps, but it has **no row** for a position it never saw: it cannot
# extrapolate at all. A longer input must raise a clear error, not index out of range
# silently (on a GPU, an out-of-range embedding lookup fails asynchronously, far from its
# cause). The toolkit's version says what to do:

# %% tags=["skip-grading"]
from toolkit.position import LearnedPositionalEmbedding  # noqa: E402

learned = LearnedPositionalEmbedding(max_seq_len=8, d_model=4)
print("8 positions:", tuple(learned(8).shape))
try:
    learned(10)
except ValueError as err:
    print("10 positions: ValueError:", err)

# %% [markdown]
# ## 2. Rotary position embedding, RoPE (arXiv 2104.09864)
#
# Sinusoids are *added* to the input, so a query-key score mixes content and position in
# four cross terms, and only some of them are functions of $m - n$. RoPE (Su et al.)
# puts position where the score is computed, and in a form that can only see the offset.
# Instead of adding anything, it **rotates** every query and key feature pair by an angle
# proportional to the token's position:
#
# $$
# \begin{pmatrix} a' \\ b' \end{pmatrix} =
# \begin{pmatrix} \cos p\theta_i & -\sin p\theta_i \\ \sin p\theta_i & \cos p\theta_i \end{pmatrix}
# \begin{pmatrix} a \\ b \end{pmatrix},
# \qquad \theta_i = \text{base}^{-2i/d}, \quad i = 0, \dots, d/2 - 1.
# $$
#
# The speeds $\theta_i$ are the sinusoid's $w_i$ again (HF calls the vector `inv_freq`).
# Write $R_p$ for the block-diagonal matrix that rotates every pair. Rotations of the same
# planes compose by adding angles and are undone by their transpose, so
# $R_m^\top R_n = R_{n-m}$ and
#
# $$
# \langle R_m q, R_n k\rangle = q^\top R_m^\top R_n k = q^\top R_{n-m}\, k .
# $$
#
# The score between a query at $m$ and a key at $n$ depends on their contents and on
# $n - m$, never on $m$ or $n$ alone. RoPE is applied to $q$ and $k$ after their
# projections, in every layer, and **never to $v$**.
#
# ### Two memory layouts
#
# *Which* two features form pair $i$ is a convention, and both are in use:
#
# | layout | pair $i$ | used by |
# |---|---|---|
# | **half-split** ("rotate_half") | $(x_i,\ x_{i + d/2})$ | GPT-NeoX, Hugging Face LLaMA / Mistral / Qwen |
# | **interleaved** | $(x_{2i},\ x_{2i+1})$ | RoFormer, GPT-J, Meta's original LLaMA code |
#
# With the half-split layout the whole rotation is two element-wise products. Let
# $\mathrm{rotate\_half}(x) = (-x_{d/2 \dots d-1},\ x_{0 \dots d/2-1})$, the two halves
# swapped with a sign flip: for each pair $(a, b)$ it gives $(-b, a)$, a quarter turn.
# Then
#
# $$
# \mathrm{RoPE}(x) = x \odot \cos + \mathrm{rotate\_half}(x) \odot \sin,
# $$
#
# where `cos` and `sin` hold the angles $p\theta_i$ laid out to match: in the half layout
# $[\,p\theta_0, \dots, p\theta_{d/2-1},\ p\theta_0, \dots, p\theta_{d/2-1}\,]$, each angle
# written at both members of its pair. Check one pair: $(a\cos - b\sin,\ b\cos + a\sin)$,
# the rotation above.
#
# ### Exercise 2a: RoPE in the half-split layout
#
# Four functions. Write them for `layout="half"` first; `layout="interleaved"` is
# Exercise 2b, where you come back and complete `rope_cos_sin` and `apply_rope`.

# %% nbgrader={"grade": false, "grade_id": "rope_inv_freq", "locked": false, "schema_version": 3, "solution": true}
def rope_inv_freq(
    d_head: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """RoPE's angular speeds ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2 - 1``.

    Compute in float64, then cast to ``dtype``. Validate the arguments with
    ``check_even("d_head", d_head)`` and ``check_frequency_base(base)``.

    Returns:
        ``(d_head / 2,)`` tensor of ``dtype``.
    """
    ### BEGIN SOLUTION
    check_even("d_head", d_head)
    check_frequency_base(base)
    two_i = torch.arange(0, d_head, 2, dtype=torch.float64)  # 2i = 0, 2, ..., d-2
    return (base ** (-two_i / d_head)).to(dtype)  # theta_i = base^(-2i/d)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "rotate_half", "locked": false, "schema_version": 3, "solution": true}
def rotate_half(x: Tensor) -> Tensor:
    """``(x_1, x_2) -> (-x_2, x_1)`` on the two halves of the last axis.

    ``x_1 = x[..., :d/2]``, ``x_2 = x[..., d/2:]``. Shape is preserved. Raise
    ``ValueError`` if the last dimension is odd.
    """
    ### BEGIN SOLUTION
    if x.shape[-1] % 2:
        raise ValueError(f"last dimension must be even, got {x.shape[-1]}")
    x1, x2 = x.chunk(2, dim=-1)  # first half, second half
    return torch.cat((-x2, x1), dim=-1)
    ### END SOLUTION


# %% nbgrader={"grade": false, "grade_id": "rope_cos_sin", "locked": false, "schema_version": 3, "solution": true}
def rope_cos_sin(
    positions: Tensor, inv_freq: Tensor, layout: str = "half"
) -> tuple[Tensor, Tensor]:
    """``cos`` and ``sin`` of the angles ``p * theta_i``, laid out for ``layout``.

    Each angle appears twice along the last axis, at the two members of its pair:

    * ``"half"``: ``[a_0, ..., a_{d/2-1}, a_0, ..., a_{d/2-1}]``;
    * ``"interleaved"`` (Exercise 2b): ``[a_0, a_0, a_1, a_1, ...]``.

    Compute the angles in ``inv_freq``'s dtype (convert ``positions`` to it first).

    Args:
        positions: absolute positions, ``(T,)`` or ``(B, T)`` (int or float).
        inv_freq: ``(d_head / 2,)`` floating-point angular speeds.
        layout: ``"half"`` or ``"interleaved"`` (check it with ``check_rope_layout(layout)``).

    Returns:
        ``(cos, sin)``, each ``(T, d_head)`` for ``(T,)`` positions, or
        ``(B, 1, T, d_head)`` for ``(B, T)`` positions (the 1 broadcasts over heads).
        Raise ``ValueError`` if ``positions`` is not a 1-D or 2-D tensor, or ``inv_freq``
        is not a 1-D floating-point tensor.
    """
    ### BEGIN SOLUTION
    check_rope_layout(layout)
    if not isinstance(positions, Tensor) or positions.ndim not in (1, 2):
        raise ValueError("positions must be a tensor shaped (T,) or (B, T)")
    if not isinstance(inv_freq, Tensor) or inv_freq.ndim != 1:
        raise ValueError("inv_freq must be a 1-D tensor of d_head / 2 angular speeds")
    if not inv_freq.dtype.is_floating_point:
        raise ValueError(f"inv_freq must be floating point, got {inv_freq.dtype}")
    angles = positions.to(inv_freq.dtype)[..., None] * inv_freq  # (..., T, d/2)
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)  # a_0..a_{d/2-1}, a_0..a_{d/2-1}
    else:
        angles = torch.repeat_interleave(angles, 2, dim=-1)  # a_0, a_0, a_1, a_1, ...
    if positions.ndim == 2:
        angles = angles.unsqueeze(-3)  # (B, 1, T, d): the same angles for every head
    return torch.cos(angles), torch.sin(angles)
    ### END SOLUTION


# %% [markdown]
# `apply_rope` puts the pieces together. Two details matter in real models:
#
# * **Absolute positions, including with a KV cache.** During generation the cache holds
#   the keys of the $P$ tokens seen so far, already rotated when they were written, and
#   they keep that rotation. The new token must be rotated for position $P$, not 0. So
#   `apply_rope` takes the positions as an argument, and rotating tokens
#   $P \dots T-1$ with positions $P \dots T-1$ must give exactly the rows $P \dots T-1$ of
#   the full sequence's result.
# * **Batched positions.** With left padding every sequence in a batch starts at a
#   different position, so `positions` may be `(B, T)`; `rope_cos_sin` then returns
#   `(B, 1, T, d)`, which broadcasts over the heads of a `(B, H, T, d)` tensor.
#
# Context-extension methods (Part 3) change only the speeds, so `apply_rope` accepts an
# optional `inv_freq` that replaces the default $\theta_i$, and an `attention_scaling`
# that multiplies `cos` and `sin` (YaRN uses it).

# %% nbgrader={"grade": false, "grade_id": "apply_rope", "locked": false, "schema_version": 3, "solution": true}
def apply_rope(
    x: Tensor,
    positions: Tensor,
    *,
    base: float = 10000.0,
    layout: str = "half",
    inv_freq: Tensor | None = None,
    attention_scaling: float = 1.0,
) -> Tensor:
    """Rotate every feature pair of ``x`` by ``p * theta_i``: ``x * cos + rotate(x) * sin``.

    Args:
        x: ``(B, H, T, d_head)`` queries or keys (any leading shape works with ``(T,)``
            positions).
        positions: absolute positions, ``(T,)`` or ``(B, T)``, with ``T = x.shape[-2]``.
        base: RoPE base, used when ``inv_freq`` is not given.
        layout: ``"half"`` (``rotate_half``) or ``"interleaved"`` (Exercise 2b:
            ``rotate_interleaved``).
        inv_freq: ``(d_head / 2,)`` angular speeds replacing the default. Default:
            ``rope_inv_freq(d_head, base)`` in float32, or in float64 when ``x`` is
            float64.
        attention_scaling: multiplies ``cos`` and ``sin`` in their own dtype (float32, or
            float64 for float64 ``x``), *before* the cast to ``x.dtype``:
            ``(cos * attention_scaling).to(x.dtype)``, as Hugging Face's rotary embedding
            does. Casting first can differ by one unit in the last place in float16 and
            bfloat16; the hidden checks test ``attention_scaling`` in float64 only, where
            both orders agree, so the order is stated here but not graded.

    Returns:
        A tensor of the same shape and dtype as ``x`` (cast ``cos`` and ``sin`` to
        ``x.dtype`` before using them).

    Raise ``ValueError`` for: ``x`` not a tensor with at least 2 dimensions; an odd
    ``d_head`` (``check_even``); an unknown layout (``check_rope_layout``); ``positions``
    not a tensor shaped ``(T,)`` or ``(B, T)`` with the right ``T``; ``(B, T)`` positions
    with an ``x`` that is not 4-D or whose batch size is neither ``B`` nor broadcastable
    (``positions.shape[0]`` must be 1 or ``x.shape[0]``); ``inv_freq`` not of shape
    ``(d_head / 2,)``.
    """
    ### BEGIN SOLUTION
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise ValueError("x must be a tensor shaped (B, H, T, d_head)")
    d_head, T = x.shape[-1], x.shape[-2]
    check_even("d_head (last dimension of x)", d_head)
    check_rope_layout(layout)
    if not isinstance(positions, Tensor):
        raise ValueError("positions must be a tensor of absolute positions, shaped (T,) or (B, T)")
    if positions.ndim not in (1, 2) or positions.shape[-1] != T:
        raise ValueError(
            f"positions must be shaped (T,) or (B, T) with T = x.shape[-2] = {T}, "
            f"got {tuple(positions.shape)}"
        )
    if positions.ndim == 2 and (x.ndim != 4 or positions.shape[0] not in (1, x.shape[0])):
        raise ValueError(
            f"(B, T) positions need x shaped (B, H, T, d_head) with the same B; got positions "
            f"{tuple(positions.shape)} and x {tuple(x.shape)}"
        )
    if inv_freq is None:
        angle_dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
        inv_freq = rope_inv_freq(d_head, base, dtype=angle_dtype).to(x.device)
    if inv_freq.shape != (d_head // 2,):
        raise ValueError(
            f"inv_freq must have shape (d_head / 2,) = ({d_head // 2},), "
            f"got {tuple(inv_freq.shape)}"
        )
    cos, sin = rope_cos_sin(positions.to(inv_freq.device), inv_freq, layout)
    cos = (cos * attention_scaling).to(x.dtype)
    sin = (sin * attention_scaling).to(x.dtype)
    rotate = rotate_half if layout == "half" else rotate_interleaved
    return x * cos + rotate(x) * sin  # (a cos - b sin, b cos + a sin) on every pair
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rope", "locked": true, "points": 4, "schema_version": 3, "solution": false}
theta = rope_inv_freq(4, base=100.0)  # d = 4, base = 100: theta = [1, 0.1]
assert isinstance(theta, torch.Tensor) and theta.shape == (2,) and theta.dtype == torch.float32, (
    f"rope_inv_freq(4, 100) should be a float32 (2,) tensor, got {getattr(theta, 'shape', theta)}")
assert torch.allclose(theta, torch.tensor([1.0, 0.1])), f"expected [1, 0.1], got {theta.tolist()}"
assert rope_inv_freq(8, dtype=torch.float64).dtype == torch.float64, "respect `dtype`"

r = rotate_half(torch.tensor([1.0, 2.0, 3.0, 4.0]))
assert torch.equal(r, torch.tensor([-3.0, -4.0, 1.0, 2.0])), (
    f"rotate_half([1, 2, 3, 4]) = [-3, -4, 1, 2] (halves swapped, the new first half "
    f"negated); got {r.tolist()}")

cos, sin = rope_cos_sin(torch.tensor([0, 1, 2]), theta)
assert cos.shape == sin.shape == (3, 4), f"expected (T, d) = (3, 4), got {tuple(cos.shape)}"
assert torch.allclose(sin[2], torch.tensor([math.sin(2), math.sin(0.2)] * 2)), (
    f"half layout: position 2 has angles [2*1, 2*0.1] written twice, [a0, a1, a0, a1]; "
    f"sin of them is {[math.sin(2), math.sin(0.2)] * 2}, got {sin[2].tolist()}")
cos_b, _ = rope_cos_sin(torch.tensor([[0, 1, 2], [5, 6, 7]]), theta)
assert cos_b.shape == (2, 1, 3, 4), (
    f"(B, T) positions give (B, 1, T, d) = (2, 1, 3, 4), got {tuple(cos_b.shape)}")

# Pair 0 of a 4-feature vector is (x[0], x[2]). Rotating (1, 0) by p radians gives (cos p, sin p).
x = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(1, 1, 3, 4)  # (B, H, T, d), the same vector 3 times
out = apply_rope(x, torch.tensor([0, 1, 2]), base=100.0)
assert out.shape == x.shape, f"apply_rope must keep the shape {tuple(x.shape)}, got {tuple(out.shape)}"
assert torch.allclose(out[0, 0, 2], torch.tensor([math.cos(2), 0.0, math.sin(2), 0.0]), atol=1e-6), (
    f"at position 2 the pair (x[0], x[2]) = (1, 0) turns by 2 rad to (cos 2, sin 2); "
    f"got {out[0, 0, 2].tolist()}. Compute x * cos + rotate_half(x) * sin.")

q, k = torch.randn(1, 2, 1, 16, dtype=torch.float64), torch.randn(1, 2, 1, 16, dtype=torch.float64)
def score(m, n):  # <R_m q, R_n k> for every head
    qm = apply_rope(q, torch.tensor([m]))
    kn = apply_rope(k, torch.tensor([n]))
    return (qm * kn).sum(-1)
assert torch.allclose(score(3, 1), score(10, 8)) and torch.allclose(score(0, 5), score(20, 25)), (
    "the score <R_m q, R_n k> must depend on n - m only")
assert torch.allclose(apply_rope(q, torch.tensor([7])).norm(dim=-1), q.norm(dim=-1)), (
    "a rotation keeps the length of every vector")

# KV cache: rotating the last tokens at their absolute positions equals slicing the full result.
x = torch.randn(2, 3, 10, 8)
full = apply_rope(x, torch.arange(10))
tail = apply_rope(x[:, :, 6:], torch.arange(6, 10))
assert torch.allclose(tail, full[:, :, 6:], atol=1e-6), (
    "tokens 6..9 rotated with positions 6..9 must equal rows 6..9 of the full sequence: use "
    "the positions you are given, not 0..T-1")
print("✓ RoPE (half layout) passes the visible checks")

# %% [markdown]
# Watch one pair turn, rotated by your `apply_rope`. The slider moves the position; fast
# pairs (small $i$) spin around the circle, slow pairs barely move. The second widget shows
# what a score looks like as a function of the distance between query and key, for each
# scheme in this assignment (your sinusoidal table and RoPE; ALiBi is the course's until
# you write it in section 4 below, and T5's buckets are always the course's).

# %% tags=["skip-grading"]
rope_rotation_explorer(fns={"apply_rope": apply_rope, "rope_inv_freq": rope_inv_freq})

# %% tags=["skip-grading"]
score_vs_distance_explorer(
    fns={"sinusoidal_encoding": sinusoidal_encoding, "apply_rope": apply_rope})

# %% [markdown]
# ### Exercise 2b: the interleaved layout
#
# In the interleaved layout pair $i$ is $(x_{2i}, x_{2i+1})$, neighbours in memory. The
# quarter turn is $\mathrm{rotate\_interleaved}(x)$: $(x_{2i}, x_{2i+1}) \mapsto
# (-x_{2i+1}, x_{2i})$ for every pair (GPT-J calls it `rotate_every_two`), and `cos`,
# `sin` repeat each angle twice in a row: $[a_0, a_0, a_1, a_1, \dots]$.
#
# Write `rotate_interleaved`, then go back to `rope_cos_sin` and `apply_rope` and make
# `layout="interleaved"` work (`torch.repeat_interleave` repeats entries in place;
# `torch.stack(..., dim=-1).flatten(-2)` interleaves two tensors).
#
# **The two layouts are the same model.** Let `perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]`.
# Feature $i$ of a half-layout head is feature $2i$ of an interleaved one, and feature
# $i + d/2$ is $2i + 1$: the interleaved pair $(2i, 2i+1)$ lands on the half pair
# $(i, i + d/2)$ with the same angle. Hence
# `apply_rope(x[..., perm], layout="half") == apply_rope(x, layout="interleaved")[..., perm]`.
# Permuting the output rows of $W_q$ and $W_k$ inside every head by `perm` turns one
# checkpoint into the other without changing a single attention score (q and k get the
# same permutation, so every dot product is unchanged). That is what Hugging Face's
# LLaMA conversion script does to Meta's weights.
#
# **A bug that circulates.** Some RoPE helpers build the interleaved `cos`/`sin`
# (`[a_0, a_0, a_1, a_1, ...]`) and then apply `rotate_half`. Nothing crashes. But
# `rotate_half` pairs feature $j$ with $j + d/2$, while the angles pair $2i$ with $2i+1$:
# the two members of a "pair" now turn by different angles, the map is no longer a
# rotation, and the score stops depending on $m - n$ alone. The cell after the test
# measures it.

# %% nbgrader={"grade": false, "grade_id": "rotate_interleaved", "locked": false, "schema_version": 3, "solution": true}
def rotate_interleaved(x: Tensor) -> Tensor:
    """``(x[2i], x[2i+1]) -> (-x[2i+1], x[2i])`` for every adjacent pair of the last axis.

    Shape is preserved. Raise ``ValueError`` if the last dimension is odd.
    """
    ### BEGIN SOLUTION
    if x.shape[-1] % 2:
        raise ValueError(f"last dimension must be even, got {x.shape[-1]}")
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)  # (..., d/2, 2) -> (..., d)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rope_interleaved", "locked": true, "points": 2, "schema_version": 3, "solution": false}
r = rotate_interleaved(torch.tensor([1.0, 2.0, 3.0, 4.0]))
assert torch.equal(r, torch.tensor([-2.0, 1.0, -4.0, 3.0])), (
    f"rotate_interleaved([1, 2, 3, 4]) = [-2, 1, -4, 3] (each adjacent pair (a, b) -> (-b, a)); "
    f"got {r.tolist()}")
theta = rope_inv_freq(4, base=100.0)
cos, sin = rope_cos_sin(torch.tensor([0, 1, 2]), theta, layout="interleaved")
assert torch.allclose(sin[2], torch.tensor([math.sin(2), math.sin(2), math.sin(0.2), math.sin(0.2)])), (
    f"interleaved layout: angles [a0, a0, a1, a1]; got sin {sin[2].tolist()}")

# Pair 0 is now (x[0], x[1]).
x = torch.tensor([1.0, 0.0, 0.0, 0.0]).expand(1, 1, 3, 4)
out = apply_rope(x, torch.tensor([0, 1, 2]), base=100.0, layout="interleaved")
assert torch.allclose(out[0, 0, 2], torch.tensor([math.cos(2), math.sin(2), 0.0, 0.0]), atol=1e-6), (
    f"interleaved: the pair (x[0], x[1]) = (1, 0) turns by 2 rad to (cos 2, sin 2); got "
    f"{out[0, 0, 2].tolist()}. Use rotate_interleaved with the interleaved cos/sin.")

q, k = torch.randn(1, 2, 1, 16, dtype=torch.float64), torch.randn(1, 2, 1, 16, dtype=torch.float64)
def score(m, n):
    qm = apply_rope(q, torch.tensor([m]), layout="interleaved")
    kn = apply_rope(k, torch.tensor([n]), layout="interleaved")
    return (qm * kn).sum(-1)
assert torch.allclose(score(3, 1), score(10, 8)), (
    "interleaved layout: the score must depend on n - m only. Are the angles and the "
    "rotation using the same pairs?")

# The two layouts agree after the fixed permutation.
x = torch.randn(2, 3, 5, 8, dtype=torch.float64)
perm = torch.cat((torch.arange(0, 8, 2), torch.arange(1, 8, 2)))  # [0, 2, 4, 6, 1, 3, 5, 7]
positions = torch.arange(4, 9)
half = apply_rope(x[..., perm], positions, layout="half")
interleaved = apply_rope(x, positions, layout="interleaved")
assert torch.allclose(half, interleaved[..., perm]), (
    "apply_rope(x[..., perm], layout='half') should equal apply_rope(x, layout='interleaved')[..., perm]")
print("✓ RoPE (interleaved layout) passes the visible checks")

# %% tags=["skip-grading"]
def rope_mixed_layouts(x: Tensor, positions: Tensor) -> Tensor:
    """The circulating bug: interleaved angles, half-split rotation."""
    cos, sin = rope_cos_sin(positions, rope_inv_freq(x.size(-1), dtype=x.dtype), "interleaved")
    return x * cos + rotate_half(x) * sin


q, k = torch.randn(16, dtype=torch.float64), torch.randn(16, dtype=torch.float64)
for m, n in ((3, 1), (10, 8), (50, 48)):
    good = (apply_rope(q[None], torch.tensor([m])) * apply_rope(k[None], torch.tensor([n]))).sum()
    bad = (rope_mixed_layouts(q[None], torch.tensor([m]))
           * rope_mixed_layouts(k[None], torch.tensor([n]))).sum()
    print(f"m={m:2d}, n={n:2d} (n-m = {n - m}):  RoPE score {good.item():+.4f}   "
          f"mixed-layout score {bad.item():+.4f}")
print("norm of q:", f"{q.norm().item():.4f}", " after the mixed 'rotation' at p=10:",
      f"{rope_mixed_layouts(q[None], torch.tensor([10])).norm().item():.4f}")

# %% [markdown]
# ### Question: why does the score see only $m - n$?
#
# In a few sentences (a formula or two is welcome), explain why RoPE makes the score
# $\langle R_m q, R_n k\rangle$ depend on the positions only through $m - n$. One way is to
# view each feature pair as a complex number. Then say why an **additive** absolute
# encoding (adding $PE(m)$ and $PE(n)$ to the inputs of $W_q$, $W_k$) does not have this
# property in general, and what RoPE's property means for a KV cache during generation.

# %% [markdown] nbgrader={"grade": true, "grade_id": "rope_relative_question", "locked": false, "points": 2, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# Treat pair $i$ of $q$ as the complex number $q_i = q_{a} + \mathrm{i}\, q_{b}$. Rotating by
# $m\theta_i$ is multiplication by $e^{\mathrm{i} m\theta_i}$, and the real dot product of two
# pairs is $\mathrm{Re}(u \bar v)$. So
#
# $$\langle R_m q, R_n k\rangle = \sum_i \mathrm{Re}\big(q_i e^{\mathrm{i} m\theta_i}\,
# \overline{k_i e^{\mathrm{i} n\theta_i}}\big) = \sum_i \mathrm{Re}\big(q_i \bar k_i\,
# e^{\mathrm{i}(m-n)\theta_i}\big),$$
#
# where only $m - n$ survives. In matrix form: $R_m$ is orthogonal and rotations of the
# same planes commute and add angles, so $R_m^\top R_n = R_{-m} R_n = R_{n-m}$.
#
# With an additive encoding the score is
# $(x_m + PE(m))^\top W_q^\top W_k (x_n + PE(n))$: four terms, two of which
# ($x_m^\top W_q^\top W_k PE(n)$ and $PE(m)^\top W_q^\top W_k x_n$) depend on one absolute
# position each, and even the position-position term $PE(m)^\top W_q^\top W_k PE(n)$ is a
# function of $m - n$ only if $W_q^\top W_k$ happens to commute with the rotations. The
# model *can* learn relative behaviour, but nothing forces it.
#
# KV cache: a key rotated once for its absolute position $n$ when it was written stays
# correct for every later query, because the query at position $m$ brings its own rotation
# $R_m$ and the product depends on $m - n$. Cached keys are never recomputed; each new
# token is rotated at its absolute position (the cache length), not at 0.
#
# Marking: 1 point for the derivation (complex numbers or $R_m^\top R_n = R_{n-m}$),
# 0.5 for the additive-encoding contrast, 0.5 for the KV-cache consequence.
# ### END SOLUTION

# %% [markdown]
# ## 3. Running past the training length
#
# A model trained on $L$ tokens is asked to read $L' = sL$ tokens ($s$ is the **scale**).
# What goes wrong with RoPE? Pair $i$ makes $r_i = L / \lambda_i = L\theta_i / 2\pi$ turns
# over the training context, where $\lambda_i = 2\pi/\theta_i$ is its wavelength.
#
# * **Fast pairs** ($r_i \gg 1$) went round their circle many times during training: every
#   angle was seen, and at position $5L$ they show nothing new.
# * **Slow pairs** ($r_i < 1$) only ever covered part of their circle. Beyond $L$ they
#   reach angles the model never saw, and attention scores built from them leave the range
#   training produced. Perplexity explodes a little past $L$.
#
# The fixes change the speeds $\theta_i$ (and `apply_rope` takes them as `inv_freq`):
#
# * **Position interpolation** (PI, arXiv 2306.15595): divide every position by $s$, which
#   is the same as $\theta_i \to \theta_i / s$. Positions $0 \dots sL$ are squeezed into the
#   trained range, so no pair sees a new angle. The cost: fast pairs, which never needed
#   help, now distinguish neighbouring tokens $s$ times less well. A short fine-tune
#   recovers most of it.
# * **NTK-aware scaling** (first posted by "bloc97" on Reddit, 2023): keep the formula but
#   enlarge the base, $\text{base}' = \text{base} \cdot s^{d/(d-2)}$. The fastest pair
#   ($i = 0$) is unchanged; the slowest ($2i = d-2$) becomes
#   $\text{base}^{-(d-2)/d} s^{-1}$, exactly $\theta/s$; the slow-down grows smoothly in
#   between. Works without fine-tuning for moderate $s$. **Dynamic NTK** (Hugging Face's
#   `"dynamic"` rope type) recomputes the base from the current length, so short inputs
#   keep the original RoPE.
# * **YaRN** (arXiv 2309.00071): choose per band. Below.
#
# ### Exercise 3a: position interpolation and NTK-aware scaling

# %% nbgrader={"grade": false, "grade_id": "pi_ntk", "locked": false, "schema_version": 3, "solution": true}
def rope_inv_freq_linear(
    d_head: int, base: float = 10000.0, scale: float = 1.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Position interpolation: ``theta_i / s`` for every pair.

    Compute with float64 speeds (``rope_inv_freq(..., dtype=torch.float64)``), cast at
    the end. Validate ``scale`` with ``check_context_scale(scale)`` (a number >= 1).

    Returns:
        ``(d_head / 2,)`` tensor of ``dtype``.
    """
    ### BEGIN SOLUTION
    check_context_scale(scale)
    return rope_inv_freq(d_head, base, dtype=torch.float64).div(scale).to(dtype)  # theta_i / s
    ### END SOLUTION


def ntk_base(d_head: int, base: float, scale: float) -> float:
    """The NTK-aware base ``base * s^(d / (d - 2))``."""
    ### BEGIN SOLUTION
    return base * scale ** (d_head / (d_head - 2))
    ### END SOLUTION


def rope_inv_freq_ntk(
    d_head: int, base: float = 10000.0, scale: float = 1.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """NTK-aware scaling: plain RoPE speeds with the base replaced by :func:`ntk_base`.

    Validate with ``check_even("d_head", d_head)`` and ``check_context_scale(scale)``, and raise
    ``ValueError`` for ``d_head < 4`` (the exponent ``d/(d-2)`` needs ``d > 2``).

    Returns:
        ``(d_head / 2,)`` tensor of ``dtype``.
    """
    ### BEGIN SOLUTION
    check_even("d_head", d_head)
    check_context_scale(scale)
    if d_head < 4:
        raise ValueError(f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}")
    return rope_inv_freq(d_head, ntk_base(d_head, base, scale), dtype=dtype)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_pi_ntk", "locked": true, "points": 1, "schema_version": 3, "solution": false}
theta = rope_inv_freq(64, dtype=torch.float64)
pi = rope_inv_freq_linear(64, scale=4.0, dtype=torch.float64)
assert isinstance(pi, torch.Tensor) and pi.shape == (32,), "expected a (d/2,) = (32,) tensor"
assert torch.allclose(pi, theta / 4), "position interpolation divides every theta_i by s"
assert rope_inv_freq_linear(64, scale=4.0).dtype == torch.float32, "the default dtype is float32"
assert abs(ntk_base(64, 10000.0, 4.0) - 10000 * 4 ** (64 / 62)) < 1e-6, (
    "base' = base * s^(d/(d-2))")
ntk = rope_inv_freq_ntk(64, scale=4.0, dtype=torch.float64)
assert torch.allclose(ntk[0], theta[0]), "NTK leaves the fastest pair (i = 0) unchanged"
assert torch.allclose(ntk[-1], theta[-1] / 4), "NTK divides the slowest pair's speed by exactly s"
assert bool((ntk <= theta + 1e-15).all() and (ntk >= theta / 4 - 1e-15).all()), (
    "every pair is slowed by a factor between 1 and s")
print("✓ rope_inv_freq_linear and rope_inv_freq_ntk pass the visible checks")

# %% [markdown]
# ### YaRN: interpolate only the bands that need it
#
# YaRN (Peng, Quesnelle, Fan, Shippole, arXiv 2309.00071) looks at each pair's turn count
# $r_i = L\theta_i/2\pi$ and blends between keeping the pair and interpolating it. With two
# thresholds $\alpha$ (`beta_slow`, default 1) and $\beta$ (`beta_fast`, default 32) and a
# blend $\gamma_i \in [0, 1]$:
#
# $$
# \theta'_i = (1 - \gamma_i)\,\frac{\theta_i}{s} + \gamma_i\,\theta_i,
# \qquad
# \gamma_i = \begin{cases} 1 & r_i > \beta \quad\text{(fast: untouched)}\\
# 0 & r_i < \alpha \quad\text{(slow: fully interpolated)} \\
# \text{a linear ramp} & \text{in between.}\end{cases}
# $$
#
# **Which ramp.** The paper writes the ramp as linear in $r$:
# $\gamma_i = \mathrm{clip}\big((r_i - \alpha)/(\beta - \alpha), 0, 1\big)$. The authors'
# reference code and Hugging Face instead ramp linearly in the pair *index* $i$ between
# the (fractional) indices where $r_i$ crosses $\beta$ and $\alpha$. Solving
# $L\,\text{base}^{-2i/d}/2\pi = r$ for $i$:
#
# $$ i(r) = \frac{d \,\ln\!\big(L / (2\pi r)\big)}{2 \ln \text{base}},
# \qquad i_\text{fast} = i(\beta), \quad i_\text{slow} = i(\alpha). $$
#
# With `truncate=True` (HF's default) the ends are rounded outwards,
# $lo = \lfloor i_\text{fast} \rfloor$ and $hi = \lceil i_\text{slow} \rceil$ (otherwise
# $lo = i_\text{fast}$, $hi = i_\text{slow}$); then, as HF does, $lo = \max(lo, 0)$,
# $hi = \min(hi, d - 1)$, and if $lo = hi$ add $0.001$ to $hi$. (The clamp uses $d - 1$
# although the pair indices stop at $d/2 - 1$: a quirk of Hugging Face's
# `find_correction_range` and YaRN's reference code, which clamp with the head width. It
# is kept so that the numbers match theirs; when $hi > d/2 - 1$ the ramp does not reach 0
# within the pairs, so the slowest pairs are not fully interpolated.) Finally
# $\gamma_i = 1 - \mathrm{clip}\big((i - lo)/(hi - lo), 0, 1\big)$ for $i = 0 \dots d/2-1$.
# Since $\ln r_i$ is linear in $i$, this ramp is linear in $\ln r$. Both conventions keep the
# fast bands exactly and interpolate the slow ones exactly; they differ only inside the ramp.
# Your function supports both (`ramp="index"`, the default, and `ramp="ratio"`).
#
# **Temperature.** Interpolated bands make distant tokens look closer, and attention
# over a longer context gets flatter (more keys share the probability mass). YaRN
# sharpens it again with a temperature $t$, $\sqrt{1/t} = 0.1 \ln s + 1$, applied by
# multiplying **both** $q$ and $k$ by $\sqrt{1/t}$ (in practice, `cos` and `sin`: that
# is `apply_rope`'s `attention_scaling`). The logits are therefore multiplied by its
# square, $(0.1\ln s + 1)^2 = 1/t$. (Two wrong versions circulate: "YaRN scales the base
# by $\sqrt 2$", and "YaRN multiplies $q$ and $k$ by $\sqrt{1 + 0.1\ln s}$", which makes
# the logits $1 + 0.1\ln s$ times larger instead of its square. Neither is in the paper.)
#
# ### Exercise 3b: YaRN

# %% nbgrader={"grade": false, "grade_id": "yarn", "locked": false, "schema_version": 3, "solution": true}
def yarn_band_ratios(d_head: int, base: float, original_max_position_embeddings: int) -> Tensor:
    """``r_i = L * theta_i / (2 pi)``: how many turns pair ``i`` makes over ``L`` tokens.

    Validate ``L`` with ``check_int("original_max_position_embeddings", L)``.

    Returns:
        ``(d_head / 2,)`` float64 tensor (decreasing with ``i``).
    """
    ### BEGIN SOLUTION
    check_int("original_max_position_embeddings", original_max_position_embeddings)
    theta = rope_inv_freq(d_head, base, dtype=torch.float64)
    return original_max_position_embeddings * theta / (2 * math.pi)  # L / wavelength_i
    ### END SOLUTION


def yarn_inv_freq_and_temperature(
    d_head: int,
    base: float,
    scale: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32,
    beta_slow: float = 1,
    *,
    truncate: bool = True,
    ramp: str = "index",
) -> tuple[Tensor, float]:
    """YaRN's speeds ``theta'_i = (1 - gamma_i) theta_i / s + gamma_i theta_i`` and its factor.

    ``gamma_i`` as described above: ``ramp="index"`` (default; HF and the reference code,
    with ``truncate`` rounding the ends outwards) or ``ramp="ratio"`` (the paper's
    ``clip((r - beta_slow) / (beta_fast - beta_slow), 0, 1)``; ``truncate`` is ignored).
    Compute in float64.

    Raise ``ValueError`` for an odd ``d_head``, ``base <= 1``, ``scale < 1`` (use the
    ``check_*`` helpers), unless ``0 < beta_slow < beta_fast``, and for a ``ramp`` other
    than ``"index"`` or ``"ratio"``.

    Returns:
        ``(inv_freq, attention_factor)``: a ``(d_head / 2,)`` **float32** tensor and the
        Python float ``0.1 ln(s) + 1`` (``1.0`` when ``s <= 1``).
    """
    ### BEGIN SOLUTION
    check_even("d_head", d_head)
    check_frequency_base(base)
    check_context_scale(scale)
    if not (0 < beta_slow < beta_fast):
        raise ValueError(
            f"need 0 < beta_slow < beta_fast (defaults 1 and 32), got {beta_slow}, {beta_fast}"
        )
    if ramp not in ("index", "ratio"):
        raise ValueError(
            f"ramp must be 'index' (HF / reference code) or 'ratio' (paper), got {ramp!r}"
        )
    L = original_max_position_embeddings
    r = yarn_band_ratios(d_head, base, L)  # turns per training context, (d/2,)
    if ramp == "index":

        def band_index(turns: float) -> float:
            # solve L * base^(-2i/d) / (2 pi) = turns for i
            return d_head * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))

        lo, hi = band_index(beta_fast), band_index(beta_slow)
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d_head - 1)
        if lo == hi:
            hi += 0.001  # avoid 0/0
        i = torch.arange(d_head // 2, dtype=torch.float64)
        gamma = 1 - ((i - lo) / (hi - lo)).clamp(0, 1)  # 1 for fast pairs, 0 for slow pairs
    else:
        gamma = ((r - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)  # linear in r
    theta = rope_inv_freq(d_head, base, dtype=torch.float64)
    inv_freq = (1 - gamma) * theta / scale + gamma * theta  # blend of interpolated and kept
    attention_factor = 0.1 * math.log(scale) + 1.0 if scale > 1 else 1.0  # sqrt(1/t)
    return inv_freq.to(torch.float32), attention_factor
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_yarn", "locked": true, "points": 3, "schema_version": 3, "solution": false}
r = yarn_band_ratios(64, 10000.0, 2048)
assert isinstance(r, torch.Tensor) and r.shape == (32,) and r.dtype == torch.float64, (
    "yarn_band_ratios should return a float64 (d/2,) tensor")
assert abs(r[0].item() - 2048 / (2 * math.pi)) < 1e-9, (
    f"pair 0 (theta = 1) makes L / (2 pi) = {2048 / (2 * math.pi):.2f} turns, got {r[0].item():.4g}")

inv_freq, factor = yarn_inv_freq_and_temperature(64, 10000.0, 4.0, 2048)
assert isinstance(inv_freq, torch.Tensor) and inv_freq.shape == (32,), "expected a (32,) tensor"
assert inv_freq.dtype == torch.float32, f"inv_freq should be float32, got {inv_freq.dtype}"
assert isinstance(factor, float) and abs(factor - (0.1 * math.log(4) + 1)) < 1e-12, (
    f"the attention factor is sqrt(1/t) = 0.1 ln s + 1 = {0.1 * math.log(4) + 1:.4f}, got {factor}")
theta = rope_inv_freq(64, dtype=torch.float64)
ratio = inv_freq.double() / theta  # 1 = untouched, 1/s = fully interpolated
fast, slow = r > 32, r < 1
assert torch.allclose(ratio[fast], torch.ones(int(fast.sum()), dtype=torch.float64)), (
    f"pairs with more than beta_fast = 32 turns (pairs 0..{int(fast.sum()) - 1} here) must be "
    f"untouched; got theta'/theta = {[round(v, 3) for v in ratio[fast].tolist()]}")
assert torch.allclose(ratio[slow], torch.full((int(slow.sum()),), 0.25, dtype=torch.float64)), (
    "pairs with less than beta_slow = 1 turn must be fully interpolated (theta / s); got "
    f"theta'/theta = {[round(v, 3) for v in ratio[slow].tolist()]}")
assert bool((ratio[1:] <= ratio[:-1] + 1e-7).all()), "theta'/theta should fall from 1 to 1/s"
# HF's index ramp here: lo = floor(8.06) = 8, hi = ceil(20.1) = 21, so pair 14 gets gamma = 7/13.
assert abs(ratio[14].item() - (6 / 13 / 4 + 7 / 13)) < 1e-6, (
    f"pair 14 should get gamma = 1 - (14 - 8)/(21 - 8) = 7/13, theta'/theta = "
    f"{6 / 13 / 4 + 7 / 13:.4f}; got {ratio[14].item():.4f}. Check lo, hi and the rounding.")
same, one = yarn_inv_freq_and_temperature(64, 10000.0, 1.0, 2048)
assert torch.allclose(same.double(), theta) and one == 1.0, "s = 1 changes nothing"
paper, _ = yarn_inv_freq_and_temperature(64, 10000.0, 4.0, 2048, ramp="ratio")
g = ((r - 1) / 31).clamp(0, 1)
assert torch.allclose(paper.double(), (1 - g) * theta / 4 + g * theta, rtol=1e-6), (
    "ramp='ratio': gamma = clip((r - beta_slow) / (beta_fast - beta_slow), 0, 1)")
print("✓ YaRN passes the visible checks")

# %% [markdown]
# Both widgets use your functions. The first draws every band's wavelength and its
# rescaling under PI, NTK and YaRN. The second runs a "long-range" head trained on a short context at $s$ times that
# length: plain RoPE drifts out of the range of scores it produced in training, and the
# right panel shows, band by band, how many of the angles met at test time were never
# seen during training.

# %% tags=["skip-grading"]
my_spectra = {
    "rope_inv_freq": rope_inv_freq,
    "rope_inv_freq_linear": rope_inv_freq_linear,
    "rope_inv_freq_ntk": rope_inv_freq_ntk,
    "yarn_inv_freq_and_temperature": yarn_inv_freq_and_temperature,
}
rope_spectrum_explorer(fns=my_spectra)

# %% tags=["skip-grading"]
train_short_test_long_explorer(
    fns={**my_spectra, "yarn_band_ratios": yarn_band_ratios, "apply_rope": apply_rope})

# %% [markdown]
# **LongRoPE** (arXiv 2402.13753, Phi-3) generalises all of this to one rescale factor
# per band, $\theta_i / \lambda_i$, found by an evolutionary search on perplexity and shipped
# in the checkpoint's config. Exercise 3c applies such factors the way a checkpoint runs them.
#
# ### Exercise 3c: dynamic NTK and LongRoPE, as Hugging Face runs them
#
# Both methods change the speeds **with the length of the input**, so both take the
# current length $T$ (`seq_len`; Hugging Face uses $T = \max(\text{position\_ids}) + 1$)
# and the length the model was trained on, $L$ (`max_position_embeddings` for dynamic
# NTK, `original_max_position_embeddings` for LongRoPE).
#
# **Dynamic NTK** (HF's `"dynamic"` rope type; first posted on Reddit by "emozilla").
# Static NTK picks $s$ once, so a short input pays for an extension it does not need.
# Dynamic NTK keeps plain RoPE up to $L$ and recomputes the NTK base from the length
# beyond it:
#
# $$
# T' = \max(T, L), \qquad g = \frac{s\,T'}{L} - (s - 1), \qquad
# \text{base}' = \text{base}\cdot g^{\,d/(d-2)}, \qquad \theta'_i = \text{base}'^{-2i/d}.
# $$
#
# At $T \le L$, $g = 1$: exactly the original speeds. Beyond $L$, $g$ grows linearly with
# slope $s/L$. (So at $T = sL$ the effective NTK scale is $s^2 - s + 1$, not $s$: that is
# HF's convention, and the one to match. With $s = 1$, $g = T/L$.) Use your `ntk_base`.
#
# **LongRoPE.** The config holds two lists of $d/2$ factors: `short_factor` for inputs
# that fit the original window and `long_factor` for longer ones. HF switches on the
# length: long factors when $T > L$ (an input of exactly $L$ tokens is still short),
# short ones otherwise, and divides: $\theta'_i = \theta_i / \lambda_i$. It also scales
# attention, like YaRN, by
#
# $$
# \text{attention\_factor} = \sqrt{1 + \frac{\ln s}{\ln L}} \quad (s > 1), \qquad 1 \quad (s \le 1),
# $$
#
# where $s$ is the config's `factor` (Phi-3 leaves it out and HF takes
# `max_position_embeddings / original_max_position_embeddings`). The factor depends on $s$
# only, **not** on $T$: HF computes it once and multiplies `cos` and `sin` by it for short
# and long inputs alike. It therefore scales both $q$ and $k$ (pass it to `apply_rope` as
# `attention_scaling`), and the logits grow by its square, $1 + \ln s / \ln L$.
#
# Write four functions. Validate with `check_even("d_head", d_head)` and
# `check_context_scale(scale)` as in 3a, `check_int` for lengths and counts, and raise
# `ValueError` for `d_head < 4` in `rope_inv_freq_dynamic_ntk`.

# %% nbgrader={"grade": false, "grade_id": "dynamic_longrope", "locked": false, "schema_version": 3, "solution": true}
def rope_inv_freq_dynamic_ntk(
    d_head: int,
    base: float,
    seq_len: int,
    max_position_embeddings: int,
    scale: float,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Dynamic NTK speeds for an input of ``seq_len`` tokens (HF ``"dynamic"``).

    ``T = max(seq_len, L)``, ``base' = ntk_base(d_head, base, s * T / L - (s - 1))``, then
    plain RoPE speeds with ``base'``. Validate ``d_head`` (even, >= 4), ``seq_len`` and
    ``max_position_embeddings`` (``check_int``) and ``scale`` (``check_context_scale``).

    Returns:
        ``(d_head / 2,)`` tensor of ``dtype``.
    """
    ### BEGIN SOLUTION
    check_even("d_head", d_head)
    check_int("seq_len", seq_len)
    check_int("max_position_embeddings", max_position_embeddings)
    check_context_scale(scale)
    if d_head < 4:
        raise ValueError(f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}")
    T = max(seq_len, max_position_embeddings)  # inside the trained length: plain RoPE
    growth = scale * T / max_position_embeddings - (scale - 1)  # s T / L - (s - 1)
    return rope_inv_freq(d_head, ntk_base(d_head, base, growth), dtype=dtype)
    ### END SOLUTION


def longrope_inv_freq(
    d_head: int,
    base: float,
    rescale_factors,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """``theta_i / lambda_i`` for ``d_head / 2`` given factors (a list or a tensor).

    Compute in float64, cast to ``dtype`` at the end. Raise ``ValueError`` for an odd
    ``d_head``, for factors that are not ``d_head / 2`` numbers, and for a factor ``<= 0``.
    """
    ### BEGIN SOLUTION
    check_even("d_head", d_head)
    lam = torch.as_tensor(rescale_factors, dtype=torch.float64)
    if lam.shape != (d_head // 2,):
        raise ValueError(
            f"rescale_factors must hold d_head / 2 = {d_head // 2} numbers, "
            f"got shape {tuple(lam.shape)}"
        )
    if not bool((lam > 0).all()):
        raise ValueError("rescale_factors must all be > 0 (1.0 leaves a pair unchanged)")
    return (rope_inv_freq(d_head, base, dtype=torch.float64) / lam).to(dtype)  # theta_i / lambda_i
    ### END SOLUTION


def longrope_attention_factor(scale: float, original_max_position_embeddings: int) -> float:
    """``sqrt(1 + ln s / ln L)`` as a Python float, ``1.0`` when ``s <= 1``.

    Validate ``L`` with ``check_int("original_max_position_embeddings", L, minimum=2)``.
    """
    ### BEGIN SOLUTION
    check_int("original_max_position_embeddings", original_max_position_embeddings, minimum=2)
    if scale <= 1:
        return 1.0
    return math.sqrt(1 + math.log(scale) / math.log(original_max_position_embeddings))
    ### END SOLUTION


def longrope_inv_freq_and_attention_factor(
    d_head: int,
    base: float,
    short_factor,
    long_factor,
    seq_len: int,
    original_max_position_embeddings: int,
    scale: float,
    *,
    dtype: torch.dtype = torch.float32,
) -> tuple[Tensor, float]:
    """LongRoPE for an input of ``seq_len`` tokens: the factor switch and the attention factor.

    ``long_factor`` when ``seq_len > L`` (``L = original_max_position_embeddings``), else
    ``short_factor``; then :func:`longrope_inv_freq` and :func:`longrope_attention_factor`.
    Validate ``seq_len`` (``check_int``) and ``scale`` (``check_context_scale``).

    Returns:
        ``(inv_freq, attention_factor)``: ``(d_head / 2,)`` tensor of ``dtype`` and a float.
    """
    ### BEGIN SOLUTION
    check_int("seq_len", seq_len)
    check_context_scale(scale)
    long = seq_len > original_max_position_embeddings  # past the original window
    factors = long_factor if long else short_factor
    inv_freq = longrope_inv_freq(d_head, base, factors, dtype=dtype)  # theta_i / lambda_i
    attention_factor = longrope_attention_factor(scale, original_max_position_embeddings)
    return inv_freq, attention_factor
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_dynamic_longrope", "locked": true, "points": 3, "schema_version": 3, "solution": false}
theta = rope_inv_freq(64)
for T in (1, 100, 512):  # inside the trained length L = 512: plain RoPE
    assert torch.allclose(rope_inv_freq_dynamic_ntk(64, 10000.0, T, 512, 4.0), theta), (
        f"seq_len = {T} <= L = 512: dynamic NTK must give the plain speeds")
dyn = rope_inv_freq_dynamic_ntk(64, 10000.0, 1024, 512, 4.0, dtype=torch.float64)
g = 4.0 * 1024 / 512 - 3.0  # s T / L - (s - 1) = 5
assert torch.allclose(dyn, rope_inv_freq(64, 10000.0 * g ** (64 / 62), dtype=torch.float64)), (
    "seq_len = 2L with s = 4: base' = base * (s T / L - (s - 1))^(d/(d-2)) = base * 5^(64/62)")
assert torch.allclose(rope_inv_freq_dynamic_ntk(64, 10000.0, 2048, 512, 1.0),
                      rope_inv_freq_ntk(64, 10000.0, 4.0)), (
    "with s = 1, dynamic NTK at T = 4L is static NTK with scale T / L = 4")

short, long = [1.0, 1.5, 2.0, 2.5], [1.0, 4.0, 16.0, 64.0]  # d_head = 8
theta8 = rope_inv_freq(8, dtype=torch.float64)
inv, factor = longrope_inv_freq_and_attention_factor(8, 10000.0, short, long, 256, 256, 16.0,
                                                     dtype=torch.float64)
assert torch.allclose(inv, theta8 / torch.tensor(short, dtype=torch.float64)), (
    "seq_len = L = 256 is still short: theta_i / short_factor_i")
expected = math.sqrt(1 + math.log(16) / math.log(256))  # = sqrt(1.5)
assert isinstance(factor, float) and abs(factor - expected) < 1e-12, (
    f"attention factor sqrt(1 + ln s / ln L) = sqrt(1 + ln 16 / ln 256) = {expected:.6f} for "
    f"short inputs too; got {factor!r}")
inv, factor = longrope_inv_freq_and_attention_factor(8, 10000.0, short, long, 257, 256, 16.0,
                                                     dtype=torch.float64)
assert torch.allclose(inv, theta8 / torch.tensor(long, dtype=torch.float64)), (
    "seq_len = 257 > L: theta_i / long_factor_i")
assert abs(factor - expected) < 1e-12, "the attention factor does not depend on seq_len"
assert longrope_attention_factor(1.0, 4096) == 1.0, "s = 1: no attention scaling"
print("✓ dynamic NTK and LongRoPE pass the visible checks")

# %% [markdown]
# Your four functions against the input length, next to PI, NTK and YaRN: which methods
# leave short inputs alone, and which keep every pair on angles it saw in training.

# %% tags=["skip-grading"]
long_context_explorer(fns={
    **my_spectra, "yarn_band_ratios": yarn_band_ratios,
    "rope_inv_freq_dynamic_ntk": rope_inv_freq_dynamic_ntk, "longrope_inv_freq": longrope_inv_freq})

# %% [markdown]
# ## 4. ALiBi: attention with linear biases (arXiv 2108.12409)
#
# ALiBi (Press, Smith, Lewis) adds no embedding at all. It subtracts a penalty
# proportional to the distance from every causal score:
#
# $$
# \text{score}_{h}(i, j) = \frac{q_i \cdot k_j}{\sqrt{d}} - m_h\,(i - j), \qquad j \le i,
# $$
#
# with a different slope $m_h$ per head. Steep heads see only the last few tokens; shallow
# heads see far back. A penalty that keeps growing linearly is defined at any distance,
# which is why ALiBi extrapolates past its training length far better than sinusoids.
#
# **Slopes.** For $n$ heads with $n$ a power of two, the slopes are the geometric
# sequence $m_h = 2^{-8h/n}$, $h = 1 \dots n$: for 8 heads, $\tfrac12, \tfrac14, \dots,
# \tfrac1{256}$. For other $n$ the paper's code does this: let $n'$ be the largest power of
# two below $n$; take the $n'$ slopes for $n'$ heads, then the 1st, 3rd, 5th, ... slopes of
# the $2n'$-head sequence until there are $n$ slopes. For 12 heads: the 8 slopes
# $2^{-1}, \dots, 2^{-8}$, then $2^{-0.5}, 2^{-1.5}, 2^{-2.5}, 2^{-3.5}$. Simply using
# $2^{-8h/n}$ for every $n$ gives slopes that differ from the ones ALiBi checkpoints were
# trained with (BLOOM-176B has 112 heads, not a power of two).
#
# ### Exercise 4a: ALiBi slopes

# %% nbgrader={"grade": false, "grade_id": "alibi_slopes", "locked": false, "schema_version": 3, "solution": true}
def geometric_slopes(n: int) -> list[float]:
    """``[2^(-8h/n) for h = 1 .. n]`` as Python floats.

    Any exact form is right: ``2 ** (-8 * h / n)``, or the ALiBi code's ``start * ratio**k``
    with ``start = ratio = 2^(-8/n)``, which differs in the last bit from ``n = 16``. The
    checks compare with a relative tolerance (1e-12 hidden, 1e-12 below), never with ``==``.
    """
    ### BEGIN SOLUTION
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]
    ### END SOLUTION


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes, for any ``n_heads >= 1``, in the paper's order.

    Validate with ``check_int("n_heads", n_heads)``.

    Returns:
        ``(n_heads,)`` float32 tensor.
    """
    ### BEGIN SOLUTION
    check_int("n_heads", n_heads)
    n_pow2 = 2 ** int(math.floor(math.log2(n_heads)))  # largest power of two <= n
    slopes = geometric_slopes(n_pow2)
    slopes += geometric_slopes(2 * n_pow2)[0::2][: n_heads - n_pow2]
    return torch.tensor(slopes, dtype=torch.float32)
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_alibi_slopes", "locked": true, "points": 2, "schema_version": 3, "solution": false}
gs = geometric_slopes(4)
assert len(gs) == 4 and all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(
    gs, [2.0 ** -2, 2.0 ** -4, 2.0 ** -6, 2.0 ** -8])), f"2^(-8h/n), h = 1..n; got {gs}"
gs = geometric_slopes(16)  # equivalent forms may differ in the last bit here: a tolerance
assert len(gs) == 16 and all(math.isclose(a, 2.0 ** (-8 * h / 16), rel_tol=1e-12)
                             for h, a in zip(range(1, 17), gs)), f"2^(-h/2), h = 1..16; got {gs}"
m = alibi_slopes(8)
assert isinstance(m, torch.Tensor) and m.shape == (8,) and m.dtype == torch.float32, (
    "alibi_slopes(8) should be a float32 (8,) tensor")
assert torch.allclose(m, torch.tensor([2.0 ** -h for h in range(1, 9)])), (
    f"8 heads: 1/2, 1/4, ..., 1/256; got {m.tolist()}")
m = alibi_slopes(12)
expected = [2.0 ** -h for h in range(1, 9)] + [2.0 ** -(h - 0.5) for h in range(1, 5)]
assert m.shape == (12,) and torch.allclose(m, torch.tensor(expected)), (
    f"12 heads: the 8 slopes for 8 heads, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (every other slope "
    f"of the 16-head sequence); got {[round(v, 4) for v in m.tolist()]}")
assert torch.allclose(alibi_slopes(1), torch.tensor([2.0 ** -8])), "1 head: [2^-8]"
print("✓ alibi_slopes passes the visible checks")

# %% [markdown]
# ### Exercise 4b: the ALiBi bias
#
# Build the bias that is added to the scores, `(n_heads, n_queries, n_keys)`:
#
# * `causal=True` (decoders): $-m_h (i - j)$ where $j \le i$ and $-\infty$ where $j > i$,
#   so the result is a complete float mask (the causal mask included);
# * `causal=False` (encoders): $-m_h |i - j|$, symmetric, nothing masked.
#
# With a KV cache there are more keys than queries. The queries are the **last**
# `n_queries` tokens: query row $i$ sits at absolute position
# $n_\text{keys} - n_\text{queries} + i$, and that is the $i$ in $-m_h(i - j)$. (One new token
# after 9 cached ones is at position 9 and sees keys $0 \dots 9$.)
#
# **Why BLOOM can use $m_h\, j$ instead.** In a causal row $i$ the bias $-m_h(i - j) =
# m_h j - m_h i$ differs from $m_h j$ by $-m_h i$, the same constant for every key of
# that row, and a softmax ignores a constant added to a whole row:
# $\mathrm{softmax}(z + c) = \mathrm{softmax}(z)$ (the $e^c$ cancels). So BLOOM stores one
# `(H, 1, T_k)` vector instead of an `(H, T_q, T_k)` matrix. It only works row by row over
# the visible keys, so it needs the causal mask; it does not hold for the bidirectional
# $-m_h |i - j|$, which is not linear in $j$.

# %% nbgrader={"grade": false, "grade_id": "alibi_bias", "locked": false, "schema_version": 3, "solution": true}
def alibi_bias(
    n_heads: int, n_queries: int, n_keys: int | None = None, causal: bool = True
) -> Tensor:
    """The ALiBi bias, added to ``q k^T / sqrt(d)`` before the softmax.

    Args:
        n_heads, n_queries: ``H`` and ``T_q``.
        n_keys: ``T_k``, default ``n_queries``. Queries are aligned to the *end* of the keys.
        causal: ``-m_h (i - j)`` with ``-inf`` above the diagonal, or ``-m_h |i - j|``.

    Raise ``ValueError`` for non-positive sizes (``check_int``) and, when ``causal``, for
    ``n_keys < n_queries``.

    Returns:
        ``(n_heads, n_queries, n_keys)`` float32 tensor.
    """
    ### BEGIN SOLUTION
    check_int("n_heads", n_heads)
    check_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else n_keys
    check_int("n_keys", n_keys)
    if causal and n_keys < n_queries:
        raise ValueError(
            f"causal ALiBi aligns queries to the end of the keys, so n_keys ({n_keys}) must be "
            f">= n_queries ({n_queries}); pass n_keys = past length + n_queries"
        )
    i = torch.arange(n_keys - n_queries, n_keys, dtype=torch.float32)[:, None]  # query positions
    j = torch.arange(n_keys, dtype=torch.float32)[None, :]  # key positions
    m = alibi_slopes(n_heads)[:, None, None]  # (H, 1, 1)
    if causal:
        bias = -m * (i - j)  # (H, T_q, T_k)
        return bias.masked_fill(j > i, float("-inf"))
    return -m * (i - j).abs()
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_alibi_bias", "locked": true, "points": 2, "schema_version": 3, "solution": false}
b = alibi_bias(2, 3)  # slopes 2^-4 = 1/16 and 2^-8 = 1/256
assert isinstance(b, torch.Tensor) and b.shape == (2, 3, 3) and b.dtype == torch.float32, (
    f"expected a float32 (H, T_q, T_k) = (2, 3, 3) tensor, got {getattr(b, 'shape', type(b))}")
inf = float("inf")
expected = torch.tensor([[0.0, -inf, -inf], [-1.0, 0.0, -inf], [-2.0, -1.0, 0.0]]) / 16
assert torch.equal(b[0], expected), (
    f"head 0 (m = 1/16): -m (i - j) on and below the diagonal, -inf above it; expected\n"
    f"{expected}\ngot\n{b[0]}")
b = alibi_bias(2, 3, causal=False)
assert torch.allclose(b[1], -torch.tensor([[0.0, 1, 2], [1, 0, 1], [2, 1, 0]]) / 256), (
    "causal=False: -m |i - j|, symmetric, with no -inf")
b = alibi_bias(2, 1, n_keys=10)  # one new token after 9 cached ones
assert b.shape == (2, 1, 10), f"expected (2, 1, 10), got {tuple(b.shape)}"
assert torch.allclose(b[0, 0], -torch.arange(9, -1, -1.0) / 16), (
    f"the new query sits at position 9: its bias is -m (9 - j) for j = 0..9; got {b[0, 0].tolist()}")

# The key-only form m_h * j gives the same attention for causal rows.
scores = torch.randn(4, 6, 6)
bias = alibi_bias(4, 6)
key_only = alibi_slopes(4)[:, None, None] * torch.arange(6.0)
causal_future = torch.ones(6, 6, dtype=torch.bool).triu(1)
same = torch.softmax(scores + key_only.masked_fill(causal_future, -inf), dim=-1)
assert torch.allclose(torch.softmax(scores + bias, dim=-1), same, atol=1e-6), (
    "softmax(scores + ALiBi) should equal softmax(scores + m j) under the causal mask")
print("✓ alibi_bias passes the visible checks")

# %% tags=["skip-grading"]
alibi_explorer(fns={"alibi_bias": alibi_bias, "alibi_slopes": alibi_slopes})

# %% [markdown]
# ## 5. Two more, for reading
#
# **T5 relative position bias** (arXiv 1910.10683). A learned scalar per head is added to
# the score, looked up by the offset $j - i$ put into one of 32 **buckets**: one bucket
# per offset for small distances, log-spaced buckets for larger ones, and every distance
# beyond 128 sharing the last bucket. A bidirectional encoder spends half the buckets on
# each direction. T5 computes the bias once, in the first layer, and shares it with all
# the others. (`toolkit.position.t5_relative_position_bucket` and
# `T5RelativePositionBias` match Hugging Face's T5 exactly.)
#
# **NoPE** (no positional encoding). A causal decoder with no encoding at all still
# learns positions: the causal mask itself is asymmetric, and the first token, which can
# only attend to itself, behaves differently from the hundredth, which averages over a
# hundred. From such signals a model can count. Encoders have no such asymmetry and do
# need an encoding.
#
# ## 6. Measured: a trained model past its training length
#
# Everything so far was about speeds and angles. Does it matter for a trained model? Here
# four small GPTs (the capstone model of Lecture 07, 2 blocks of width 64, byte tokens)
# are trained on windows of exactly $L = 128$ tokens, identical but for their position
# encoding (they rotate and bias with **your** `apply_rope` and `alibi_bias`): **RoPE**, a **learned** table of $L$ rows, **ALiBi**, and **none** (NoPE).
# Half of every training batch is the course's corpus (Python standard-library source),
# half is *passkey* text (`toolkit.long_context.passkey`): filler sentences with one
# line `The pass key is #12345#.` hidden somewhere, then the question
# `What is the pass key? The pass key is #`, and the model is trained to write the
# number. You write the three measurements; the models come ready
# (`toolkit.long_context.trained_models` trains them once, a few CPU minutes with a
# progress bar, and loads them from a cache afterwards).
#
# Every model here is called as `logits, loss = model(idx)` with `idx` an `(N, T)`
# int64 tensor of token ids (`loss` is `None` without targets) and returns `(N, T, V)`
# logits, $V = 256$; position $t$'s logits predict token $t + 1$.
#
# ### Exercise 6a: loss by position
#
# Given `windows`, an `(N, T + 1)` int64 tensor (N windows of held-out text), run the
# model on `windows[:, :-1]` and return, for every position $t = 0 \dots T-1$, the mean
# over the windows of the next-token loss $-\log p(\text{windows}[n, t+1] \mid
# \text{windows}[n, {:}t+1])$ in nats: a `(T,)` **float64** tensor (take the log-softmax
# of the logits in float64). Evaluate in eval mode under `torch.no_grad()`, and put the
# model back in the mode it was in. Raise `ValueError` unless `windows` is a 2-D int64
# tensor with at least 2 columns.

# %% nbgrader={"grade": false, "grade_id": "loss_by_position", "locked": false, "schema_version": 3, "solution": true}
def loss_by_position(model, windows: Tensor) -> Tensor:
    """Mean next-token cross-entropy at each position: ``(T,)`` float64 for ``(N, T + 1)`` windows."""
    ### BEGIN SOLUTION
    if not isinstance(windows, Tensor) or windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError("windows must be an (N, T + 1) tensor of token ids with T >= 1")
    if windows.dtype != torch.long:
        raise ValueError(f"windows must hold int64 token ids, got {windows.dtype}")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits, _ = model(windows[:, :-1])  # (N, T, V): position t predicts token t + 1
    model.train(was_training)
    log_p = torch.log_softmax(logits.double(), dim=-1)  # log p(v | tokens <= t)
    nll = -log_p.gather(-1, windows[:, 1:, None]).squeeze(-1)  # (N, T): -log p(next token)
    return nll.mean(dim=0)  # average over windows, one number per position
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_loss_by_position", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_ = torch.manual_seed(0)
tiny = position_model("none", 16, n_layers=1, d_model=32)
windows = torch.randint(0, 256, (3, 21))
per_position = loss_by_position(tiny, windows)
assert isinstance(per_position, Tensor) and per_position.shape == (20,), (
    f"expected a (T,) = (20,) tensor for (3, 21) windows, got {getattr(per_position, 'shape', per_position)}")
assert per_position.dtype == torch.float64, f"return float64, got {per_position.dtype}"
_, mean_loss = tiny(windows[:, :-1], windows[:, 1:])  # the model's own mean loss
assert abs(per_position.mean().item() - mean_loss.item()) < 1e-4, (
    "the mean over positions should be the model's mean next-token loss: are the targets "
    "windows[:, 1:] (the next tokens)?")
print("✓ loss_by_position passes the visible checks")

# %% [markdown]
# ### Exercise 6b: the passkey probe
#
# `passkey_tokens(key, length, depth)` (given, from `toolkit.long_context`) returns
# `(prompt, answer)`: a `(length,)` int64 prompt whose key line sits at `depth` (0: at
# the start, 1: just before the question) and the `(DIGITS,)` = `(5,)` tokens of the
# answer. Write `passkey_accuracy(model, keys, length, depth)`: for every key, build its
# prompt, then decode **greedily** `DIGITS` tokens: run the model on the whole sequence
# so far (prompt plus the digits already chosen), take the arg-max of the **last**
# position's logits, append it, repeat. A key counts only if all its digits are right.
# Return the share of keys right as a Python float. All prompts have the same length, so
# you can decode them as one batch. Eval mode and `torch.no_grad()`, mode restored;
# raise `ValueError` for an empty `keys`.

# %% nbgrader={"grade": false, "grade_id": "passkey_accuracy", "locked": false, "schema_version": 3, "solution": true}
def passkey_accuracy(model, keys, length: int, depth: float) -> float:
    """Share of ``keys`` the model repeats exactly (greedy decoding of ``DIGITS`` tokens)."""
    ### BEGIN SOLUTION
    keys = [int(k) for k in keys]
    if not keys:
        raise ValueError("keys must hold at least one number")
    check_int("length", length)
    prompts, answers = zip(*(passkey_tokens(k, length, depth) for k in keys), strict=True)
    x, answer = torch.stack(prompts), torch.stack(answers)  # (K, length), (K, DIGITS)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for _ in range(DIGITS):
            logits, _ = model(x)
            x = torch.cat((x, logits[:, -1].argmax(dim=-1, keepdim=True)), dim=1)  # greedy
    model.train(was_training)
    correct = (x[:, length:] == answer).all(dim=1)  # every digit right
    return float(correct.double().mean())
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_passkey_accuracy", "locked": true, "points": 2, "schema_version": 3, "solution": false}
class ReadsTheKey(torch.nn.Module):
    """A model that cheats: it finds the key after the first '#' and writes its next digit."""

    def forward(self, idx):
        logits = torch.zeros(*idx.shape, 256)
        for b, row in enumerate(idx.tolist()):
            key = row[row.index(ord("#")) + 1:][:DIGITS]
            written = len(row) - 1 - row[::-1].index(ord("#"))  # the question's '#'
            logits[b, -1, key[min(len(row) - 1 - written, DIGITS - 1)]] = 1.0
        return logits, None


acc = passkey_accuracy(ReadsTheKey(), [12345, 7, 99999], 100, 0.5)
assert isinstance(acc, float) and acc == 1.0, (
    f"a model that always writes the right digit scores 1.0, got {acc!r}. Feed each chosen "
    "digit back in and read the last position's logits.")
print("✓ passkey_accuracy passes the visible checks")

# %% [markdown]
# ### Exercise 6c: stretching the RoPE model without retraining
#
# The RoPE model's layers take their speeds from outside
# (`with rope_speeds(model, inv_freq, attention_scaling): ...`). Write
# `rope_extension(method, d_head, base, train_len, seq_len, *, dynamic_factor=2.0)`,
# which returns `(inv_freq, attention_scaling)` for a model trained on `train_len` tokens
# and run on `seq_len` tokens, using **your** functions from Part 3. The static methods
# are configured for this very length, $s = \max(1, \text{seq\_len} / \text{train\_len})$:
#
# | `method` | `inv_freq` | `attention_scaling` |
# |---|---|---|
# | `"none"` | `rope_inv_freq(d_head, base)` | 1.0 |
# | `"PI"` | `rope_inv_freq_linear(d_head, base, s)` | 1.0 |
# | `"NTK"` | `rope_inv_freq_ntk(d_head, base, s)` | 1.0 |
# | `"dynamic NTK"` | `rope_inv_freq_dynamic_ntk(d_head, base, seq_len, train_len, dynamic_factor)` | 1.0 |
# | `"YaRN"` | YaRN's speeds for $s$ with $L$ = `train_len` | YaRN's factor $0.1\ln s + 1$ |
#
# Dynamic NTK is configured once (`dynamic_factor` is HF's `factor`) and follows the
# length by itself. Validate `train_len` and `seq_len` with `check_int`; raise
# `ValueError` for any other `method`. `inv_freq` is float32 (the functions' default).

# %% nbgrader={"grade": false, "grade_id": "rope_extension", "locked": false, "schema_version": 3, "solution": true}
def rope_extension(
    method: str,
    d_head: int,
    base: float,
    train_len: int,
    seq_len: int,
    *,
    dynamic_factor: float = 2.0,
) -> tuple[Tensor, float]:
    """``(inv_freq, attention_scaling)`` for a RoPE model trained on ``train_len`` tokens."""
    ### BEGIN SOLUTION
    check_int("train_len", train_len)
    check_int("seq_len", seq_len)
    s = max(1.0, seq_len / train_len)  # the static methods' scale, set for this length
    if method == "none":
        return rope_inv_freq(d_head, base), 1.0
    if method == "PI":
        return rope_inv_freq_linear(d_head, base, s), 1.0
    if method == "NTK":
        return rope_inv_freq_ntk(d_head, base, s), 1.0
    if method == "dynamic NTK":
        return rope_inv_freq_dynamic_ntk(d_head, base, seq_len, train_len, dynamic_factor), 1.0
    if method == "YaRN":
        return yarn_inv_freq_and_temperature(d_head, base, s, train_len)  # (theta', 0.1 ln s + 1)
    raise ValueError(f"method must be one of {EXTENSIONS}, got {method!r}")
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "test_rope_extension", "locked": true, "points": 2, "schema_version": 3, "solution": false}
inv, scaling = rope_extension("PI", 16, 10000.0, 128, 512)
assert isinstance(inv, Tensor) and inv.shape == (8,) and scaling == 1.0, "PI: (theta / s, 1.0)"
assert torch.allclose(inv, rope_inv_freq(16) / 4), "s = 512 / 128 = 4: PI divides every speed by 4"
inv, scaling = rope_extension("PI", 16, 10000.0, 128, 64)
assert torch.allclose(inv, rope_inv_freq(16)), "seq_len < train_len: s = max(1, 64/128) = 1"
_, scaling = rope_extension("YaRN", 16, 10000.0, 128, 1024)
assert abs(scaling - (0.1 * math.log(8) + 1)) < 1e-12, "YaRN at s = 8: scaling 0.1 ln 8 + 1"
inv, _ = rope_extension("dynamic NTK", 16, 10000.0, 128, 100)
assert torch.allclose(inv, rope_inv_freq(16)), "dynamic NTK inside the training length: plain RoPE"
print("✓ rope_extension passes the visible checks")

# %% [markdown]
# ### The measurement
#
# The next cell gets the four models (trained once, then cached) and measures, with your
# three functions, every model and the RoPE model under each method: the loss at every
# position of 8 held-out windows of $8L = 1024$ tokens, and the passkey accuracy on 10
# keys at 3 depths for prompts of $L$, $2L$, $4L$ and $8L$ tokens. The learned table has
# no row past $L$, so it is measured up to $L$ only. The first run trains (a few minutes,
# with a progress bar); later runs load the models and measure in a minute or two.

# %% tags=["skip-grading"]
L_TRAIN = 128
CONTEXT_STEPS = 1000  # training steps per model (the course's table used 1000)
N_KEYS = 10  # passkeys per length and depth
positions = {"apply_rope": apply_rope, "alibi_bias": alibi_bias}  # the models use yours
mine = {"loss_by_position": loss_by_position, "passkey_accuracy": passkey_accuracy,
        "rope_extension": rope_extension, **positions}
check_measurements_written(mine)  # stops here, at once, while an exercise is unwritten
models = trained_models(ExperimentConfig(train_len=L_TRAIN, steps=CONTEXT_STEPS), fns=positions)
results = measure(models, L_TRAIN, n_keys=N_KEYS, fns=mine)
context_extension_explorer(results)

# %% [markdown]
# ### Question: which method would you ship?
#
# Using **your measured numbers** (quote them), answer in a few sentences: at $2L$, $4L$
# and $8L$, which model or RoPE method keeps the loss of late positions closest to what it
# is inside $L$, and which still finds the passkey? Explain the differences with
# wavelengths against the training window: which RoPE pairs have never turned through
# all their angles within $L$ tokens, what PI, NTK, dynamic NTK and YaRN each do to them,
# and why the learned table, ALiBi and NoPE behave as they do. Say where your
# measurements agree or disagree with the claim that "ALiBi extrapolates by construction".

# %% [markdown] nbgrader={"grade": true, "grade_id": "context_extension_question", "locked": false, "points": 3, "schema_version": 3, "solution": true}
# ### BEGIN SOLUTION
# A model answer, for the marker (the numbers depend on the student's run; check that the
# ones quoted are read from their own table and that the reasoning follows from them).
#
# *What the course's own run measured* (`python -m toolkit.long_context`; mean loss over
# positions $0$-$L$ / $L$-$2L$ / $2L$-$4L$ / $4L$-$8L$): RoPE 1.69 / 2.43 / 3.31 / 3.58;
# ALiBi 1.85 / 1.85 / 1.83 / 1.69; NoPE 2.35 / 2.41 / 2.49 / 2.39; RoPE + PI 3.11 / 3.15 /
# 3.13 / 3.02; + NTK 1.83 / 1.86 / 2.31 / 3.09; + dynamic NTK 1.92 / 1.98 / 2.02 / 2.99;
# + YaRN 1.97 / 2.33 / 2.35 / 2.18. Passkey: RoPE (and its variants) 13% at $L$, about 0%
# beyond; the other models 0%: these small models barely learned retrieval, so an answer
# that says the passkey column cannot rank the methods is right.
#
# *Wavelengths.* With $d_\text{head} = 16$ and base 10000, pair $i$ turns
# $r_i = L\theta_i / 2\pi$ times in $L = 128$ tokens: $r_0 \approx 20$, and pairs
# $i \ge 3$ make less than one turn ($\lambda_3 \approx 2\pi \cdot 10^{1.5} \approx 200$
# tokens). Beyond $L$ those slow pairs reach angles the model never saw, so plain RoPE's
# loss climbs right after $L$.
#
# *At 2x*, NTK and dynamic NTK are nearly free (1.86, 1.98 against 1.69 inside $L$): they
# leave the fast pairs alone and slow the slow ones. *At 4x to 8x* they fail (3.09, 2.99):
# NTK slows the middle pairs by less than $s$, so those drift onto unseen angles. *YaRN*
# interpolates only the bands with less than one turn in $L$, keeps those with more than
# 32, ramps between, and sharpens attention by $(0.1 \ln s + 1)^2$: it holds best at 8x
# (2.18) but pays inside $L$ (1.97). *PI* divides every speed by $s$: no pair leaves its
# trained range, but the fast pairs that tell neighbours apart are squeezed 8 times, so
# without fine-tuning the loss is high everywhere (about 3.1).
#
# *Learned* positions have no row past $L$: the model cannot run at all. *ALiBi* needs no
# rescaling: its penalty is linear at every distance, so its loss stays flat (even falls)
# to $8L$: the measurements support "extrapolates by construction" for the loss; they
# cannot show whether it retrieves from far back, and its steep heads suggest it would
# not. *NoPE* reads order only through the causal mask: flat past $L$ but the worst model
# inside it.
#
# Marking (3 points): 1 for reading the right conclusions off their own numbers at 2x,
# 4x and 8x (quoted); 1 for the wavelength argument (slow pairs with fewer than one turn
# in $L$, what each RoPE method does to them); 1 for learned, ALiBi and NoPE (no table
# beyond $L$; linear bias defined everywhere; mask-only order), including that the loss
# supports ALiBi's "extrapolation" while a near-zero passkey column cannot rank anything.
# ### END SOLUTION

# %% [markdown]
# ## Summary
#
# * Sinusoidal: $PE(p, 2i) = \sin(p\,\text{base}^{-2i/d})$, $PE(p, 2i+1) = \cos(\cdot)$.
#   `arange(0, d, 2)` already *is* $2i$: multiplying it by 2 again doubles the exponent.
# * RoPE rotates each q/k pair by $p\theta_i$, so $\langle R_m q, R_n k\rangle =
#   q^\top R_{n-m} k$. Two layouts, half-split (HF LLaMA, `rotate_half`) and interleaved
#   (GPT-J, RoFormer), equal up to a fixed permutation of the q/k rows; mixing them breaks
#   the rotation. With a KV cache, rotate new tokens at their absolute positions.
# * Past the training length: PI divides every speed by $s$; NTK enlarges the base by
#   $s^{d/(d-2)}$; YaRN keeps fast bands, interpolates slow ones, ramps between, and
#   multiplies q and k by $0.1\ln s + 1$ (so the logits by its square).
# * ALiBi: $-m_h(i - j)$ on the scores, slopes $2^{-8h/n}$ for a power of two and the
#   interleaving rule otherwise; queries align to the end of the keys with a cache.
#
# Next: making attention cheaper (Lecture 03 and Assignment 03): sparse patterns, linear
# attention, GQA and the KV cache, MLA.
