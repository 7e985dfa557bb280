"""Absolute positions, added to the token embeddings once, at the bottom of the model.

* **Sinusoidal** (arXiv 1706.03762). A fixed table: pair ``i`` of features holds
  ``(sin(p w_i), cos(p w_i))`` with ``w_i = base^(-2i/d)``, frequencies falling
  geometrically from 1 to about ``1/base``. Moving ``k`` positions rotates every
  pair by the angle ``k w_i``, so ``PE(p+k) = M_k PE(p)`` for a matrix ``M_k`` that
  does not depend on ``p``, and ``PE(m) . PE(n) = sum_i cos((m-n) w_i)`` depends only
  on the offset ``m - n``.
* **Learned** (BERT, GPT-2). A trainable table with one row per position. Simple,
  but it has no row for a position it never saw: a longer input is an error.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toolkit.arguments import check_even, check_frequency_base, check_int

# ---------------------------------------------------------------------------
# Sinusoidal absolute encoding (arXiv 1706.03762)
# ---------------------------------------------------------------------------


def sinusoid_frequencies(d_model: int, base: float) -> Tensor:
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
    check_int("n_positions", n_positions, minimum=0)
    check_even("d_model", d_model)
    check_frequency_base(base)
    p = torch.arange(n_positions, dtype=torch.float64)[:, None]  # (P, 1)
    angles = p * sinusoid_frequencies(d_model, base)  # p / base^(2i/d), (P, d/2)
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
    check_even("d_model", d_model)
    check_frequency_base(base)
    angle = k * sinusoid_frequencies(d_model, base)  # k w_i, (d/2,)
    c, s = torch.cos(angle), torch.sin(angle)
    m = torch.zeros(d_model, d_model, dtype=torch.float64)
    even = torch.arange(0, d_model, 2)
    m[even, even] = c  # new sin <- cos(kw) * old sin
    m[even, even + 1] = s  # new sin <- sin(kw) * old cos
    m[even + 1, even] = -s  # new cos <- -sin(kw) * old sin
    m[even + 1, even + 1] = c  # new cos <- cos(kw) * old cos
    return m.to(dtype)


# ---------------------------------------------------------------------------
# Learned absolute embedding (BERT, GPT-2)
# ---------------------------------------------------------------------------


class LearnedPositionalEmbedding(nn.Module):
    """A trainable table: row ``p`` is the vector added at position ``p``.

    The parameter is called ``weight`` and has shape ``(max_seq_len, d_model)``, like
    ``nn.Embedding`` (GPT-2's ``wpe.weight``, BERT's ``position_embeddings.weight``),
    initialised ``N(0, 0.02^2)`` as in GPT-2.

    The table has exactly ``max_seq_len`` rows, so it cannot extrapolate: asking for a
    position ``>= max_seq_len`` raises a ``ValueError`` here (a bare embedding lookup
    would raise an opaque index error on CPU, or fail asynchronously on GPU).
    """

    def __init__(self, max_seq_len: int, d_model: int):
        super().__init__()
        check_int("max_seq_len", max_seq_len)
        check_int("d_model", d_model)
        self.max_seq_len, self.d_model = max_seq_len, d_model
        self.weight = nn.Parameter(torch.randn(max_seq_len, d_model) * 0.02)

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
            check_int("positions (sequence length)", positions, minimum=0)
            check_int("offset", offset, minimum=0)
            if offset + positions > self.max_seq_len:
                raise ValueError(
                    f"sequence of length {positions} starting at position {offset} needs "
                    f"positions up to {offset + positions - 1}, but this learned table has only "
                    f"max_seq_len={self.max_seq_len} rows; truncate the input to "
                    f"{self.max_seq_len - offset} tokens or build the embedding with a larger "
                    "max_seq_len (learned positions cannot extrapolate)"
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
        if positions.numel() and (positions.min() < 0 or positions.max() >= self.max_seq_len):
            raise ValueError(
                f"positions must lie in [0, max_seq_len={self.max_seq_len}), got values in "
                f"[{int(positions.min())}, {int(positions.max())}]; truncate the input or build "
                "the embedding with a larger max_seq_len (learned positions cannot extrapolate)"
            )
        return self.weight[positions]
