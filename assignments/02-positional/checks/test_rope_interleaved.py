"""Hidden checks for Exercise 2b: RoPE in the interleaved layout.

``rotate_interleaved`` and ``layout="interleaved"`` against :mod:`toolkit.position`
(which matches Hugging Face GPT-J), the relative property in this layout, and the
equivalence of the two layouts after the fixed permutation ``[0, 2, ..., 1, 3, ...]``,
computed from the student's own two layouts.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import (
    apply_rope,
    interleaved_to_half_permutation,
    rope_cos_sin,
    rope_inv_freq,
    rotate_interleaved,
)

pytestmark = pytest.mark.grade_cell("test_rope_interleaved")

MIXED = "RoPE layouts mixed"
NO_OFFSET = "RoPE applied without the position offset (KV cache rotated from 0)"

TOL = dict(atol=1e-10, rtol=1e-8)


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _rope(submission, x, positions, layout="interleaved", **kwargs) -> torch.Tensor:
    out = submission.call("apply_rope", x, positions, layout=layout, **kwargs)
    return expect_tensor(out, shape=x.shape, dtype=x.dtype,
                         name=f"apply_rope(x, positions, layout={layout!r})")


def test_rotate_interleaved_values(submission):
    """rotate_interleaved maps every adjacent pair (x[2i], x[2i+1]) to (-x[2i+1], x[2i])."""
    x = _randn(2, 3, 4, 8, seed=1)
    out = submission.call("rotate_interleaved", x)
    assert_close(out, rotate_interleaved(x), **TOL, name="rotate_interleaved(x)",
                 hint="even, odd = x[..., 0::2], x[..., 1::2]; stack (-odd, even) on a new last "
                      "axis and flatten it back")


@pytest.mark.pitfall(MIXED)
def test_cos_sin_interleaved_layout(submission):
    """rope_cos_sin(layout='interleaved') repeats each angle twice in a row."""
    inv_freq = rope_inv_freq(12, dtype=torch.float64)
    for positions in (torch.tensor([0, 3, 7, 100]), torch.tensor([[0, 1, 2], [5, 6, 7]])):
        got = submission.call("rope_cos_sin", positions, inv_freq, "interleaved")
        expected = rope_cos_sin(positions, inv_freq, "interleaved")
        if not isinstance(got, tuple) or len(got) != 2:
            raise CheckFailure("rope_cos_sin should return a tuple (cos, sin)")
        for name, g, e in zip(("cos", "sin"), got, expected):
            assert_close(g, e, **TOL,
                         name=f"{name}, interleaved, positions {tuple(positions.shape)}",
                         hint="interleaved layout: [a_0, a_0, a_1, a_1, ...] "
                              "(torch.repeat_interleave(angles, 2, dim=-1))")


@pytest.mark.weight(2)
@pytest.mark.pitfall(MIXED)
def test_apply_rope_interleaved_matches_reference(submission):
    """apply_rope(layout='interleaved') equals the reference (GPT-J convention)."""
    x = _randn(2, 3, 7, 16, seed=2)
    positions = torch.arange(7)
    out = _rope(submission, x, positions)
    assert_close(out, apply_rope(x, positions, layout="interleaved"), **TOL,
                 name="apply_rope(x, arange(T), layout='interleaved')",
                 hint="x * cos + rotate_interleaved(x) * sin with the interleaved cos/sin; "
                      "rotate_half with interleaved angles is the classic mixed-layout bug")


@pytest.mark.weight(2)
@pytest.mark.pitfall(MIXED)
def test_interleaved_scores_depend_only_on_offset(submission):
    """In the interleaved layout too, <R_m q, R_n k> depends only on n - m."""
    T, d = 10, 16
    q, k = _randn(1, 1, 1, d, seed=3), _randn(1, 1, 1, d, seed=4)
    positions = torch.arange(T)
    rq = _rope(submission, q.expand(1, 1, T, d).clone(), positions)[0, 0]
    rk = _rope(submission, k.expand(1, 1, T, d).clone(), positions)[0, 0]
    scores = rq @ rk.T
    for offset in (-5, -1, 0, 3):
        diagonal = torch.diagonal(scores, offset=offset)
        if not torch.allclose(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-9):
            raise CheckFailure(
                f"interleaved layout: <R_m q, R_n k> changes with m for the fixed offset n - m = "
                f"{offset}. The two members of a pair must turn by the same angle: angles "
                "[a_0, a_0, a_1, a_1, ...] go with rotate_interleaved, not rotate_half")
    norms = rq.norm(dim=-1)
    if not torch.allclose(norms, q[0, 0].norm(dim=-1).expand_as(norms), atol=1e-9):
        raise CheckFailure("interleaved layout: the norm of q changes with the position, so the "
                           "map is not a rotation")


@pytest.mark.weight(2)
@pytest.mark.pitfall(MIXED)
@pytest.mark.property
def test_layouts_agree_after_permutation(submission):
    """apply_rope(x[..., perm], 'half') == apply_rope(x, 'interleaved')[..., perm]."""
    d = 12
    perm = interleaved_to_half_permutation(d)
    x = _randn(2, 2, 5, d, seed=5)
    positions = torch.tensor([3, 4, 5, 6, 40])
    half = _rope(submission, x[..., perm].clone(), positions, layout="half")
    interleaved = _rope(submission, x, positions, layout="interleaved")
    if not torch.allclose(half, interleaved[..., perm], atol=1e-10):
        raise CheckFailure(
            "your two layouts are not the same model up to the permutation "
            "perm = [0, 2, 4, ..., 1, 3, 5, ...]: the interleaved pair (2i, 2i+1) should land on "
            "the half pair (i, i + d/2) with the same angle theta_i")
    # ...so attention scores agree when q and k are permuted alike (a converted checkpoint).
    q, k = _randn(1, 1, 5, d, seed=6), _randn(1, 1, 5, d, seed=7)
    s_int = _rope(submission, q, positions) @ _rope(submission, k, positions).transpose(-2, -1)
    s_half = (_rope(submission, q[..., perm].clone(), positions, layout="half")
              @ _rope(submission, k[..., perm].clone(), positions, layout="half").transpose(-2, -1))
    assert_close(s_half, s_int, **TOL, name="scores after permuting q and k rows",
                 hint="permuting the q/k projection rows turns one layout into the other")


@pytest.mark.pitfall(NO_OFFSET)
@pytest.mark.property
def test_interleaved_kv_cache(submission):
    """Interleaved: tokens P..T-1 rotated at their positions equal rows P..T-1 of the full run."""
    x = _randn(1, 2, 9, 8, seed=8)
    full = _rope(submission, x, torch.arange(9))
    tail = submission.call("apply_rope", x[:, :, 6:].clone(), torch.arange(6, 9),
                           layout="interleaved")
    assert_close(tail, full[:, :, 6:], **TOL, name="the last 3 tokens rotated at positions 6..8",
                 hint="use the positions you are given (the cache length is the first one)")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_odd_dimension_is_rejected(submission):
    """rotate_interleaved raises ValueError for an odd last dimension."""
    with expect_value_error("an odd last dimension", "an odd last dimension was accepted by "
                            "rotate_interleaved: raise ValueError"):
        submission.call("rotate_interleaved", _randn(3, 5, seed=9))
