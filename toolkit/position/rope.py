"""Rotary position embedding, RoPE (arXiv 2104.09864): relative positions by rotation.

Rotate each pair of query/key features by ``p * theta_i``. A rotation by ``m`` on the
query and by ``n`` on the key leaves ``<R_m q, R_n k> = q^T R_(n-m) k``: the score sees
only the offset. Two memory layouts for "pair" exist (interleaved and half-split); see
:func:`apply_rope`.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_even, check_frequency_base, check_rope_layout


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
    check_even("d_head", d_head)
    check_frequency_base(base)
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
    check_rope_layout(layout)
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
    check_even("d_head", d_head)
    return torch.cat((torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)))
