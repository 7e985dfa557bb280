"""Hidden checks for Exercise 3: the student's Triton kernel, through their wrapper.

``flash_attention_triton`` runs in the student's kernel. The grading kernel's environment
sets ``TRITON_INTERPRET=1``, so the kernel runs in Triton's CPU interpreter; shapes are
tiny (a few query tiles of 16) to keep that fast. Were the kernel compiled on a GPU
instead, the inputs are moved there first. References are dense float64 attention
computed here (KV head ``h // g``, bottom-right causal mask).
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, dense_attention, expect_tensor

pytestmark = pytest.mark.grade_cell("test_triton_kernel")

RESCALE = "Online softmax without rescaling the accumulator"
MODULO = "Query head h reads KV head h % n_kv_heads instead of h // group"
CAUSAL = "Causal mask off by one (j < i)"
LSE = "Logsumexp not saved: m instead of m + log l"
BASE2 = "Logsumexp left in base 2"

TOL = dict(atol=2e-5, rtol=2e-5)  # float32 kernel against float64 references

# Runs in the student's kernel: the interpreter takes CPU tensors, a compiled kernel CUDA ones.
LAUNCH = """
import os as _os
_dev = "cpu"
if _os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available():
    _dev = "cuda"
_q, _k, _v = (inputs[n].to(_dev) for n in ("q", "k", "v"))
result = flash_attention_triton(_q, _k, _v, inputs["causal"], inputs["block_m"],
                                inputs["block_n"], scale=inputs["scale"])
"""


def _randn(*shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _launch(submission, q, k, v, causal=False, block_m=16, block_n=16, scale=None,
            need_lse=False):
    """``(out, lse, label)`` from the student's wrapper. A check of ``out`` alone also takes
    a wrapper that returns only ``out`` (``lse`` is then None): forgetting ``lse`` costs
    the checks of ``lse`` (``need_lse``), not those of a right output."""
    label = (f"flash_attention_triton(q {tuple(q.shape)}, k {tuple(k.shape)}, causal={causal}, "
             f"block_m={block_m}, block_n={block_n}"
             + (f", scale={scale}" if scale is not None else "") + f") with {q.dtype}")
    got = submission.run(LAUNCH, q=q, k=k, v=v, causal=causal, block_m=block_m,
                         block_n=block_n, scale=scale)
    if isinstance(got, torch.Tensor) and not need_lse:
        got = (got, None)
    if not isinstance(got, tuple) or len(got) != 2:
        kind = f"a tuple of {len(got)}" if isinstance(got, tuple) else type(got).__name__
        raise CheckFailure(f"flash_attention_triton should return a tuple (out, lse), got {kind}"
                           + (": the backward pass needs lse, the natural-log logsumexp of "
                              "each row" if isinstance(got, torch.Tensor) else ""))
    out, lse = got
    expect_tensor(out, shape=q.shape, dtype=q.dtype, name=f"out of {label}")
    if not need_lse:
        return out, lse, label
    if not isinstance(lse, torch.Tensor) or tuple(lse.shape) != tuple(q.shape[:3]):
        raise CheckFailure(f"lse of {label} should be a {tuple(q.shape[:3])} tensor")
    if lse.dtype != torch.float32:
        raise CheckFailure(f"lse of {label} should be float32, got {lse.dtype}")
    return out, lse, label


def _compare_out(out, label, q, k, v, causal=False, scale=None, tol=TOL):
    ref = dense_attention(q, k, v, causal, scale)[0]
    if torch.allclose(out.double(), ref, **tol):
        return
    if k.shape[1] not in (1, q.shape[1]) and torch.allclose(
            out.double(), dense_attention(q, k, v, causal, scale, modulo=True)[0], **tol):
        raise CheckFailure(f"{label}: query head h reads KV head h % n_kv_heads. Consecutive query "
                           "heads share a KV head: kv_h = h // (n_heads // n_kv_heads)")
    if causal:
        shift = k.shape[2] - q.shape[2]
        strict = dense_attention(q, k, v, causal, scale, shift=shift - 1)[0]
        if torch.allclose(out.double(), strict, **tol):
            raise CheckFailure(f"{label}: your causal mask hides each query's own position "
                               "(j < i): a query sees keys j <= i + shift, itself included")
        if shift != 0 and torch.allclose(
                out.double(), dense_attention(q, k, v, causal, scale, shift=0)[0], **tol):
            raise CheckFailure(f"{label}: the causal mask is aligned top-left (j <= i). With "
                               "N_Q != N_K it is aligned bottom-right: shift = N_K - N_Q, and "
                               "query i sees keys j <= i + shift")
    base_e = scale if scale is not None else 1 / math.sqrt(q.shape[-1])
    if torch.allclose(out.double(), dense_attention(q, k, v, causal, base_e * math.log(2))[0],
                      **tol):
        raise CheckFailure(f"{label}: the softmax is computed with exp2 of scores scaled by "
                           "`scale` alone. exp(x) = exp2(x * log2(e)): multiply the scale by "
                           "log2(e) = 1.4427 before the kernel uses exp2")
    assert_close(out, ref.to(out.dtype), **tol, name=f"out of {label}",
                 hint="S = tl.dot(q, kT) * qk_scale; rescale acc by alpha = exp2(m - m') "
                      "before adding P V; mask keys past N_K")


def _compare_lse(lse, label, q, k, v, causal=False, scale=None):
    _, ref, rowmax = dense_attention(q, k, v, causal, scale)
    lse = lse.double()
    finite = torch.isfinite(ref)
    if not torch.equal(torch.isneginf(lse), ~finite):
        raise CheckFailure(f"lse of {label} must be -inf exactly for the rows with no visible key")
    lse, ref, rowmax = lse[finite], ref[finite], rowmax[finite]
    if torch.allclose(lse, rowmax, atol=1e-4):
        raise CheckFailure(f"lse of {label} is the row maximum m: store m ln 2 + ln(l), the "
                           "logsumexp, which the backward pass needs")
    if torch.allclose(lse, ref / math.log(2), atol=1e-4):
        raise CheckFailure(f"lse of {label} is in base 2 (log2 of the sum): convert the running "
                           "max back to the natural log, m * ln 2 + ln(l)")
    assert_close(lse, ref, **TOL, name=f"lse of {label}", hint="lse = m * ln(2) + ln(l)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(RESCALE)
def test_non_causal_mha(submission):
    """Multi-head, non-causal, N = 20 (the second tile sticks out): out matches dense attention."""
    q, k, v = (_randn(1, 2, 20, 16, seed=s) for s in (1, 2, 3))
    k[:, :, 17:] += 2.0  # a late key tile raises the running max
    out, _, label = _launch(submission, q, k, v)
    _compare_out(out, label, q, k, v)


@pytest.mark.weight(2)
@pytest.mark.pitfall(CAUSAL)
def test_causal_square(submission):
    """Causal self-attention: query i sees keys j <= i, its own position included."""
    q, k, v = (_randn(2, 2, 24, 16, seed=s) for s in (4, 5, 6))
    out, _, label = _launch(submission, q, k, v, causal=True)
    _compare_out(out, label, q, k, v, causal=True)


@pytest.mark.weight(2)
@pytest.mark.pitfall(MODULO)
def test_gqa_and_mqa(submission):
    """GQA (4 query heads on 2 KV heads: h // 2) and MQA (1 KV head), causal and not."""
    q = _randn(1, 4, 16, 16, seed=7)
    k, v = _randn(1, 2, 16, 16, seed=8), _randn(1, 2, 16, 16, seed=9)
    v[:, 1] += 5.0  # KV head 1's values are unmistakable
    out, _, label = _launch(submission, q, k, v)
    _compare_out(out, label, q, k, v)
    out, _, label = _launch(submission, q, k, v, causal=True)
    _compare_out(out, label, q, k, v, causal=True)
    out, _, label = _launch(submission, q, k[:, :1], v[:, :1], causal=True)
    _compare_out(out, label, q, k[:, :1], v[:, :1], causal=True)


@pytest.mark.pitfall(CAUSAL)
def test_rectangular_causal(submission):
    """N_q < N_k aligns the diagonal bottom-right; with N_q > N_k early rows see nothing (0)."""
    q, k = _randn(1, 2, 16, 16, seed=10), _randn(1, 2, 40, 16, seed=11)
    v = _randn(1, 2, 40, 16, seed=12)
    out, _, label = _launch(submission, q, k, v, causal=True)
    _compare_out(out, label, q, k, v, causal=True)
    q2 = _randn(1, 2, 40, 16, seed=13)  # 40 queries, 16 keys: queries 0..23 see nothing
    out, lse, label = _launch(submission, q2, k[:, :, :16], v[:, :, :16], causal=True,
                              need_lse=True)
    if not torch.isfinite(out).all():
        raise CheckFailure(f"{label}: rows with no visible key gave NaN/inf; use m_safe = 0 while "
                           "the running max is -inf, and divide by l only where l > 0 "
                           "(l_safe = tl.where(l > 0, l, 1.0)): such a row has acc = l = 0")
    _compare_out(out, label, q2, k[:, :, :16], v[:, :, :16], causal=True)
    _compare_lse(lse, label, q2, k[:, :, :16], v[:, :, :16], causal=True)


@pytest.mark.weight(2)
@pytest.mark.pitfall(LSE)
def test_lse_is_the_natural_logsumexp(submission):
    """lse = m ln 2 + ln l: the natural-log logsumexp of each row, for the backward pass."""
    q, k = _randn(1, 4, 20, 16, seed=14), _randn(1, 2, 20, 16, seed=15)
    v = _randn(1, 2, 20, 16, seed=16)
    for causal in (False, True):
        out, lse, label = _launch(submission, q, k, v, causal=causal, need_lse=True)
        _compare_out(out, label, q, k, v, causal=causal)
        _compare_lse(lse, label, q, k, v, causal=causal)


def test_fp16_inputs(submission):
    """float16 inputs: float16 output (accumulated in float32), float32 lse."""
    q, k, v = (_randn(1, 2, 24, 32, seed=s, dtype=torch.float16) for s in (17, 18, 19))
    out, lse, label = _launch(submission, q, k, v, causal=True, need_lse=True)
    _compare_out(out, label, q, k, v, causal=True, tol=dict(atol=3e-3, rtol=3e-3))


def test_custom_scale_and_tiles(submission):
    """An explicit scale, d = 32 and other tile sizes (block_m=32, block_n=16)."""
    q, k, v = (_randn(1, 2, 36, 32, seed=s) for s in (20, 21, 22))
    out, lse, label = _launch(submission, q, k, v, causal=True, block_m=32, block_n=16,
                              scale=0.2, need_lse=True)
    _compare_out(out, label, q, k, v, causal=True, scale=0.2)
    _compare_lse(lse, label, q, k, v, causal=True, scale=0.2)


@pytest.mark.structural
def test_bf16_refused_in_the_interpreter(submission):
    """In the interpreter, bfloat16 inputs raise a ValueError that names bfloat16."""
    code = (
        "import os as _os\n"
        "if _os.environ.get('TRITON_INTERPRET') != '1':\n"
        "    result = 'compiled'\n"
        "else:\n"
        "    try:\n"
        "        flash_attention_triton(inputs['q'], inputs['q'].clone(), inputs['q'].clone())\n"
        "        result = 'accepted'\n"
        "    except ValueError as _exc:\n"
        "        result = str(_exc)\n"
    )
    got = submission.run(code, q=_randn(1, 1, 16, 16, seed=23, dtype=torch.bfloat16))
    if got == "compiled":
        return
    if not isinstance(got, str) or "bfloat16" not in got:
        raise CheckFailure("bfloat16 inputs in the interpreter must raise ValueError naming "
                           f"bfloat16 (its tl.dot is silently wrong there); got {got!r}")
