"""Positional encoding: telling attention *where* each token is.

Attention on its own treats its input as a set. Permute the tokens and the
outputs are permuted the same way (it is permutation-equivariant), so "dog bites
man" and "man bites dog" look alike. Every scheme below breaks that symmetry; they
differ in *where* the position enters and in *what* the model can read from it.

Absolute positions, added to the token embeddings once, at the bottom:

* **Sinusoidal** (arXiv 1706.03762). A fixed table: pair ``i`` of features holds
  ``(sin(p w_i), cos(p w_i))`` with ``w_i = base^(-2i/d)``, frequencies falling
  geometrically from 1 to about ``1/base``. Moving ``k`` positions rotates every
  pair by the angle ``k w_i``, so ``PE(p+k) = M_k PE(p)`` for a matrix ``M_k`` that
  does not depend on ``p``, and ``PE(m) . PE(n) = sum_i cos((m-n) w_i)`` depends only
  on the offset ``m - n``.
* **Learned** (BERT, GPT-2). A trainable table with one row per position. Simple,
  but it has no row for a position it never saw: a longer input is an error.

Relative positions, injected inside every attention layer:

* **RoPE** (arXiv 2104.09864). Rotate each pair of query/key features by
  ``p * theta_i``. A rotation by ``m`` on the query and by ``n`` on the key leaves
  ``<R_m q, R_n k> = q^T R_(n-m) k``: the score sees only the offset. Two memory
  layouts for "pair" exist (interleaved and half-split); see :func:`apply_rope`.
* **Context extension** for RoPE models trained on ``L_train`` tokens and run on
  ``L_new = s * L_train``: position interpolation, NTK-aware and dynamic NTK base
  changes, YaRN's per-band ramp plus temperature, LongRoPE's per-band factors.
* **ALiBi** (arXiv 2108.12409). No embedding at all: subtract ``m_h * (i - j)`` from
  the score, a linear penalty on distance with a different slope per head.
* **T5 relative bias** (arXiv 1910.10683). Bucket the offset ``j - i`` (exact for
  small offsets, logarithmic for large ones) and add a learned scalar per bucket
  and head to the score.
* **NoPE** (reading): a causal decoder with no encoding at all can still infer
  positions, because the causal mask itself reveals how many tokens came before.

Conventions: attention tensors are ``(batch, heads, seq, d_head)``; positions are
absolute integers ``0, 1, ...``; with a KV cache holding ``P`` tokens the new tokens
have positions ``P, P+1, ...``. Where Hugging Face transformers has a counterpart,
the functions here match it to float tolerance (the tests check this), and any
difference in convention is named in the docstring.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

__all__ = [
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    "LearnedPositionalEmbedding",
    "rope_inv_freq",
    "rope_cos_sin",
    "rotate_half",
    "rotate_interleaved",
    "apply_rope",
    "interleaved_to_half_permutation",
    "rope_inv_freq_linear",
    "rope_inv_freq_ntk",
    "rope_inv_freq_dynamic_ntk",
    "yarn_band_ratios",
    "yarn_inv_freq_and_temperature",
    "longrope_inv_freq",
    "longrope_attention_factor",
    "alibi_slopes",
    "alibi_bias",
    "alibi_bias_key_only",
    "t5_relative_position_bucket",
    "T5RelativePositionBias",
]

ROPE_LAYOUTS = ("half", "interleaved")


# --------------------------------------------------------------------------- #
# Argument checks (shared)                                                     #
# --------------------------------------------------------------------------- #


def _check_int(name: str, value, *, minimum: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def _check_even(name: str, value) -> None:
    _check_int(name, value, minimum=2)
    if value % 2:
        raise ValueError(
            f"{name}={value} must be even: features are rotated/encoded in pairs; "
            "use an even dimension"
        )


def _check_base(base) -> None:
    if not (isinstance(base, (int, float)) and base > 1):
        raise ValueError(f"base must be a number > 1 (10000.0 is the usual choice), got {base!r}")


def _check_scale(scale) -> None:
    if not (isinstance(scale, (int, float)) and scale >= 1):
        raise ValueError(
            f"scale = L_new / L_train must be a number >= 1 (1.0 means no extension), got {scale!r}"
        )


def _check_layout(layout) -> None:
    if layout not in ROPE_LAYOUTS:
        raise ValueError(
            f"layout must be 'half' (GPT-NeoX / HF LLaMA) or 'interleaved' (RoFormer / GPT-J), "
            f"got {layout!r}"
        )


# --------------------------------------------------------------------------- #
# 1. Sinusoidal absolute encoding (arXiv 1706.03762)                           #
# --------------------------------------------------------------------------- #


def _sinusoid_frequencies(d_model: int, base: float) -> Tensor:
    """``w_i = base^(-2i/d)`` for ``i = 0 .. d/2-1``, float64, shape ``(d/2,)``."""
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i = 0, 2, ..., d-2
    return base ** (-two_i / d_model)  # w_i = 1 / base^(2i/d)


def sinusoidal_encoding(
    n_positions: int, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The fixed sinusoidal table of arXiv 1706.03762.

    ``PE(p, 2i) = sin(p / base^(2i/d))`` and ``PE(p, 2i+1) = cos(p / base^(2i/d))``
    for ``i = 0 .. d/2-1``: sine and cosine *interleaved*, one frequency per pair of
    columns. (Some libraries store all sines first and all cosines after; that is
    a fixed column permutation of this table.)

    The exponent is ``2i/d`` where ``2i`` is the *even column index*. Code that
    loops ``dim = arange(0, d, 2)`` and then writes ``base ** (2 * dim / d)``
    doubles the exponent, and its slowest wavelength becomes ``2 pi base^2``
    instead of about ``2 pi base``.

    Angles are computed in float64 and cast at the end, so large positions keep
    their precision.

    Args:
        n_positions: number of rows ``P`` (positions ``0 .. P-1``).
        d_model: even embedding width ``d``.
        base: the geometric base of the wavelengths.
        dtype: dtype of the returned table.

    Returns:
        ``(n_positions, d_model)`` table, added to the token embeddings.
    """
    _check_int("n_positions", n_positions, minimum=0)
    _check_even("d_model", d_model)
    _check_base(base)
    p = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    angles = p * _sinusoid_frequencies(d_model, base)  # p / base^(2i/d), (P, d/2)
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angles)  # PE(p, 2i)   = sin(p / base^(2i/d))
    pe[:, 1::2] = torch.cos(angles)  # PE(p, 2i+1) = cos(p / base^(2i/d))
    return pe.to(dtype)


def sinusoidal_shift_matrix(
    k: int, d_model: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """The fixed linear map ``M_k`` with ``PE(p + k) = M_k @ PE(p)`` for every ``p``.

    By the angle-addition formulas, for each pair ``(s, c) = (sin(p w), cos(p w))``:

        sin((p+k) w) =  cos(k w) s + sin(k w) c
        cos((p+k) w) = -sin(k w) s + cos(k w) c

    so ``M_k`` is block diagonal with one 2x2 rotation ``[[cos, sin], [-sin, cos]]``
    (angle ``k w_i``) per pair. It depends on the shift ``k`` but not on ``p``: this is
    why a linear layer can, in principle, attend "k tokens back". ``k`` may be
    negative (``M_-k`` is the inverse, the transpose, of ``M_k``).

    Returns:
        ``(d_model, d_model)`` matrix.
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise ValueError(f"k must be an integer shift (may be negative), got {k!r}")
    _check_even("d_model", d_model)
    _check_base(base)
    angle = k * _sinusoid_frequencies(d_model, base)  # k w_i, (d/2,)
    c, s = torch.cos(angle), torch.sin(angle)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even] = c  # new sin <- cos(kw) * old sin
    m[even, even + 1] = s  # new sin <- sin(kw) * old cos
    m[even + 1, even] = -s  # new cos <- -sin(kw) * old sin
    m[even + 1, even + 1] = c  # new cos <- cos(kw) * old cos
    return m.to(dtype)


# --------------------------------------------------------------------------- #
# 2. Learned absolute embedding (BERT, GPT-2)                                  #
# --------------------------------------------------------------------------- #


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table: row ``p`` is the vector added at position ``p``.

    The parameter is called ``weight`` and has shape ``(max_len, d_model)``, like
    ``nn.Embedding`` (GPT-2's ``wpe.weight``, BERT's ``position_embeddings.weight``),
    initialised ``N(0, 0.02^2)`` as in GPT-2.

    The table has exactly ``max_len`` rows, so it cannot extrapolate: asking for a
    position ``>= max_len`` raises a ``ValueError`` here (a bare embedding lookup
    would raise an opaque index error on CPU, or fail asynchronously on GPU).
    """

    def __init__(self, max_len: int, d_model: int):
        super().__init__()
        _check_int("max_len", max_len)
        _check_int("d_model", d_model)
        self.max_len, self.d_model = max_len, d_model
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, positions: Tensor | int, offset: int = 0) -> Tensor:
        """
        Args:
            positions: either an ``int`` sequence length ``T`` (positions
                ``offset .. offset+T-1``), or an integer tensor of absolute positions
                shaped ``(T,)`` or ``(B, T)``.
            offset: first position when ``positions`` is a length (a KV cache that
                already holds ``offset`` tokens). Must be 0 when a tensor is given.

        Returns:
            ``(T, d_model)`` for a length or ``(T,)`` positions, ``(B, T, d_model)``
            for ``(B, T)`` positions.
        """
        if isinstance(positions, int) and not isinstance(positions, bool):
            _check_int("positions (sequence length)", positions, minimum=0)
            _check_int("offset", offset, minimum=0)
            if offset + positions > self.max_len:
                raise ValueError(
                    f"sequence of length {positions} starting at position {offset} needs "
                    f"positions up to {offset + positions - 1}, but this learned table has only "
                    f"max_len={self.max_len} rows; truncate the input to {self.max_len - offset} "
                    "tokens or build the embedding with a larger max_len (learned positions "
                    "cannot extrapolate)"
                )
            idx = torch.arange(offset, offset + positions, device=self.weight.device)
            return self.weight[idx]
        if not isinstance(positions, Tensor):
            raise ValueError(
                f"positions must be an int length or an integer tensor, got {type(positions)}"
            )
        if offset != 0:
            raise ValueError("offset applies only to an int length; add it to the positions tensor")
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise ValueError(f"positions must be an integer tensor, got dtype {positions.dtype}")
        if positions.ndim not in (1, 2):
            raise ValueError(
                f"positions must be shaped (T,) or (B, T), got {tuple(positions.shape)}"
            )
        if positions.numel() and (positions.min() < 0 or positions.max() >= self.max_len):
            raise ValueError(
                f"positions must lie in [0, max_len={self.max_len}), got values in "
                f"[{int(positions.min())}, {int(positions.max())}]; truncate the input or "
                "build the embedding with a larger max_len (learned positions cannot extrapolate)"
            )
        return self.weight[positions]


# --------------------------------------------------------------------------- #
# 3. Rotary position embedding, RoPE (arXiv 2104.09864)                        #
# --------------------------------------------------------------------------- #


def rope_inv_freq(
    d_head: int, base: float = 10000.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """RoPE's per-pair angular speeds ``theta_i = base^(-2i/d)``, ``i = 0 .. d/2-1``.

    Pair ``i`` turns by ``theta_i`` radians per position, so it completes one turn
    every ``wavelength_i = 2 pi / theta_i`` positions: pair 0 every ``2 pi`` (about 6)
    tokens, the last pair every ``2 pi base^((d-2)/d)`` (about 54,000 for base 10^4 and
    ``d = 128``).

    Returns:
        ``(d_head / 2,)`` tensor (the ``inv_freq`` buffer of HF rotary embeddings).
    """
    _check_even("d_head", d_head)
    _check_base(base)
    two_i = torch.arange(0, d_head, 2, dtype=torch.float64)  # 2i = 0, 2, ..., d-2
    return (base ** (-two_i / d_head)).to(dtype)  # theta_i = base^(-2i/d)


def rope_cos_sin(
    positions: Tensor, inv_freq: Tensor, layout: str = "half"
) -> tuple[Tensor, Tensor]:
    """Cosine and sine of the rotation angles ``p * theta_i``, laid out for ``layout``.

    The angle of pair ``i`` at position ``p`` is ``p * theta_i``. Each angle is
    written twice along the last axis, where the two members of its pair live:

    * ``"half"``: ``[a_0, ..., a_{d/2-1}, a_0, ..., a_{d/2-1}]`` (pair ``(i, i + d/2)``);
    * ``"interleaved"``: ``[a_0, a_0, a_1, a_1, ...]`` (pair ``(2i, 2i+1)``).

    Angles are computed in ``inv_freq``'s dtype (float32 by default, like HF); pass a
    float64 ``inv_freq`` for exact angles at very large positions. Never compute
    them in float16/bfloat16: bfloat16 rounds positions near 1000 to multiples of 4.

    Args:
        positions: absolute positions ``(T,)`` or ``(B, T)`` (int or float).
        inv_freq: ``(d_head / 2,)`` angular speeds, e.g. from :func:`rope_inv_freq`.
        layout: ``"half"`` or ``"interleaved"``.

    Returns:
        ``(cos, sin)``, each ``(T, d_head)`` for ``(T,)`` positions or
        ``(B, 1, T, d_head)`` for ``(B, T)`` positions: both broadcast against
        ``(B, H, T, d_head)``.
    """
    _check_layout(layout)
    if not isinstance(positions, Tensor) or positions.ndim not in (1, 2):
        raise ValueError("positions must be a tensor shaped (T,) or (B, T)")
    if not isinstance(inv_freq, Tensor) or inv_freq.ndim != 1:
        raise ValueError("inv_freq must be a 1-D tensor of d_head / 2 angular speeds")
    if not inv_freq.dtype.is_floating_point:
        raise ValueError(f"inv_freq must be floating point, got {inv_freq.dtype}")
    angles = positions.to(inv_freq.dtype)[..., None] * inv_freq  # p * theta_i, (..., T, d/2)
    if layout == "half":
        angles = torch.cat((angles, angles), dim=-1)  # (..., T, d)
    else:
        angles = torch.repeat_interleave(angles, 2, dim=-1)  # (..., T, d)
    if positions.ndim == 2:
        angles = angles.unsqueeze(-3)  # (B, 1, T, d): one set of angles for all heads
    return torch.cos(angles), torch.sin(angles)


def rotate_half(x: Tensor) -> Tensor:
    """``(x_1, x_2) -> (-x_2, x_1)`` on the two halves of the last axis.

    For the pair ``(x[i], x[i + d/2])`` this is multiplication by ``i`` in the
    complex plane (a quarter turn), so ``x cos(a) + rotate_half(x) sin(a)`` rotates
    each pair by ``a``. Matches HF LLaMA's ``rotate_half``. Shape is preserved.
    """
    if x.shape[-1] % 2:
        raise ValueError(f"last dimension must be even, got {x.shape[-1]}")
    x1, x2 = x.chunk(2, dim=-1)  # x[..., :d/2], x[..., d/2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_interleaved(x: Tensor) -> Tensor:
    """``(x[2i], x[2i+1]) -> (-x[2i+1], x[2i])`` for every adjacent pair.

    The quarter turn for the interleaved layout (GPT-J's ``rotate_every_two``).
    Shape is preserved.
    """
    if x.shape[-1] % 2:
        raise ValueError(f"last dimension must be even, got {x.shape[-1]}")
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((-odd, even), dim=-1).flatten(-2)  # (..., d/2, 2) -> (..., d)


def apply_rope(
    x: Tensor,
    positions: Tensor,
    *,
    base: float = 10000.0,
    layout: str = "half",
    inv_freq: Tensor | None = None,
    attention_scaling: float = 1.0,
) -> Tensor:
    """Rotate each feature pair of ``x`` by ``p * theta_i`` (RoPE, arXiv 2104.09864).

    For a pair ``(a, b)`` at position ``p`` with angle ``phi = p * theta_i``:

        a' = a cos(phi) - b sin(phi)
        b' = b cos(phi) + a sin(phi)

    written for the whole vector as ``x * cos + rotate(x) * sin``. Apply it to the
    queries and the keys (never the values), after the projections and before the
    dot product. Then ``<R_m q, R_n k> = q^T R_(n-m) k``: scores depend only on
    ``n - m``.

    Which features form a pair is a *layout* convention:

    * ``"half"``: ``(x[i], x[i + d/2])``: GPT-NeoX, HF LLaMA / Mistral / Qwen.
    * ``"interleaved"``: ``(x[2i], x[2i+1])``: RoFormer, GPT-J, Meta's original LLaMA.

    They give the same attention scores once the q/k projection rows are permuted
    (:func:`interleaved_to_half_permutation`). Mixing them (interleaved angles with
    ``rotate_half``) is a bug: the two members of a "pair" then turn by different
    angles, the map stops being a rotation and the relative property is lost.

    KV cache: pass the *absolute* positions of the new tokens, ``P .. P+T-1`` when
    the cache already holds ``P`` tokens. Cached keys keep the rotation they got
    when they were written.

    Args:
        x: ``(B, H, T, d_head)`` queries or keys (any leading shape works with
            ``(T,)`` positions).
        positions: ``(T,)`` or ``(B, T)`` absolute positions (``(B, T)`` for left
            padding, where each row starts at a different position).
        base: RoPE base, used when ``inv_freq`` is not given.
        layout: ``"half"`` or ``"interleaved"``.
        inv_freq: ``(d_head / 2,)`` angular speeds; pass a rescaled one for context
            extension (PI, NTK, YaRN, ...). Default :func:`rope_inv_freq` in float32
            (float64 when ``x`` is float64).
        attention_scaling: multiplies cos and sin (HF's ``attention_scaling``; YaRN's
            ``0.1 ln s + 1``). Applied to q *and* k, so logits scale by its square.

    Returns:
        Tensor of the same shape and dtype as ``x``.
    """
    if not isinstance(x, Tensor) or x.ndim < 2:
        raise ValueError("x must be a tensor shaped (B, H, T, d_head)")
    d_head, T = x.shape[-1], x.shape[-2]
    _check_even("d_head (last dimension of x)", d_head)
    _check_layout(layout)
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
        inv_freq = rope_inv_freq(d_head, base, dtype=angle_dtype)
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


def interleaved_to_half_permutation(d_head: int) -> Tensor:
    """The permutation that turns an interleaved-RoPE head into a half-split one.

    ``perm = [0, 2, 4, ..., d-2, 1, 3, ..., d-1]``: feature ``i`` of the half layout
    is feature ``2i`` of the interleaved one, and feature ``i + d/2`` is ``2i + 1``.
    So the interleaved pair ``(2i, 2i+1)`` lands on the half pair ``(i, i + d/2)`` with
    the same angle ``theta_i``, and

        apply_rope(x[..., perm], layout="half") == apply_rope(x, layout="interleaved")[..., perm]

    To convert a checkpoint, reorder the output rows of ``q_proj`` and ``k_proj``
    (and their biases) inside every head: ``W.view(H, d, -1)[:, perm].reshape(H*d, -1)``.
    Since q and k get the same permutation, every q . k (hence every attention
    score) is unchanged; v and o are untouched. This is what HF's LLaMA conversion
    script does to Meta's weights. The inverse permutation is ``perm.argsort()``.

    Returns:
        ``(d_head,)`` long tensor.
    """
    _check_even("d_head", d_head)
    return torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))


# --------------------------------------------------------------------------- #
# 4. RoPE context extension: run at L_new = s * L_train                        #
# --------------------------------------------------------------------------- #
# Pair i makes L_train / wavelength_i = L_train * theta_i / (2 pi) turns over the
# training context. Fast pairs (many turns) have seen every angle during training;
# slow pairs (less than one turn) have only seen a small arc, and positions beyond
# L_train push them onto angles they never saw. The methods below differ in which
# pairs they slow down, and by how much.


def rope_inv_freq_linear(
    d_head: int, base: float = 10000.0, scale: float = 1.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Position interpolation (PI, arXiv 2306.15595): positions divided by ``s``.

    ``(p / s) * theta_i = p * (theta_i / s)``, so dividing every angular speed by
    ``s`` is the same as squeezing positions ``0 .. sL`` into the trained range
    ``0 .. L``. Every pair is slowed down equally, including the fast ones whose
    neighbouring-token angle difference now shrinks ``s`` times (short-range
    resolution is lost; a short fine-tune recovers it). Matches HF's ``"linear"``
    rope type.

    Returns:
        ``(d_head / 2,)`` tensor ``theta_i / s``.
    """
    _check_scale(scale)
    return rope_inv_freq(d_head, base, dtype=torch.float64).div(scale).to(dtype)  # theta_i / s


def _ntk_base(d_head: int, base: float, scale: float) -> float:
    return base * scale ** (d_head / (d_head - 2))  # base' = base * s^(d/(d-2))


def rope_inv_freq_ntk(
    d_head: int, base: float = 10000.0, scale: float = 1.0, *, dtype: torch.dtype = torch.float32
) -> Tensor:
    """NTK-aware scaling: keep the formula, enlarge the base, ``base' = base * s^(d/(d-2))``.

    With ``theta_i = base'^(-2i/d)`` the fastest pair (``i = 0``) is unchanged and
    the slowest (``2i = d - 2``) gets ``base^(-(d-2)/d) * s^(-1)``: exactly ``theta/s``.
    In between the slow-down grows geometrically, so high frequencies extrapolate
    and low frequencies interpolate. No fine-tuning needed for moderate ``s``.

    HF has no static "ntk" rope type; this equals HF's ``"dynamic"`` type with
    ``factor=1`` evaluated at ``seq_len = s * max_position_embeddings``.

    Returns:
        ``(d_head / 2,)`` tensor.
    """
    _check_even("d_head", d_head)
    _check_scale(scale)
    if d_head < 4:
        raise ValueError(f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}")
    return rope_inv_freq(d_head, _ntk_base(d_head, base, scale), dtype=dtype)


def rope_inv_freq_dynamic_ntk(
    d_head: int,
    base: float,
    seq_len: int,
    max_position_embeddings: int,
    scale: float,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """Dynamic NTK: recompute the NTK base from the current length (HF ``"dynamic"``).

    Inside the trained length nothing changes (plain RoPE, full precision on short
    inputs). Beyond it, with ``L = max_position_embeddings`` and ``T = seq_len``:

        base' = base * (s * T / L - (s - 1)) ^ (d / (d-2))

    The bracket is 1 at ``T = L`` and grows linearly with slope ``s / L``. This is
    HF's (and the original Reddit post's) convention; note that at ``T = s * L`` the
    effective NTK scale is ``s^2 - s + 1``, not ``s`` (with ``scale=1`` it is ``T / L``).

    Differences from HF, which this function is stateless about: HF evaluates it at
    ``T = max(position_ids) + 1``, keeps the largest ``inv_freq`` computed so far and
    resets to the original when the input becomes short again; keys already in a
    KV cache keep the rotation computed with the older base.

    Returns:
        ``(d_head / 2,)`` tensor.
    """
    _check_even("d_head", d_head)
    _check_int("seq_len", seq_len)
    _check_int("max_position_embeddings", max_position_embeddings)
    _check_scale(scale)
    if d_head < 4:
        raise ValueError(f"d_head must be >= 4 for NTK scaling (exponent d/(d-2)), got {d_head}")
    T = max(seq_len, max_position_embeddings)  # inside the trained length: plain RoPE
    growth = scale * T / max_position_embeddings - (scale - 1)  # s T / L - (s - 1)
    return rope_inv_freq(d_head, _ntk_base(d_head, base, growth), dtype=dtype)


def yarn_band_ratios(d_head: int, base: float, original_max_position_embeddings: int) -> Tensor:
    """``r_i = L_train / wavelength_i = L_train * theta_i / (2 pi)``: turns per training context.

    Returns:
        ``(d_head / 2,)`` float64 tensor, decreasing with ``i``.
    """
    _check_int("original_max_position_embeddings", original_max_position_embeddings)
    theta = rope_inv_freq(d_head, base, dtype=torch.float64)
    return original_max_position_embeddings * theta / (2 * math.pi)  # r_i = L / (2 pi / theta_i)


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
    """YaRN (arXiv 2309.00071): interpolate slow pairs, keep fast ones, ramp between.

    With ``r_i`` from :func:`yarn_band_ratios` (turns per training context),
    ``alpha = beta_slow = 1`` and ``beta = beta_fast = 32``, and a blend
    ``gamma_i`` in ``[0, 1]``:

        theta'_i = (1 - gamma_i) * theta_i / s + gamma_i * theta_i

    * ``r_i > beta`` (many turns, every angle already seen): ``gamma = 1``, untouched.
    * ``r_i < alpha`` (less than one turn): ``gamma = 0``, fully interpolated ``theta/s``.
    * in between: a linear ramp.

    Plus an attention temperature: ``sqrt(1/t) = 0.1 ln(s) + 1`` (1 when ``s <= 1``).
    It multiplies cos and sin (pass it as ``attention_scaling`` to :func:`apply_rope`),
    so it scales *both* q and k and the logits are multiplied by ``(0.1 ln s + 1)^2 = 1/t``.

    Ramp conventions (``ramp``):

    * ``"index"`` (default, = HF ``_compute_yarn_parameters`` and the authors'
      reference code): the ramp is linear in the pair *index* ``i`` between
      ``i_fast`` and ``i_slow``, the (fractional) indices where ``r_i`` equals
      ``beta_fast`` and ``beta_slow``. Since ``ln r_i`` is linear in ``i``, this is a
      ramp linear in ``ln r``. With ``truncate=True`` (HF's default) the ends are
      rounded outwards, ``floor(i_fast)`` and ``ceil(i_slow)``, so up to one band on
      each side of the transition is partly blended although its ``r`` is just
      beyond ``beta``/``alpha``. As in HF, the ends are clamped to ``[0, d - 1]``.
    * ``"ratio"``: the paper's equation, ``gamma = clip((r - alpha) / (beta - alpha), 0, 1)``,
      linear in ``r`` itself (``truncate`` is ignored).

    Not covered: HF's DeepSeek-style ``mscale`` / ``mscale_all_dim`` options and
    ``partial_rotary_factor`` (pass the rotary width as ``d_head``).

    Returns:
        ``(inv_freq, attention_factor)``: ``(d_head / 2,)`` float32 tensor and the float
        ``0.1 ln s + 1``.
    """
    _check_even("d_head", d_head)
    _check_base(base)
    _check_scale(scale)
    if not (0 < beta_slow < beta_fast):
        raise ValueError(
            f"need 0 < beta_slow < beta_fast (defaults 1 and 32), got {beta_slow}, {beta_fast}"
        )
    if ramp not in ("index", "ratio"):
        raise ValueError(
            f"ramp must be 'index' (HF / reference code) or 'ratio' (paper), got {ramp!r}"
        )
    L = original_max_position_embeddings
    r = yarn_band_ratios(d_head, base, L)  # (d/2,), float64
    if ramp == "index":

        def band_index(turns: float) -> float:
            # solve L * base^(-2i/d) / (2 pi) = turns for i
            return d_head * math.log(L / (2 * math.pi * turns)) / (2 * math.log(base))

        lo, hi = band_index(beta_fast), band_index(beta_slow)
        if truncate:
            lo, hi = math.floor(lo), math.ceil(hi)
        lo, hi = max(lo, 0), min(hi, d_head - 1)
        if lo == hi:
            hi += 0.001  # avoid 0/0, as HF does
        i = torch.arange(d_head // 2, dtype=torch.float64)
        gamma = 1 - ((i - lo) / (hi - lo)).clamp(0, 1)  # 1 at i <= lo (fast), 0 at i >= hi (slow)
    else:
        gamma = ((r - beta_slow) / (beta_fast - beta_slow)).clamp(0, 1)  # (r - a) / (b - a)
    theta = rope_inv_freq(d_head, base, dtype=torch.float64)
    inv_freq = (1 - gamma) * theta / scale + gamma * theta  # (1-g) theta/s + g theta
    attention_factor = 0.1 * math.log(scale) + 1.0 if scale > 1 else 1.0  # sqrt(1/t)
    return inv_freq.to(torch.float32), attention_factor


def longrope_inv_freq(
    d_head: int,
    base: float,
    rescale_factors,
    *,
    dtype: torch.dtype = torch.float32,
) -> Tensor:
    """LongRoPE (arXiv 2402.13753): one given rescale factor per pair, ``theta_i / lambda_i``.

    LongRoPE *searches* the factors ``lambda_i`` (evolutionary search on perplexity);
    here they are given, as in a checkpoint's config (Phi-3's ``short_factor`` /
    ``long_factor``). HF uses ``short_factor`` while the length is within
    ``original_max_position_embeddings`` and ``long_factor`` beyond it, and scales
    cos/sin by :func:`longrope_attention_factor`.

    Args:
        rescale_factors: ``d_head / 2`` positive numbers (sequence or tensor).

    Returns:
        ``(d_head / 2,)`` tensor.
    """
    _check_even("d_head", d_head)
    lam = torch.as_tensor(rescale_factors, dtype=torch.float64)
    if lam.shape != (d_head // 2,):
        raise ValueError(
            f"rescale_factors must hold d_head / 2 = {d_head // 2} numbers, "
            f"got shape {tuple(lam.shape)}"
        )
    if not bool((lam > 0).all()):
        raise ValueError("rescale_factors must all be > 0 (1.0 leaves a pair unchanged)")
    return (rope_inv_freq(d_head, base, dtype=torch.float64) / lam).to(dtype)  # theta_i / lambda_i


def longrope_attention_factor(scale: float, original_max_position_embeddings: int) -> float:
    """LongRoPE / Phi-3 attention factor ``sqrt(1 + ln s / ln L_train)`` (1 when ``s <= 1``)."""
    _check_int("original_max_position_embeddings", original_max_position_embeddings, minimum=2)
    if scale <= 1:
        return 1.0
    return math.sqrt(1 + math.log(scale) / math.log(original_max_position_embeddings))


# --------------------------------------------------------------------------- #
# 5. ALiBi: attention with linear biases (arXiv 2108.12409)                    #
# --------------------------------------------------------------------------- #


def _geometric_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]  # m_h = 2^(-8h/n), h = 1..n


def alibi_slopes(n_heads: int) -> Tensor:
    """ALiBi's per-head slopes ``m_h``.

    ``n`` a power of two: the geometric sequence ``m_h = 2^(-8h/n)``, ``h = 1 .. n``
    (8 heads: 1/2, 1/4, ..., 1/256). Otherwise, with ``n'`` the largest power of
    two below ``n``: the ``n'`` slopes for ``n'`` heads, followed by every other
    slope of the ``2n'`` sequence (its 1st, 3rd, 5th, ...) until there are ``n``.
    The extra slopes fall between the first ones, so heads still cover the range of
    distances evenly. Same order as the paper's code and HF BLOOM.

    Returns:
        ``(n_heads,)`` float32 tensor.
    """
    _check_int("n_heads", n_heads)
    n_pow2 = 2 ** int(math.floor(math.log2(n_heads)))  # closest power of two <= n
    slopes = _geometric_slopes(n_pow2)
    slopes += _geometric_slopes(2 * n_pow2)[0::2][: n_heads - n_pow2]
    return torch.tensor(slopes, dtype=torch.float32)


def alibi_bias(
    n_heads: int, n_queries: int, n_keys: int | None = None, causal: bool = True
) -> Tensor:
    """The ALiBi score bias ``-m_h * (i - j)``, added to ``q k^T / sqrt(d)`` before softmax.

    Queries are aligned to the *end* of the keys: with ``n_keys > n_queries`` (a KV
    cache) query ``i`` sits at absolute position ``n_keys - n_queries + i``.

    * ``causal=True``: ``-m_h * (i - j)`` for ``j <= i`` and ``-inf`` for ``j > i``,
      so the result is a complete float mask (the causal mask is included).
    * ``causal=False`` (encoders): ``-m_h * |i - j|``, symmetric, no masking.

    Returns:
        ``(n_heads, n_queries, n_keys)`` float32 tensor.
    """
    _check_int("n_heads", n_heads)
    _check_int("n_queries", n_queries)
    n_keys = n_queries if n_keys is None else n_keys
    _check_int("n_keys", n_keys)
    if causal and n_keys < n_queries:
        raise ValueError(
            f"causal ALiBi aligns queries to the end of the keys, so n_keys ({n_keys}) must be "
            f">= n_queries ({n_queries}); pass n_keys = past length + n_queries"
        )
    i = torch.arange(n_keys - n_queries, n_keys, dtype=torch.float32)[:, None]  # query positions
    j = torch.arange(n_keys, dtype=torch.float32)[None, :]  # key positions
    m = alibi_slopes(n_heads)[:, None, None]  # (H, 1, 1)
    if causal:
        bias = -m * (i - j)  # -m_h (i - j), (H, T_q, T_k)
        return bias.masked_fill(j > i, float("-inf"))
    return -m * (i - j).abs()  # -m_h |i - j|


def alibi_bias_key_only(n_heads: int, n_keys: int) -> Tensor:
    """BLOOM's ALiBi form: ``m_h * j``, which depends on the key position only.

    Why it gives the same attention as ``-m_h * (i - j)`` for causal rows: in row
    ``i`` the two differ by ``-m_h * i``, a constant across that row, and softmax
    ignores a constant added to a whole row, ``softmax(z + c) = softmax(z)`` (the
    ``e^c`` cancels between numerator and denominator). It only holds row by row
    over the *visible* keys, so it needs the causal mask, and it does not hold for
    the bidirectional ``-m_h |i - j|``, which is not linear in ``j``. The gain: one
    ``(H, 1, T_k)`` tensor instead of ``(H, T_q, T_k)``. The raw logits (not the
    weights) differ, which matters for e.g. logit soft-capping.

    Returns:
        ``(n_heads, 1, n_keys)`` float32 tensor, broadcasting over queries. Same values
        as HF's ``build_alibi_tensor`` for an all-ones attention mask.
    """
    _check_int("n_keys", n_keys)
    j = torch.arange(n_keys, dtype=torch.float32)  # key positions
    return (alibi_slopes(n_heads)[:, None] * j)[:, None, :]  # m_h * j, (H, 1, T_k)


# --------------------------------------------------------------------------- #
# 6. T5 relative position bias (arXiv 1910.10683)                              #
# --------------------------------------------------------------------------- #


def t5_relative_position_bucket(
    relative_position: Tensor,
    bidirectional: bool = True,
    num_buckets: int = 32,
    max_distance: int = 128,
) -> Tensor:
    """Map the offset ``key_pos - query_pos`` to one of ``num_buckets`` buckets, like T5.

    * Bidirectional (encoder): half the buckets for keys to the left or at the
      query (offset <= 0), half for keys to the right (offset > 0, shifted by
      ``num_buckets / 2``). Causal (decoder): all buckets for the past; every future
      key lands in bucket 0 (it is masked anyway).
    * Within a half of ``n`` buckets, distances ``0 .. n/2 - 1`` get a bucket each;
      larger distances share log-spaced buckets:
      ``n/2 + floor(ln(dist / (n/2)) / ln(max_distance / (n/2)) * (n - n/2))``,
      capped at ``n - 1``: every distance ``>= max_distance`` shares the last bucket.

    Matches HF ``T5Attention._relative_position_bucket`` exactly.

    Args:
        relative_position: integer tensor of ``key_pos - query_pos``, any shape.

    Returns:
        long tensor of the same shape with values in ``[0, num_buckets)``.
    """
    if not isinstance(relative_position, Tensor) or relative_position.dtype.is_floating_point:
        raise ValueError("relative_position must be an integer tensor of key_pos - query_pos")
    _check_int("num_buckets", num_buckets, minimum=2)
    rel = relative_position.long()
    bucket = torch.zeros_like(rel)
    n = num_buckets
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


class T5RelativePositionBias(nn.Module):
    """A learned scalar per (bucket, head), added to the attention scores (T5).

    ``bias[h, i, j] = relative_attention_bias.weight[bucket(j - i), h]``. The
    parameter name follows HF (``relative_attention_bias``, an ``nn.Embedding`` of
    shape ``(num_buckets, n_heads)``), so a T5 checkpoint's first-layer weight loads
    directly. T5 computes it once, in the first layer, and shares it with the rest.
    """

    def __init__(
        self,
        n_heads: int,
        num_buckets: int = 32,
        max_distance: int = 128,
        bidirectional: bool = True,
    ):
        super().__init__()
        _check_int("n_heads", n_heads)
        _check_int("num_buckets", num_buckets, minimum=2)
        _check_int("max_distance", max_distance)
        self.n_heads, self.num_buckets = n_heads, num_buckets
        self.max_distance, self.bidirectional = max_distance, bidirectional
        self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

    def forward(self, n_queries: int, n_keys: int | None = None, query_offset: int = 0) -> Tensor:
        """
        Args:
            n_queries: ``T_q``.
            n_keys: ``T_k`` (default ``T_q``).
            query_offset: absolute position of the first query (a decoder with a KV
                cache of ``P`` tokens passes ``P``; HF's ``past_seen_tokens``).

        Returns:
            ``(1, n_heads, T_q, T_k)`` bias to add to the scores.
        """
        _check_int("n_queries", n_queries)
        n_keys = n_queries if n_keys is None else n_keys
        _check_int("n_keys", n_keys)
        _check_int("query_offset", query_offset, minimum=0)
        device = self.relative_attention_bias.weight.device
        i = torch.arange(n_queries, device=device)[:, None] + query_offset  # query positions
        j = torch.arange(n_keys, device=device)[None, :]  # key positions
        buckets = t5_relative_position_bucket(
            j - i, self.bidirectional, self.num_buckets, self.max_distance
        )  # (T_q, T_k)
        values = self.relative_attention_bias(buckets)  # (T_q, T_k, H)
        return values.permute(2, 0, 1).unsqueeze(0)  # (1, H, T_q, T_k)
