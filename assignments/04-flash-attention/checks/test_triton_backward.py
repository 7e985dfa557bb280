"""Hidden checks for Exercise 4: the student's Triton backward kernel, through their wrapper.

``flash_attention_backward_triton(q, k, v, out, lse, dout, ...)`` runs in the student's
kernel, in Triton's interpreter while grading (``TRITON_INTERPRET=1``), on tiny shapes.
``out`` and ``lse`` come from the toolkit's tiled forward computed here, so this exercise
is graded on its own, whatever part 2 or 3 returned. References are float64 autograd
gradients through dense attention (KV head ``h // g``, bottom-right causal mask); the
named mistakes get their own messages:

* no ``D``: ``dS = P * dP`` (``dV`` still right, ``dQ`` and ``dK`` wrong);
* GQA not summed: ``dK``, ``dV`` of one query head of each group instead of the sum;
* no causal mask in the backward: gradient reaches keys no query with a gradient sees;
* ``dQ`` written with ``tl.store``: each key tile overwrites the others' share.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.flash import flash_attention_forward

pytestmark = pytest.mark.grade_cell("test_triton_backward")

NO_DELTA = "Backward without the D = rowsum(dO * O) term"
GROUP_SUM = "dK/dV not summed over the query heads of a GQA group"
BACKWARD_MASK = "Causal mask missing in the backward pass"

TOL = dict(atol=5e-5, rtol=5e-5)  # float32 kernel against float64 references

# Runs in the student's kernel: the interpreter takes CPU tensors, a compiled kernel CUDA ones.
LAUNCH = """
import os as _os
_dev = "cpu"
if _os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available():
    _dev = "cuda"
_args = [inputs[n].to(_dev) for n in ("q", "k", "v", "out", "lse", "dout")]
result = tuple(t.cpu() for t in flash_attention_backward_triton(
    *_args, inputs["causal"], inputs["block_m"], inputs["block_n"], scale=inputs["scale"]))
"""


def _randn(*shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _problem(B, H, H_kv, N_q, N_k, d, seed, dtype=torch.float32):
    q, dout = (_randn(B, H, N_q, d, seed=seed + i, dtype=dtype) for i in (0, 1))
    k, v = (_randn(B, H_kv, N_k, d, seed=seed + i, dtype=dtype) for i in (2, 3))
    return q, k, v, dout


def _launch(submission, q, k, v, dout, causal=False, block_m=16, block_n=16, scale=None):
    out, lse = flash_attention_forward(q, k, v, causal, 16, 16, scale=scale)
    label = (f"flash_attention_backward_triton(q {tuple(q.shape)}, k {tuple(k.shape)}, "
             f"causal={causal}, block_m={block_m}, block_n={block_n}"
             + (f", scale={scale}" if scale is not None else "") + f") with {q.dtype}")
    got = submission.run(LAUNCH, q=q, k=k, v=v, out=out, lse=lse.float(), dout=dout,
                         causal=causal, block_m=block_m, block_n=block_n, scale=scale)
    if not isinstance(got, tuple) or len(got) != 3:
        raise CheckFailure(f"{label} should return a tuple (dq, dk, dv)")
    for name, g, x in zip(("dq", "dk", "dv"), got, (q, k, v)):
        expect_tensor(g, shape=x.shape, dtype=x.dtype, name=f"{name} of {label}")
    return got, label


def _backward_terms(q, k, v, dout, causal=False, scale=None, use_delta=True):
    """float64 ``(p, ds, q, k, dout, scale)`` of the backward, K and V repeated per query head.

    ``use_delta=False`` drops D from dS = P * (dP - D).
    """
    q, k, v, dout = (t.double() for t in (q, k, v, dout))
    g = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(g, 1), v.repeat_interleave(g, 1)  # head h reads KV head h // g
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale
    if causal:
        N_q, N_k = s.shape[-2:]
        s = s.masked_fill(torch.arange(N_k)[None, :] > torch.arange(N_q)[:, None] + N_k - N_q,
                          float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)  # rows with no visible key: P = 0
    out = p @ v
    dp = dout @ v.transpose(-2, -1)  # dP = dO V^T
    delta = (dout * out).sum(-1, keepdim=True) if use_delta else 0.0  # D = rowsum(dO * O)
    ds = p * (dp - delta)  # dS = P * (dP - D)
    return p, ds, q, k, dout, scale


def _gradients(q, k, v, dout, causal=False, scale=None, use_delta=True, heads=False):
    """float64 (dq, dk, dv) from the formulas of the backward, with named deviations.

    ``use_delta=False`` drops D from dS = P * (dP - D); ``heads=True`` returns dk, dv per
    query head, ``(B, H, N_k, d)``, before the sum over each group.
    """
    g = q.shape[1] // k.shape[1]
    p, ds, q, k, dout, scale = _backward_terms(q, k, v, dout, causal, scale, use_delta)
    dq = ds @ k * scale
    dk, dv = ds.transpose(-2, -1) @ q * scale, p.transpose(-2, -1) @ dout
    if not heads:
        B, H, N_k, d = dk.shape
        dk, dv = (t.view(B, H // g, g, N_k, d).sum(2) for t in (dk, dv))
    return dq, dk, dv


def _dq_tile_shares(q, k, v, dout, causal, scale, block_n):
    """float64 dq split by key tile, ``(n_tiles, B, H, N_q, d)``: share j = dS[:, tile j] K_j scale.

    The shares sum to dq; a kernel that writes dq with ``tl.store`` keeps one of them per row.
    """
    _, ds, _, k, _, scale = _backward_terms(q, k, v, dout, causal, scale)
    return torch.stack([ds[..., j:j + block_n] @ k[..., j:j + block_n, :] * scale
                        for j in range(0, k.shape[-2], block_n)])


def _compare(got, label, q, k, v, dout, causal=False, scale=None, tol=TOL, block_n=16):
    want = _gradients(q, k, v, dout, causal, scale)
    if all(torch.allclose(x.double(), w, **tol) for x, w in zip(got, want)):
        return
    if all(torch.allclose(x.double(), w, **tol) for x, w in zip(got[1:], want[1:])):
        shares = _dq_tile_shares(q, k, v, dout, causal, scale, block_n)
        one_share = torch.isclose(got[0].double()[None], shares, **tol).all(-1).any(0)
        if one_share.all():  # every row of dq holds a single key tile's share
            raise CheckFailure(
                f"{label}: dk and dv are right, but each row of dq holds the share of one "
                f"tile of {block_n} keys only, not the sum over all key tiles. Every key tile's "
                "program adds to the same rows of dq: write with tl.atomic_add (into float32 "
                "zeros), not tl.store, which keeps whichever tile wrote last")
    no_delta = _gradients(q, k, v, dout, causal, scale, use_delta=False)
    if torch.allclose(got[2].double(), want[2], **tol) and all(
            torch.allclose(x.double(), w, **tol) for x, w in zip(got[:2], no_delta[:2])):
        raise CheckFailure(f"{label}: dq and dk are what dS = P * dP gives. The softmax's "
                           "Jacobian needs dS = P * (dP - D), with D = rowsum(dO * O), one "
                           "number per query row")
    g = q.shape[1] // k.shape[1]
    if g > 1:
        per_head = _gradients(q, k, v, dout, causal, scale, heads=True)
        for which in range(g):  # dk, dv of one head of each group instead of the sum
            one = [t[:, which::g] for t in per_head[1:]]
            if all(torch.allclose(x.double(), w, **tol) for x, w in zip(got[1:], one)):
                raise CheckFailure(
                    f"{label}: dk and dv hold the gradient of query head {which} of each group "
                    f"only. A KV head serves {g} query heads; its gradient is the sum over all "
                    "of them: keep one pair of accumulators across the loop over the group")
    for name, x, w in zip(("dq", "dk", "dv"), got, want):
        assert_close(x, w.to(x.dtype), **tol, name=f"{name} of {label}",
                     hint="P = exp(S - L) masked like the forward, dV = P^T dO, dP = dO V^T, "
                          "dS = P * (dP - D), dK = dS^T Q scale, dQ = dS K scale")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NO_DELTA)
def test_non_causal_mha(submission):
    """Multi-head, non-causal, N = 20 (tiles stick out): dq, dk, dv match autograd."""
    q, k, v, dout = _problem(1, 2, 2, 20, 20, 16, seed=1)
    got, label = _launch(submission, q, k, v, dout)
    _compare(got, label, q, k, v, dout)


@pytest.mark.weight(2)
@pytest.mark.pitfall(BACKWARD_MASK)
def test_causal_square(submission):
    """Causal self-attention, two heads, N = 24: gradients match autograd."""
    q, k, v, dout = _problem(2, 2, 2, 24, 24, 16, seed=5)
    got, label = _launch(submission, q, k, v, dout, causal=True)
    _compare(got, label, q, k, v, dout, causal=True)


@pytest.mark.weight(2)
@pytest.mark.pitfall(BACKWARD_MASK)
def test_no_gradient_reaches_future_keys(submission):
    """Causal: with a gradient on the first 4 queries only, keys 4.. get dk = dv = 0 exactly."""
    q, k, v, dout = _problem(1, 2, 2, 32, 32, 16, seed=9)
    dout[:, :, 4:] = 0.0
    got, label = _launch(submission, q, k, v, dout, causal=True)
    leak = max(t[:, :, 4:].abs().max().item() for t in got[1:])
    if leak > 0:
        raise CheckFailure(f"{label}: keys 4 and later get a gradient ({leak:.2g}) although only "
                           "queries 0..3 have one, and they cannot see those keys. Mask the "
                           "recomputed P in the backward exactly as in the forward: key j is "
                           "visible to query i iff j <= i + (N_k - N_q)")
    _compare(got, label, q, k, v, dout, causal=True)


@pytest.mark.weight(2)
@pytest.mark.pitfall(GROUP_SUM)
def test_gqa_and_mqa(submission):
    """GQA (4 query heads on 2 KV heads) and MQA (1 KV head): dk, dv summed over each group."""
    q, k, v, dout = _problem(1, 4, 2, 16, 16, 16, seed=13)
    got, label = _launch(submission, q, k, v, dout)
    _compare(got, label, q, k, v, dout)
    got, label = _launch(submission, q, k[:, :1], v[:, :1], dout, causal=True)
    _compare(got, label, q, k[:, :1], v[:, :1], dout, causal=True)


@pytest.mark.pitfall(BACKWARD_MASK)
def test_rectangular_causal(submission):
    """N_q < N_k aligns the diagonal bottom-right; with N_q > N_k early rows get dq = 0."""
    q, k, v, dout = _problem(1, 2, 1, 16, 40, 16, seed=17)
    got, label = _launch(submission, q, k, v, dout, causal=True)
    _compare(got, label, q, k, v, dout, causal=True)
    q, k, v, dout = _problem(1, 2, 2, 40, 16, 16, seed=21)  # queries 0..23 see nothing
    got, label = _launch(submission, q, k, v, dout, causal=True)
    if got[0][:, :, :24].abs().max() != 0:
        raise CheckFailure(f"{label}: queries 0..23 see no key, so their dq must be 0")
    _compare(got, label, q, k, v, dout, causal=True)


def test_fp16_inputs(submission):
    """float16 inputs: float16 gradients, accumulated in float32."""
    q, k, v, dout = _problem(1, 2, 2, 24, 24, 32, seed=25, dtype=torch.float16)
    got, label = _launch(submission, q, k, v, dout, causal=True)
    _compare(got, label, q, k, v, dout, causal=True, tol=dict(atol=5e-3, rtol=5e-3))


def test_custom_scale_and_tiles(submission):
    """An explicit scale, d = 32 and other tile sizes (block_m=32, block_n=16)."""
    q, k, v, dout = _problem(1, 4, 2, 36, 36, 32, seed=29)
    got, label = _launch(submission, q, k, v, dout, causal=True, block_m=32, block_n=16,
                         scale=0.2)
    _compare(got, label, q, k, v, dout, causal=True, scale=0.2, block_n=16)

