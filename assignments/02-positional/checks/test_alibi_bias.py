"""Hidden checks for Exercise 4b: the ALiBi bias, causal and bidirectional, with a KV cache.

References from :func:`toolkit.position.alibi_bias`; head counts include non-powers of
two, so the slope rule is checked here too. The BLOOM key-only form ``m_h j`` must give
the same attention as the student's bias under the causal mask (softmax's shift
invariance).
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_value_error
from toolkit.position import alibi_bias, alibi_bias_key_only

pytestmark = pytest.mark.grade_cell("test_alibi_bias")

NON_POW2 = "ALiBi slopes wrong for non-power-of-two heads"
SIGN = "ALiBi bias with the wrong sign (rewards distance)"
CACHE = "ALiBi queries aligned to the start of the keys (KV cache ignored)"


def _bias(submission, *args, **kwargs) -> torch.Tensor:
    out = submission.call("alibi_bias", *args, **kwargs)
    expected = alibi_bias(*args, **kwargs)
    return expect_tensor_allow_inf(out, expected.shape)


def expect_tensor_allow_inf(out, shape) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):
        raise CheckFailure(f"alibi_bias should return a torch.Tensor, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise CheckFailure(f"alibi_bias has shape {tuple(out.shape)}, expected {tuple(shape)} "
                           "(n_heads, n_queries, n_keys)")
    if out.is_floating_point() and torch.isnan(out).any():
        raise CheckFailure("alibi_bias contains NaN")
    return out


def _same(out, expected, what, hint):
    blocked = torch.isinf(expected)
    if not torch.equal(torch.isinf(out) & (out < 0), blocked):
        raise CheckFailure(f"{what}: -inf should appear exactly where the key is in the future "
                           "(j > i, with i the query's absolute position)")
    assert_close(out.masked_fill(blocked, 0.0), expected.masked_fill(blocked, 0.0), atol=1e-6,
                 rtol=1e-6, name=what, hint=hint)


@pytest.mark.weight(2)
@pytest.mark.pitfall(SIGN)
def test_causal_matches_reference(submission):
    """Causal bias -m_h (i - j), -inf above the diagonal (8 and 12 heads)."""
    for h, t in ((8, 7), (12, 5)):
        out = _bias(submission, h, t)
        _same(out, alibi_bias(h, t), f"alibi_bias({h}, {t})",
              "-m_h * (i - j) for j <= i (never positive), -inf for j > i")


@pytest.mark.pitfall(NON_POW2)
def test_bidirectional(submission):
    """causal=False: -m_h |i - j|, symmetric, no -inf (6 heads)."""
    out = _bias(submission, 6, 5, causal=False)
    if torch.isinf(out).any():
        raise CheckFailure("causal=False must not mask anything: no -inf")
    _same(out, alibi_bias(6, 5, causal=False), "alibi_bias(6, 5, causal=False)",
          "-m_h * |i - j|")


@pytest.mark.weight(2)
@pytest.mark.pitfall(CACHE)
def test_kv_cache_alignment(submission):
    """With more keys than queries, query i sits at position n_keys - n_queries + i."""
    for h, tq, tk in ((4, 3, 10), (6, 1, 17)):
        out = _bias(submission, h, tq, n_keys=tk)
        _same(out, alibi_bias(h, tq, tk), f"alibi_bias({h}, {tq}, n_keys={tk})",
              f"the queries are the last {tq} of {tk} tokens: row i is position {tk - tq} + i, "
              "so its bias is -m_h * (position - j) and it sees every key up to its position")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NON_POW2)
def test_key_only_form_gives_the_same_attention(submission):
    """softmax(scores + bias) == softmax(scores + m_h j) on visible keys (5 heads, a cache)."""
    h, tq, tk = 5, 4, 9
    out = _bias(submission, h, tq, n_keys=tk)
    scores = torch.randn(h, tq, tk, generator=torch.Generator().manual_seed(0))
    future = torch.isinf(alibi_bias(h, tq, tk))
    key_only = alibi_bias_key_only(h, tk).expand(h, tq, tk).masked_fill(future, float("-inf"))
    got = torch.softmax(scores + out, dim=-1)
    expected = torch.softmax(scores + key_only, dim=-1)
    if torch.isnan(got).any():
        raise CheckFailure("softmax(scores + your bias) contains NaN: is some row fully -inf?")
    assert_close(got, expected, atol=1e-5, name="softmax(scores + alibi_bias)",
                 hint="in each row the bias must be m_h * j plus a constant, with the ALiBi slopes "
                      "of 5 heads (4 for 4 heads, then every other slope of the 8-head sequence)")


@pytest.mark.pitfall(SIGN)
def test_penalty_grows_with_distance(submission):
    """Within a causal row the bias is 0 on the diagonal and falls with distance."""
    out = _bias(submission, 3, 6)
    diag = torch.diagonal(out, dim1=-2, dim2=-1)
    if not torch.allclose(diag, torch.zeros_like(diag), atol=1e-7):
        raise CheckFailure("a query attending to itself (i = j) gets bias 0")
    row = out[:, -1, :]  # last query sees every key
    if not bool((row[:, 1:] > row[:, :-1]).all()):
        raise CheckFailure("the bias must become more negative the further back the key is: "
                           "-m_h (i - j) with m_h > 0")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_dtype_and_bad_sizes(submission):
    """float32 result; causal n_keys < n_queries raises ValueError."""
    out = submission.call("alibi_bias", 2, 3)
    if not isinstance(out, torch.Tensor) or out.dtype != torch.float32:
        raise CheckFailure(f"alibi_bias should return float32, got {getattr(out, 'dtype', out)}")
    with expect_value_error("n_keys < n_queries", "causal alibi_bias(2, 5, n_keys=3) was "
                            "accepted: queries align to the end of the keys, so n_keys must be "
                            ">= n_queries; raise ValueError"):
        submission.call("alibi_bias", 2, 5, 3)
