"""Hidden checks for Exercise 2a: RoPE in the half-split layout.

``rope_inv_freq``, ``rotate_half``, ``rope_cos_sin`` and ``apply_rope`` against
:mod:`toolkit.position` (which matches Hugging Face LLaMA), then the properties: scores
depend only on the offset, norms are kept, and a KV cache (rotating the last tokens at
their absolute positions) equals slicing the full sequence. Inputs are float64 wherever
exact agreement is expected.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import apply_rope, rope_cos_sin, rope_inv_freq, rotate_half

pytestmark = pytest.mark.grade_cell("test_rope")

NO_OFFSET = "RoPE applied without the position offset (KV cache rotated from 0)"
MIXED = "RoPE layouts mixed"
REVERSED = "RoPE rotates the wrong way (rotate_half sign)"

TOL = dict(atol=1e-10, rtol=1e-8)


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _rope(submission, x, positions, **kwargs) -> torch.Tensor:
    out = submission.call("apply_rope", x, positions, **kwargs)
    return expect_tensor(out, shape=x.shape, dtype=x.dtype, name="apply_rope(x, positions)")


def _raises_value_error(submission, what: str, *args, **kwargs) -> None:
    with expect_value_error(what, f"{what} was accepted: raise ValueError"):
        submission.call(*args, **kwargs)


def test_inv_freq_values(submission):
    """rope_inv_freq gives theta_i = base^(-2i/d) (float32 by default, float64 on request)."""
    for d, base in ((64, 10000.0), (128, 500000.0), (6, 100.0)):
        out = submission.call("rope_inv_freq", d, base)
        expected = rope_inv_freq(d, base)
        expect_tensor(out, shape=expected.shape, dtype=torch.float32,
                      name=f"rope_inv_freq({d}, {base:g})")
        assert_close(out, expected, atol=0, rtol=1e-6, name=f"rope_inv_freq({d}, {base:g})",
                     hint="theta_i = base ** (-(2i) / d) for i = 0 .. d/2 - 1")
    out = submission.run("import torch\nresult = rope_inv_freq(32, 10000.0, dtype=torch.float64)")
    assert_close(out, rope_inv_freq(32, 10000.0, dtype=torch.float64), atol=0, rtol=1e-12,
                 name="rope_inv_freq(32, dtype=torch.float64)",
                 hint="compute in float64 and cast to `dtype`")


@pytest.mark.pitfall(REVERSED)
def test_rotate_half_values(submission):
    """rotate_half maps (x1, x2) to (-x2, x1) on the two halves of the last axis."""
    x = _randn(2, 3, 4, 8, seed=1)
    out = submission.call("rotate_half", x)
    if (isinstance(out, torch.Tensor) and out.shape == x.shape
            and torch.allclose(out, -rotate_half(x))):
        raise CheckFailure("rotate_half returns (x2, -x1): that is a quarter turn the wrong way, "
                           "and RoPE then rotates by -p*theta. It must be (-x2, x1)")
    assert_close(out, rotate_half(x), **TOL, name="rotate_half(x)",
                 hint="x1, x2 = x[..., :d/2], x[..., d/2:]; return cat(-x2, x1) on the last axis")


@pytest.mark.pitfall(MIXED)
def test_cos_sin_half_layout(submission):
    """rope_cos_sin(layout='half') for (T,) and (B, T) positions."""
    inv_freq = rope_inv_freq(12, dtype=torch.float64)
    positions = torch.tensor([0, 3, 7, 100, 2048])
    got = submission.call("rope_cos_sin", positions, inv_freq)
    expected = rope_cos_sin(positions, inv_freq, "half")
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("rope_cos_sin should return a tuple (cos, sin)")
    for name, g, e in zip(("cos", "sin"), got, expected):
        assert_close(g, e, **TOL, name=f"{name} for (T,) positions",
                     hint="half layout: the angles p * theta_i for i = 0..d/2-1, written twice, "
                          "[a_0 .. a_{d/2-1}, a_0 .. a_{d/2-1}] (torch.cat)")
    batched = torch.tensor([[0, 1, 2, 3], [5, 6, 7, 8]])
    got = submission.call("rope_cos_sin", batched, inv_freq, "half")
    expected = rope_cos_sin(batched, inv_freq, "half")
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("rope_cos_sin should return a tuple (cos, sin)")
    for name, g, e in zip(("cos", "sin"), got, expected):
        assert_close(g, e, **TOL, name=f"{name} for (B, T) positions",
                     hint="(B, T) positions give (B, 1, T, d): unsqueeze a head axis")


@pytest.mark.weight(2)
@pytest.mark.pitfall(REVERSED)
def test_apply_rope_matches_reference(submission):
    """apply_rope on (B, H, T, d) float64 input with positions 0..T-1 equals the reference."""
    x = _randn(2, 3, 7, 16, seed=2)
    positions = torch.arange(7)
    out = _rope(submission, x, positions)
    expected = apply_rope(x, positions)
    if torch.allclose(out, apply_rope(x, -positions), atol=1e-9):
        raise CheckFailure("your RoPE rotates every pair by -p*theta: check the sign in "
                           "rotate_half, (x1, x2) -> (-x2, x1)")
    assert_close(out, expected, **TOL, name="apply_rope(x, arange(T))",
                 hint="x * cos + rotate_half(x) * sin, with cos/sin of p * theta_i in the half "
                      "layout; with float64 x, use float64 speeds")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NO_OFFSET)
def test_arbitrary_positions_speeds_and_scaling(submission):
    """Given positions (not 0..T-1), another base, a custom inv_freq and attention_scaling."""
    x = _randn(1, 2, 5, 8, seed=3)
    positions = torch.tensor([9, 3, 100, 4000, 17])
    out = _rope(submission, x, positions, base=500.0)
    expected = apply_rope(x, positions, base=500.0)
    if (isinstance(out, torch.Tensor) and out.shape == expected.shape
            and torch.allclose(out.double(), expected, atol=1e-3)):
        hint = ("only rounding apart: at position 4000 the angle p * theta_i needs float64 "
                "when x is float64 (compute the speeds and angles in x's dtype)")
    else:
        hint = "rotate each token by *its* position from `positions`, not by its index"
    assert_close(out, expected, **TOL, name="apply_rope(x, [9, 3, 100, 4000, 17], base=500)",
                 hint=hint)
    inv_freq = rope_inv_freq(8, dtype=torch.float64) / torch.tensor([1.0, 2.0, 3.0, 4.0],
                                                                   dtype=torch.float64)
    out = _rope(submission, x, positions, inv_freq=inv_freq, attention_scaling=1.3)
    expected = apply_rope(x, positions, inv_freq=inv_freq, attention_scaling=1.3)
    assert_close(out, expected, **TOL, name="apply_rope(x, positions, inv_freq=..., "
                 "attention_scaling=1.3)",
                 hint="use the given inv_freq instead of the default, and multiply cos and sin "
                      "by attention_scaling")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NO_OFFSET)
@pytest.mark.property
def test_kv_cache_equals_full_sequence(submission):
    """Rotating the last tokens at positions P..T-1 equals rows P..T-1 of the full sequence."""
    x = _randn(2, 2, 12, 8, seed=4)
    full = _rope(submission, x, torch.arange(12))
    tail = submission.call("apply_rope", x[:, :, 9:].clone(), torch.arange(9, 12))
    if not (isinstance(tail, torch.Tensor) and tail.shape == (2, 2, 3, 8)
            and torch.allclose(tail, full[:, :, 9:], atol=1e-10)):
        raise CheckFailure(
            "with a KV cache holding 9 tokens, the next 3 tokens must be rotated for positions "
            "9, 10, 11: apply_rope(x[:, :, 9:], arange(9, 12)) should equal rows 9..11 of "
            "apply_rope(x, arange(12)). Use the positions you are given, never 0..T-1")
    for t in (0, 5, 11):  # one token at a time, as in generation
        step = submission.call("apply_rope", x[:, :, t:t + 1].clone(), torch.tensor([t]))
        assert_close(step, full[:, :, t:t + 1], **TOL, name=f"token {t} rotated alone",
                     hint="a single new token at position t gets the rotation of position t")


@pytest.mark.pitfall(NO_OFFSET)
def test_batched_positions_left_padding(submission):
    """(B, T) positions: every sequence of the batch starts at its own position."""
    x = _randn(2, 3, 4, 8, seed=5)
    positions = torch.tensor([[0, 0, 0, 1], [0, 1, 2, 3]])  # sequence 0 is left-padded
    out = _rope(submission, x, positions)
    assert_close(out, apply_rope(x, positions), **TOL, name="apply_rope with (B, T) positions",
                 hint="rope_cos_sin returns (B, 1, T, d) for (B, T) positions; it broadcasts "
                      "over the heads")


@pytest.mark.weight(2)
@pytest.mark.pitfall(MIXED)
def test_scores_depend_only_on_offset(submission):
    """<R_m q, R_n k> depends only on n - m, and equals q^T R_(n-m) k."""
    T, d = 10, 16
    q, k = _randn(1, 1, 1, d, seed=6), _randn(1, 1, 1, d, seed=7)
    positions = torch.arange(T)
    rq = _rope(submission, q.expand(1, 1, T, d).clone(), positions)[0, 0]  # row m: R_m q
    rk = _rope(submission, k.expand(1, 1, T, d).clone(), positions)[0, 0]  # row n: R_n k
    scores = rq @ rk.T  # scores[m, n] = <R_m q, R_n k>
    for offset in (-6, -1, 0, 2, 5):
        diagonal = torch.diagonal(scores, offset=offset)
        if not torch.allclose(diagonal, diagonal[:1].expand_as(diagonal), atol=1e-9):
            raise CheckFailure(
                f"<R_m q, R_n k> changes with m for the fixed offset n - m = {offset}: your map is "
                "not a rotation of the pairs (i, i + d/2). Do cos/sin use the half layout "
                "[a_0..a_{d/2-1}, a_0..a_{d/2-1}] together with rotate_half?")
    # q^T R_(n-m) k, from the reference: R_(n-m) k at position n - m.
    for offset in (-3, 4):
        expected = (q[0, 0, 0] * apply_rope(k, torch.tensor([offset]))[0, 0, 0]).sum()
        got = torch.diagonal(scores, offset=offset)[0]
        if not torch.allclose(got, expected, atol=1e-9):
            raise CheckFailure(f"<R_m q, R_(m+{offset}) k> should equal q^T R_{offset} k = "
                               f"{expected.item():.6f}, got {got.item():.6f}")


def test_rotation_keeps_norms(submission):
    """Every pair is rotated, so the norm of each vector is unchanged."""
    x = _randn(1, 4, 6, 32, seed=8)
    out = _rope(submission, x, torch.tensor([0, 1, 50, 999, 12345, 7]))
    assert_close(out.norm(dim=-1), x.norm(dim=-1), **TOL, name="the norm of each vector after RoPE",
                 hint="a rotation keeps lengths: (a cos - b sin, b cos + a sin)")


def test_float32_input(submission):
    """float32 input gives float32 output close to the reference."""
    x = _randn(2, 2, 6, 16, seed=9, dtype=torch.float32)
    positions = torch.arange(100, 106)
    out = _rope(submission, x, positions)
    assert_close(out, apply_rope(x, positions), atol=1e-5, rtol=1e-5,
                 name="apply_rope on float32 input", hint="return x's dtype")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_bad_arguments_raise(submission):
    """Odd d_head, an unknown layout, or positions of the wrong length raise ValueError."""
    x = _randn(1, 1, 3, 8, seed=10)
    _raises_value_error(submission, "an odd last dimension", "rotate_half", _randn(2, 5, seed=11))
    _raises_value_error(submission, "apply_rope with d_head = 7", "apply_rope",
                        _randn(1, 1, 3, 7, seed=12), torch.arange(3))
    _raises_value_error(submission, "layout='halves'", "apply_rope", x, torch.arange(3),
                        layout="halves")
    _raises_value_error(submission, "4 positions for 3 tokens", "apply_rope", x, torch.arange(4))
