"""Hidden checks for Exercise 3c: dynamic NTK and LongRoPE as Hugging Face runs them.

Values against :func:`toolkit.position.rope_inv_freq_dynamic_ntk` and
:func:`toolkit.position.longrope_inv_freq_and_attention_factor` (each equal to HF's
``ROPE_INIT_FUNCTIONS["dynamic"]`` / ``["longrope"]``, tested in tests/toolkit) on other
head sizes, bases, training lengths and scales than the notebook's, then one check per
classic mistake: plain RoPE up to ``L``, a base that grows with the length, the exponent
``d/(d-2)``, the short/long switch exactly at ``L``, and an attention factor
``sqrt(1 + ln s / ln L)`` that does not depend on the length and multiplies q and k.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import (
    apply_rope,
    longrope_attention_factor,
    longrope_inv_freq,
    longrope_inv_freq_and_attention_factor,
    rope_inv_freq,
    rope_inv_freq_dynamic_ntk,
)

pytestmark = pytest.mark.grade_cell("test_dynamic_longrope")

STATIC = "Dynamic NTK base not recomputed from the length (static NTK at s)"
BELOW = "Dynamic NTK recomputed below the training length"
EXPONENT = "Dynamic NTK base scaled without the exponent d/(d-2)"
LONG_FOR_SHORT = "LongRoPE long factors used for short inputs (switch on s, not on the length)"
AT_L = "LongRoPE switches to the long factors at seq_len = L"
NO_FACTOR = "LongRoPE attention factor left out"
LONG_ONLY = "LongRoPE attention factor applied to long inputs only"
ON_LOGITS = "LongRoPE attention factor is the logits' factor (square root left out)"

# (d_head, base, L_train, s)
DYNAMIC = [(64, 10000.0, 300, 4.0), (128, 500000.0, 1024, 8.0), (16, 10000.0, 96, 2.5),
           (32, 1000.0, 50, 1.0)]
F64 = torch.float64


def _call64(submission, fn: str, *args):
    """``fn(*args, dtype=torch.float64)`` in the student's kernel (a dtype cannot be sent)."""
    code = f"import torch\nresult = {fn}(*inputs['args'], dtype=torch.float64)\n"
    return submission.run(code, args=list(args))


def _dynamic(submission, d, base, T, L, s) -> torch.Tensor:
    out = _call64(submission, "rope_inv_freq_dynamic_ntk", d, base, T, L, s)
    return expect_tensor(out, shape=(d // 2,), dtype=F64,
                         name=f"rope_inv_freq_dynamic_ntk({d}, {base:g}, seq_len={T}, L={L}, "
                              f"s={s:g})")


def _factors(d: int, seed: int) -> tuple[list[float], list[float]]:
    g = torch.Generator().manual_seed(seed)
    short = (1 + 0.3 * torch.rand(d // 2, generator=g, dtype=F64)).tolist()
    long = (1 + 30 * torch.rand(d // 2, generator=g, dtype=F64)).sort().values.tolist()
    return short, long


# (d_head, base, L_original, s)
LONGROPE = [(96, 10000.0, 4096, 32.0), (32, 10000.0, 200, 4.0), (64, 500000.0, 1000, 8.0)]


def _longrope(submission, d, base, short, long, T, L, s):
    out = _call64(submission, "longrope_inv_freq_and_attention_factor", d, base, short, long, T,
                  L, s)
    name = f"longrope_inv_freq_and_attention_factor(d={d}, seq_len={T}, L={L}, s={s:g})"
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure(f"{name} should return a tuple (inv_freq, attention_factor)")
    inv_freq, factor = out
    expect_tensor(inv_freq, shape=(d // 2,), dtype=F64, name=f"{name}[0]")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)):
        raise CheckFailure(f"{name}[1] should be a Python float, got {type(factor).__name__}")
    return inv_freq, float(factor)


@pytest.mark.weight(2)
def test_dynamic_ntk_values(submission):
    """Dynamic NTK speeds at lengths below, at and beyond L (float32 default and float64)."""
    for d, base, L, s in DYNAMIC:
        # lengths just below L before the short ones: an error alone diagnoses nothing
        for T in (L, L + 1, 2 * L + 5, int(s * L), 9 * L, L - 3, L // 3, 1):
            expected = rope_inv_freq_dynamic_ntk(d, base, T, L, s, dtype=F64)
            assert_close(_dynamic(submission, d, base, T, L, s), expected, atol=0, rtol=1e-10,
                         name=f"dynamic NTK (d={d}, base={base:g}, seq_len={T}, L={L}, s={s:g})",
                         hint="T = max(seq_len, L); base' = base * (s T / L - (s - 1))^(d/(d-2))")
        out = submission.call("rope_inv_freq_dynamic_ntk", d, base, 3 * L, L, s)
        assert_close(out, rope_inv_freq_dynamic_ntk(d, base, 3 * L, L, s), atol=0, rtol=1e-5,
                     name=f"dynamic NTK, default dtype (d={d}, seq_len={3 * L}, L={L})",
                     hint="the default dtype is float32")


@pytest.mark.weight(1)
@pytest.mark.pitfall(BELOW)
def test_dynamic_ntk_is_plain_rope_up_to_L(submission):
    """Up to the training length dynamic NTK is plain RoPE."""
    for d, base, L, s in DYNAMIC:
        plain = rope_inv_freq(d, base, dtype=F64)
        for T in (L, L - 1, L - 7, L // 2, 2, 1):
            out = _dynamic(submission, d, base, T, L, s)
            if not torch.allclose(out, plain, rtol=1e-12, atol=0):
                raise CheckFailure(
                    f"seq_len = {T} <= L = {L} (s = {s:g}): dynamic NTK must give the plain "
                    "speeds base^(-2i/d); the base is recomputed only beyond L, from "
                    "T = max(seq_len, L)")


@pytest.mark.weight(1)
@pytest.mark.pitfall(STATIC)
def test_dynamic_ntk_base_grows_with_the_length(submission):
    """Beyond L the slowest pair slows down by exactly g = s T / L - (s - 1), growing with T."""
    for d, base, L, s in DYNAMIC:
        plain = rope_inv_freq(d, base, dtype=F64)
        previous = None
        for T in (L + 1, 2 * L, 5 * L, 11 * L):
            slow_down = (plain[-1] / _dynamic(submission, d, base, T, L, s)[-1]).item()
            g = s * T / L - (s - 1)
            if not math.isclose(slow_down, g, rel_tol=1e-9):
                raise CheckFailure(
                    f"d={d}, L={L}, s={s:g}, seq_len={T}: the slowest pair should be "
                    f"g = s T / L - (s - 1) = {g:.6g} times slower, got {slow_down:.6g}. The "
                    "NTK base follows the current length")
            if previous is not None and not slow_down > previous:
                raise CheckFailure("the dynamic NTK slow-down must grow with the length")
            previous = slow_down


@pytest.mark.weight(1)
@pytest.mark.pitfall(EXPONENT)
def test_dynamic_ntk_exponent(submission):
    """The middle pairs follow base' = base * g^(d/(d-2)): pair i slows by g^(2i/(d-2))."""
    for d, base, L, s in DYNAMIC[:3]:
        T = 3 * L + 7
        g = s * T / L - (s - 1)
        ratio = rope_inv_freq(d, base, dtype=F64) / _dynamic(submission, d, base, T, L, s)
        i = torch.arange(d // 2, dtype=F64)
        assert_close(ratio, g ** (2 * i / (d - 2)), atol=0, rtol=1e-9,
                     name=f"theta_i / theta'_i (d={d}, seq_len={T}, L={L}, s={s:g})",
                     hint="base' = base * g^(d/(d-2)), so pair i slows by g^(2i/(d-2)); use "
                          "ntk_base with the growth g in place of s")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_dynamic_ntk_rejects_bad_arguments(submission):
    """seq_len = 0, a scale below 1 and d_head = 2 raise ValueError."""
    for args, what in (((64, 10000.0, 0, 512, 2.0), "seq_len = 0"),
                       ((64, 10000.0, 100, 512, 0.5), "scale = 0.5"),
                       ((2, 10000.0, 100, 512, 2.0), "d_head = 2")):
        with expect_value_error(what, f"rope_inv_freq_dynamic_ntk accepted {what}"):
            submission.call("rope_inv_freq_dynamic_ntk", *args)


@pytest.mark.weight(2)
def test_longrope_values(submission):
    """LongRoPE speeds and attention factor at lengths around L (float64 and float32)."""
    for seed, (d, base, L, s) in enumerate(LONGROPE):
        short, long = _factors(d, seed)
        # a long input first: it tells a factor left out from one applied past L only
        for T in (L + 1, int(s * L), 1, L - 1, L):
            inv, factor = _longrope(submission, d, base, short, long, T, L, s)
            ref, ref_factor = longrope_inv_freq_and_attention_factor(d, base, short, long, T, L,
                                                                     s, dtype=F64)
            assert_close(inv, ref, atol=0, rtol=1e-10,
                         name=f"LongRoPE inv_freq (d={d}, seq_len={T}, L={L})",
                         hint="theta_i / lambda_i with long_factor when seq_len > L, else "
                              "short_factor")
            if not math.isclose(factor, ref_factor, rel_tol=1e-12):
                raise CheckFailure(f"LongRoPE attention factor (seq_len={T}, L={L}, s={s:g}) "
                                   f"should be {ref_factor:.6g}, got {factor:.6g}")
        inv, _ = submission.call("longrope_inv_freq_and_attention_factor", d, base, short, long,
                                 2 * L, L, s)
        assert_close(inv, longrope_inv_freq(d, base, long), atol=0, rtol=1e-6,
                     name=f"LongRoPE inv_freq, default dtype (d={d})",
                     hint="the default dtype is float32")


@pytest.mark.weight(1)
@pytest.mark.pitfall(LONG_FOR_SHORT)
def test_longrope_short_inputs_keep_short_factors(submission):
    """An input shorter than L uses short_factor, however large s is."""
    for seed, (d, base, L, s) in enumerate(LONGROPE):
        short, long = _factors(d, 10 + seed)
        for T in (1, L // 2):
            inv, _ = _longrope(submission, d, base, short, long, T, L, s)
            assert_close(inv, longrope_inv_freq(d, base, short, dtype=F64), atol=0, rtol=1e-10,
                         name=f"LongRoPE inv_freq for a short input (seq_len={T} < L={L}, "
                              f"s={s:g})",
                         hint="switch on the length, not on s: short_factor while seq_len <= L")


@pytest.mark.weight(1)
@pytest.mark.pitfall(AT_L)
def test_longrope_switches_just_past_L(submission):
    """seq_len = L still uses short_factor; seq_len = L + 1 uses long_factor."""
    for seed, (d, base, L, s) in enumerate(LONGROPE):
        short, long = _factors(d, 20 + seed)
        for T, factors, which in ((L, short, "short_factor"), (L + 1, long, "long_factor")):
            inv, _ = _longrope(submission, d, base, short, long, T, L, s)
            assert_close(inv, longrope_inv_freq(d, base, factors, dtype=F64), atol=0, rtol=1e-10,
                         name=f"LongRoPE inv_freq at seq_len={T} (L={L})",
                         hint=f"seq_len = {T} uses {which}: long only when seq_len > L")


@pytest.mark.weight(1)
@pytest.mark.pitfall(NO_FACTOR)
def test_longrope_attention_factor(submission):
    """The attention factor is sqrt(1 + ln s / ln L) for s > 1 and 1 for s = 1."""
    for d, base, L, s in LONGROPE:
        short, long = _factors(d, 0)
        _, factor = _longrope(submission, d, base, short, long, 2 * L, L, s)
        expected = math.sqrt(1 + math.log(s) / math.log(L))
        if not math.isclose(factor, expected, rel_tol=1e-12):
            raise CheckFailure(f"L={L}, s={s:g}: the attention factor is sqrt(1 + ln s / ln L) "
                               f"= {expected:.6g}, got {factor:.6g}")
        got = submission.call("longrope_attention_factor", s, L)
        if not isinstance(got, (int, float)) or not math.isclose(got, expected, rel_tol=1e-12):
            raise CheckFailure(f"longrope_attention_factor({s:g}, {L}) should be {expected:.6g}, "
                               f"got {got!r}")
    one = submission.call("longrope_attention_factor", 1.0, 4096)
    if one != 1.0:
        raise CheckFailure(f"longrope_attention_factor(1.0, 4096) should be 1.0, got {one!r}")


@pytest.mark.weight(1)
@pytest.mark.pitfall(LONG_ONLY)
def test_longrope_attention_factor_does_not_depend_on_length(submission):
    """Short inputs get the same attention factor as long ones (it depends on s alone)."""
    for d, base, L, s in LONGROPE:
        short, long = _factors(d, 1)
        expected = longrope_attention_factor(s, L)
        for T in (2 * L, 1, L):
            _, factor = _longrope(submission, d, base, short, long, T, L, s)
            if not math.isclose(factor, expected, rel_tol=1e-12):
                raise CheckFailure(
                    f"seq_len={T}, L={L}, s={s:g}: the attention factor should be "
                    f"sqrt(1 + ln s / ln L) = {expected:.6g}, got {factor:.6g}. HF computes it "
                    "once from s and applies it to short and long inputs alike")


@pytest.mark.weight(1)
@pytest.mark.pitfall(ON_LOGITS)
def test_longrope_factor_on_q_and_k_scales_logits_by_one_plus_ln_ratio(submission):
    """Passed to apply_rope, the factor multiplies q and k: the logits grow by 1 + ln s / ln L."""
    g = torch.Generator().manual_seed(7)
    for d, base, L, s in LONGROPE:
        short, long = _factors(d, 2)
        inv, factor = _longrope(submission, d, base, short, long, 3 * L, L, s)
        q = torch.randn(1, 2, 5, d, generator=g, dtype=F64)
        k = torch.randn(1, 2, 5, d, generator=g, dtype=F64)
        pos = torch.arange(3 * L - 5, 3 * L)
        plain = (apply_rope(q, pos, inv_freq=inv)
                 @ apply_rope(k, pos, inv_freq=inv).transpose(-1, -2))
        scaled = (apply_rope(q, pos, inv_freq=inv, attention_scaling=factor)
                  @ apply_rope(k, pos, inv_freq=inv, attention_scaling=factor).transpose(-1, -2))
        target = 1 + math.log(s) / math.log(L)
        assert_close(scaled, plain * target, atol=1e-9, rtol=1e-9,
                     name=f"logits with your attention factor on q and k (L={L}, s={s:g})",
                     hint="the factor multiplies cos and sin, so both q and k: the logits grow "
                          "by its square, which must be 1 + ln s / ln L")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_longrope_rejects_bad_arguments(submission):
    """Wrong factor counts, a factor <= 0, seq_len = 0 and s < 1 raise ValueError."""
    short, long = _factors(16, 3)
    with expect_value_error("7 factors for d_head = 16", "longrope_inv_freq accepted 7 factors "
                            "for d_head = 16: it needs d_head / 2 = 8"):
        submission.call("longrope_inv_freq", 16, 10000.0, short[:7])
    with expect_value_error("a factor of 0", "longrope_inv_freq accepted a factor of 0"):
        submission.call("longrope_inv_freq", 16, 10000.0, [0.0] + short[1:])
    for T, s, what in ((0, 2.0, "seq_len = 0"), (100, 0.5, "scale = 0.5")):
        with expect_value_error(what, f"longrope_inv_freq_and_attention_factor accepted {what}"):
            submission.call("longrope_inv_freq_and_attention_factor", 16, 10000.0, short, long,
                            T, 64, s)
