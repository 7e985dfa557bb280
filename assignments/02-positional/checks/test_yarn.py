"""Hidden checks for Exercise 3b: YaRN (arXiv 2309.00071).

Values against :func:`toolkit.position.yarn_inv_freq_and_temperature` (which matches
Hugging Face's ``_compute_yarn_parameters``) for both ramp conventions, then the
defining properties: bands with more than ``beta_fast`` turns in the training context
are untouched, bands with fewer than ``beta_slow`` are divided by ``s``, and the
attention factor is ``0.1 ln s + 1``.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.position import rope_inv_freq, yarn_band_ratios, yarn_inv_freq_and_temperature

pytestmark = pytest.mark.grade_cell("test_yarn")

REVERSED = "YaRN ramp reversed (fast bands interpolated, slow bands untouched)"
TEMPERATURE = "YaRN temperature wrong (sqrt(1 + 0.1 ln s))"

# (d_head, base, scale, L_train)
CONFIGS = [
    (64, 10000.0, 4.0, 2048),
    (128, 500000.0, 8.0, 8192),
    (32, 10000.0, 2.0, 512),
    (128, 10000.0, 16.0, 4096),
    (64, 1000000.0, 32.0, 32768),
]


def _yarn(submission, *args, **kwargs):
    out = submission.call("yarn_inv_freq_and_temperature", *args, **kwargs)
    if not isinstance(out, tuple) or len(out) != 2:
        raise CheckFailure("yarn_inv_freq_and_temperature should return a tuple "
                           "(inv_freq, attention_factor)")
    inv_freq, factor = out
    expect_tensor(inv_freq, shape=(args[0] // 2,), name="inv_freq")
    if not isinstance(factor, (int, float)):
        raise CheckFailure(
            f"attention_factor should be a Python float, got {type(factor).__name__}")
    return inv_freq, float(factor)


def _compare(submission, *args, what, hint, **kwargs):
    inv_freq, _ = _yarn(submission, *args, **kwargs)
    expected, _ = yarn_inv_freq_and_temperature(*args, **kwargs)
    assert_close(inv_freq, expected, atol=0, rtol=2e-6, name=f"inv_freq ({what})", hint=hint)


def test_band_ratios(submission):
    """r_i = L theta_i / (2 pi), float64."""
    for d, base, _, L in CONFIGS[:3]:
        out = submission.call("yarn_band_ratios", d, base, L)
        expected = yarn_band_ratios(d, base, L)
        expect_tensor(out, shape=expected.shape, dtype=torch.float64,
                      name=f"yarn_band_ratios({d}, {base:g}, {L})")
        assert_close(out, expected, atol=0, rtol=1e-10,
                     name=f"yarn_band_ratios({d}, {base:g}, {L})",
                     hint="the number of turns pair i makes over L tokens: L * theta_i / (2 pi)")


@pytest.mark.weight(3)
@pytest.mark.pitfall(REVERSED)
def test_index_ramp_matches_reference(submission):
    """Default ramp (HF / reference code, truncate=True) for several models."""
    for d, base, scale, L in CONFIGS:
        _compare(submission, d, base, scale, L, what=f"d={d}, base={base:g}, s={scale:g}, L={L}",
                 hint="gamma_i = 1 - clip((i - lo) / (hi - lo), 0, 1) with "
                      "lo = floor(i(beta_fast)), hi = ceil(i(beta_slow)), lo >= 0, hi <= d - 1; "
                      "then theta' = (1 - gamma) theta / s + gamma theta")


@pytest.mark.pitfall(REVERSED)
def test_untruncated_ramp_and_custom_betas(submission):
    """truncate=False keeps the fractional ends; beta_fast / beta_slow are respected."""
    _compare(submission, 64, 10000.0, 4.0, 2048, truncate=False, what="truncate=False",
             hint="with truncate=False, lo and hi are the fractional indices i(beta_fast), "
                  "i(beta_slow), not rounded")
    _compare(submission, 128, 10000.0, 8.0, 4096, 16, 2, what="beta_fast=16, beta_slow=2",
             hint="use the given beta_fast and beta_slow to place the ramp")


@pytest.mark.pitfall(REVERSED)
def test_ratio_ramp_matches_reference(submission):
    """ramp='ratio' (the paper): gamma = clip((r - beta_slow) / (beta_fast - beta_slow), 0, 1)."""
    for d, base, scale, L in CONFIGS[:3]:
        _compare(submission, d, base, scale, L, ramp="ratio", what=f"ramp='ratio', d={d}",
                 hint="gamma_i = clip((r_i - beta_slow) / (beta_fast - beta_slow), 0, 1), linear "
                      "in r itself")


@pytest.mark.weight(3)
@pytest.mark.pitfall(REVERSED)
def test_fast_bands_untouched_slow_bands_interpolated(submission):
    """r > beta_fast: theta unchanged; r < beta_slow: theta / s; monotone in between."""
    for ramp in ("index", "ratio"):
        for d, base, scale, L in CONFIGS[:4]:
            inv_freq, _ = _yarn(submission, d, base, scale, L, ramp=ramp)
            theta = rope_inv_freq(d, base, dtype=torch.float64)
            r = yarn_band_ratios(d, base, L)
            ratio = inv_freq.to(torch.float64) / theta  # 1 = untouched, 1/s = interpolated
            fast, slow = r > 32, r < 1
            where = f"(ramp={ramp!r}, d={d}, s={scale:g}, L={L})"
            if not torch.allclose(ratio[fast], torch.ones_like(ratio[fast]), atol=1e-6):
                raise CheckFailure(
                    f"{where}: the high-frequency pairs (r_i > beta_fast = 32 turns in the "
                    "training context) must keep theta_i unchanged; yours were rescaled. Is the "
                    "ramp reversed? gamma = 1 keeps a band, gamma = 0 interpolates it")
            if not torch.allclose(ratio[slow], torch.full_like(ratio[slow], 1 / scale), atol=1e-6):
                raise CheckFailure(
                    f"{where}: the low-frequency pairs (r_i < beta_slow = 1 turn) must be fully "
                    f"interpolated, theta_i / s (ratio {1 / scale:.4g})")
            if not bool((ratio[1:] <= ratio[:-1] + 1e-6).all()):
                raise CheckFailure(f"{where}: theta'_i / theta_i should fall from 1 to 1/s as the "
                                   "pairs get slower")


@pytest.mark.weight(2)
@pytest.mark.pitfall(TEMPERATURE)
def test_attention_factor(submission):
    """attention_factor = sqrt(1/t) = 0.1 ln s + 1 (1 for s = 1)."""
    for scale in (1.0, 2.0, 4.0, 16.0, 40.0):
        _, factor = _yarn(submission, 64, 10000.0, scale, 2048)
        expected = 0.1 * math.log(scale) + 1.0
        if not math.isclose(factor, expected, rel_tol=1e-9):
            squared = "" if scale == 1 else (
                " (sqrt(1 + 0.1 ln s) is a circulating misreading)"
                if math.isclose(factor, math.sqrt(1 + 0.1 * math.log(scale)), rel_tol=1e-9) else "")
            raise CheckFailure(f"s = {scale:g}: the attention factor should be 0.1 ln s + 1 = "
                               f"{expected:.6f}, got {factor:.6f}{squared}. It multiplies q and k, "
                               "so the logits scale by its square, 1/t")


def test_scale_one_changes_nothing(submission):
    """s = 1: plain RoPE speeds and factor 1."""
    inv_freq, factor = _yarn(submission, 64, 10000.0, 1.0, 2048)
    assert_close(inv_freq, rope_inv_freq(64, 10000.0), atol=0, rtol=1e-6, name="inv_freq at s = 1",
                 hint="with s = 1, theta/s = theta whatever gamma is")
    if factor != 1.0:
        raise CheckFailure(f"at s = 1 the attention factor is 1, got {factor}")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_returns_float32_and_float(submission):
    """inv_freq is float32, the attention factor a Python float."""
    inv_freq, _ = _yarn(submission, 64, 10000.0, 4.0, 2048)
    expect_tensor(inv_freq, shape=(32,), dtype=torch.float32, name="inv_freq")
    out = submission.call("yarn_inv_freq_and_temperature", 64, 10000.0, 4.0, 2048)
    if not isinstance(out[1], float):
        raise CheckFailure(f"attention_factor should be a float, got {type(out[1]).__name__}")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_bad_arguments_raise(submission):
    """A scale below 1, beta_slow >= beta_fast or an unknown ramp raise ValueError."""
    bad = [((64, 10000.0, 0.5, 2048), {}, "scale = 0.5"),
           ((64, 10000.0, 4.0, 2048, 1, 32), {}, "beta_fast = 1 < beta_slow = 32"),
           ((64, 10000.0, 4.0, 2048), {"ramp": "log"}, "ramp='log'")]
    for args, kwargs, what in bad:
        with expect_value_error(what, f"{what} was accepted: raise ValueError"):
            submission.call("yarn_inv_freq_and_temperature", *args, **kwargs)
