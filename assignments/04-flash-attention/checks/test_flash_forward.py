"""Hidden checks for Exercise 2: the tiled ``flash_attention_forward`` returning ``(out, lse)``.

References: dense float64 attention computed here (KV head ``h // g``, bottom-right causal
mask) and :func:`toolkit.flash.flash_attention_forward`. The saved logsumexp is also put
to the use it exists for: the toolkit's tiled backward must reproduce autograd's
gradients from the student's ``(out, lse)``.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, dense_attention, expect_tensor
from toolkit.flash import flash_attention_backward

pytestmark = pytest.mark.grade_cell("test_flash_forward")

RESCALE = "Online softmax without rescaling the accumulator"
MODULO = "Query head h reads KV head h % n_kv_heads instead of h // group"
TOP_LEFT = "Causal mask aligned top-left when N_q != N_k"
LSE = "Logsumexp not saved: m instead of m + log l"
SQUARE = "Materialises the N x N score matrix"

TOL = dict(atol=1e-9, rtol=1e-7)  # float64 inputs


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _call(submission, q, k, v, causal=False, block_q=8, block_k=8, **kwargs):
    label = (f"flash_attention_forward(q {tuple(q.shape)}, k {tuple(k.shape)}, causal={causal}, "
             f"block_q={block_q}, block_k={block_k})")
    got = submission.call("flash_attention_forward", q, k, v, causal, block_q, block_k, **kwargs)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure(f"{label} should return a tuple (out, lse)")
    out, lse = got
    B, H, N_q = q.shape[:3]
    expect_tensor(out, shape=(B, H, N_q, v.shape[-1]), name=f"out of {label}")
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != (B, H, N_q):
        raise CheckFailure(f"lse of {label} should be a ({B}, {H}, {N_q}) tensor")
    return out, lse, label


def _compare(out, lse, label, q, k, v, causal=False, scale=None, check_lse=True):
    ref_out, ref_lse, rowmax = dense_attention(q, k, v, causal, scale)
    if not torch.allclose(out.double(), ref_out, **TOL):
        if k.shape[1] not in (1, q.shape[1]) and torch.allclose(
                out.double(), dense_attention(q, k, v, causal, scale, modulo=True)[0], atol=1e-8):
            raise CheckFailure(f"{label}: query head h reads KV head h % H_kv. GQA groups "
                               "consecutive query heads: head h reads KV head h // (H / H_kv); "
                               "reshape q to (B, H_kv, g, N_q, d)")
        if causal and q.shape[2] != k.shape[2] and torch.allclose(
                out.double(), dense_attention(q, k, v, causal, scale, shift=0)[0], atol=1e-8):
            raise CheckFailure(f"{label}: the causal mask is aligned top-left (j <= i). With "
                               "N_q != N_k it is aligned bottom-right: j <= i + (N_k - N_q)")
        assert_close(out, ref_out, **TOL, name=f"out of {label}",
                     hint="when the running max grows, rescale acc by exp(m - m') exactly as l")
    if check_lse:
        _compare_lse(lse, ref_lse, rowmax, label)


def _compare_lse(lse, ref_lse, rowmax, label):
    lse = lse.double()
    finite = torch.isfinite(ref_lse)
    if not torch.equal(torch.isneginf(lse), ~finite):
        raise CheckFailure(f"lse of {label}: it must be -inf exactly for the rows with no "
                           "visible key, finite elsewhere")
    if torch.allclose(lse[finite], rowmax[finite], atol=1e-8):
        raise CheckFailure(f"lse of {label} is the row maximum m: the logsumexp is m + log(l)")
    assert_close(lse[finite], ref_lse[finite], **TOL, name=f"lse of {label}",
                 hint="L = m + log(l), the logsumexp of each row of scaled scores")


@pytest.mark.weight(2)
@pytest.mark.pitfall(RESCALE)
def test_non_causal_matches_dense(submission):
    """Non-causal attention, N not a multiple of the tiles, d_v != d: out and lse exact."""
    q, k, v = _randn(2, 3, 19, 8, seed=1), _randn(2, 3, 21, 8, seed=2), _randn(2, 3, 21, 5, seed=3)
    out, lse, label = _call(submission, q, k, v, False, 8, 4)
    _compare(out, lse, label, q, k, v)


@pytest.mark.weight(2)
@pytest.mark.pitfall(RESCALE)
def test_causal_matches_dense(submission):
    """Causal self-attention (N_q == N_k) with tiles of different sizes."""
    q, k, v = (_randn(1, 2, 22, 8, seed=s) for s in (4, 5, 6))
    for bq, bk in ((8, 8), (4, 16), (16, 4)):
        out, lse, label = _call(submission, q, k, v, True, bq, bk)
        _compare(out, lse, label, q, k, v, causal=True)


@pytest.mark.weight(2)
@pytest.mark.pitfall(MODULO)
def test_gqa_and_mqa(submission):
    """GQA (H = 6, H_kv = 2; head h reads KV head h // 3) and MQA (H_kv = 1)."""
    q = _randn(2, 6, 12, 8, seed=7)
    k, v = _randn(2, 2, 12, 8, seed=8), _randn(2, 2, 12, 8, seed=9)
    v[:, 1] += 3.0  # make the KV heads unmistakable
    for causal in (False, True):
        out, lse, label = _call(submission, q, k, v, causal, 4, 8)
        _compare(out, lse, label, q, k, v, causal)
    out, lse, label = _call(submission, q, k[:, :1], v[:, :1], True, 8, 8)
    _compare(out, lse, label, q, k[:, :1], v[:, :1], True)


@pytest.mark.weight(2)
@pytest.mark.pitfall(TOP_LEFT)
def test_rectangular_causal_is_bottom_right(submission):
    """N_q < N_k (new queries after cached keys) and N_q > N_k (rows that see nothing)."""
    q, k = _randn(1, 2, 6, 8, seed=10), _randn(1, 2, 20, 8, seed=11)
    v = _randn(1, 2, 20, 8, seed=12)
    out, lse, label = _call(submission, q, k, v, True, 4, 8)
    _compare(out, lse, label, q, k, v, causal=True)
    q2 = _randn(1, 2, 20, 8, seed=13)  # 20 queries, 6 keys: queries 0..13 see nothing
    out, lse, label = _call(submission, q2, k[:, :, :6], v[:, :, :6], True, 8, 4)
    if not torch.isfinite(out).all():
        raise CheckFailure(f"{label}: rows with no visible key gave NaN/inf; use m_safe = 0 where "
                           "the running max is still -inf, and divide by l only where l > 0 "
                           "(l_safe = where(l > 0, l, 1)): such a row has acc = l = 0")
    _compare(out, lse, label, q2, k[:, :, :6], v[:, :, :6], causal=True)
    if out[:, :, :14].abs().max() != 0:
        raise CheckFailure(f"{label}: queries 0..13 see no key: their output must be exactly 0")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LSE)
def test_lse_drives_the_backward(submission):
    """The saved lse lets the tiled backward recompute P = exp(S - L) and get exact gradients."""
    q, k = _randn(1, 4, 14, 8, seed=14), _randn(1, 2, 14, 8, seed=15)
    v = _randn(1, 2, 14, 8, seed=16)
    dout = _randn(1, 4, 14, 8, seed=17)
    out, lse, label = _call(submission, q, k, v, True, 8, 8)
    _compare(out, lse, label, q, k, v, causal=True)
    grads = flash_attention_backward(q, k, v, out.double(), lse.double(), dout, True, 8, 8)
    q_, k_, v_ = (t.clone().requires_grad_(True) for t in (q, k, v))
    g = 4 // 2
    s = q_ @ k_.repeat_interleave(g, 1).transpose(-2, -1) / math.sqrt(8)
    s = s.masked_fill(torch.ones(14, 14, dtype=torch.bool).triu(1), float("-inf"))
    (torch.softmax(s, -1) @ v_.repeat_interleave(g, 1)).backward(dout)
    for name, got, ref in zip("qkv", grads, (q_.grad, k_.grad, v_.grad), strict=True):
        assert_close(got, ref, atol=1e-8, rtol=1e-6, name=f"d{name} recomputed from your lse",
                     hint="the backward recomputes P = exp(S - lse): lse must be m + log(l)")


def test_custom_scale_and_float32(submission):
    """An explicit scale is used; float32 in gives float32 out and a float32 lse."""
    q, k, v = (_randn(1, 2, 10, 16, seed=s, dtype=torch.float32) for s in (18, 19, 20))
    out, lse, label = _call(submission, q, k, v, False, 4, 4, scale=0.3)
    if out.dtype != torch.float32 or lse.dtype != torch.float32:
        raise CheckFailure(f"{label}: float32 inputs should give float32 out and lse, got "
                           f"{out.dtype} and {lse.dtype}")
    ref_out, ref_lse, _ = dense_attention(q, k, v, scale=0.3)
    assert_close(out, ref_out.float(), atol=1e-5, rtol=1e-5, name=f"out of {label}, scale=0.3",
                 hint="multiply the scores by `scale` when it is given")
    assert_close(lse, ref_lse.float(), atol=1e-5, rtol=1e-5, name=f"lse of {label}, scale=0.3")


@pytest.mark.pitfall(SQUARE)
def test_never_builds_the_score_matrix(submission):
    """No N x N tensor is ever created: the largest scores are one block_q x block_k tile."""
    N = 48
    q, k, v = (_randn(1, 2, N, 8, seed=s) for s in (21, 22, 23))
    code = (
        "from toolkit.flash import PeakMemoryCounter as _Counter\n"
        "with _Counter() as _counter:\n"
        "    _out, _lse = flash_attention_forward(inputs['q'], inputs['k'], inputs['v'], True, "
        "16, 16)\n"
        f"result = (_out, _lse, any(len(s) >= 2 and s[-1] >= {N} and s[-2] >= 16 "
        "for s in _counter.shapes))\n"
    )
    got = submission.run(code, q=q, k=k, v=v)
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure("flash_attention_forward should return (out, lse)")
    out, lse, built = got
    _compare(out, lse, "flash_attention_forward(N=48, causal, 16 x 16 tiles)", q, k, v, True)
    if built:
        raise CheckFailure(f"a score-sized tensor with all {N} keys in a row was created: work "
                           "one block_k tile of keys at a time, never all N at once")
