"""Hidden checks for Exercise 6: differential attention (arXiv 2410.05258).

References come from :mod:`toolkit.differential`. The student's ``DifferentialAttention``
is loaded with the weights of the reference, whose RMSNorm weight is randomised and whose
four lambda vectors are drawn large enough that ``lambda`` is far from ``lambda_init``,
so that every piece (the re-parameterisation, the sub-head pairing, the per-head norm and
the ``(1 - lambda_init)`` scale) changes the answer. A wrong answer is compared with the
classic mistakes, computed here, to say which one it looks like.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.attention import attention_weights
from toolkit.differential import DifferentialAttention, differential_attention, lambda_init_fn

pytestmark = pytest.mark.grade_cell("test_differential")

LAMBDA = "Lambda not re-parameterised (exp(lq1.lk1) - exp(lq2.lk2) + lambda_init)"
NORM_AXIS = "Per-head RMSNorm over the wrong axis"
NO_SCALE = "Output not scaled by (1 - lambda_init)"
SWAPPED = "The two maps' halves swapped (A2 - lambda A1)"
LAYOUT = "Sub-heads split as two blocks instead of pairs (2h, 2h + 1)"

TOL = dict(atol=1e-9, rtol=1e-7)  # the functional form, in float64
TOL32 = dict(atol=2e-5, rtol=1e-4)  # the module, float32 as the class makes it


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _x(*shape, seed: int) -> torch.Tensor:
    return _randn(*shape, seed=seed, dtype=torch.float32)


def _reference(init: dict, seed: int) -> DifferentialAttention:
    torch.manual_seed(seed)
    ref = DifferentialAttention(**init).eval()
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():
        for p in (ref.lambda_q1, ref.lambda_k1, ref.lambda_q2, ref.lambda_k2):
            p.copy_(torch.randn(p.shape, generator=g) * 0.45)
        ref.subln.weight.uniform_(0.5, 1.5, generator=g)
    return ref


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _variants(ref: DifferentialAttention, x, mask=None, causal=True) -> dict[str, torch.Tensor]:
    """What the classic mistakes compute, by their pitfall: to name the one that matches."""
    B, T, D = x.shape
    H, d = ref.n_heads, ref.d_head
    with torch.no_grad():
        q = ref.q_proj(x).view(B, T, H, 2, d).permute(3, 0, 2, 1, 4)
        k = ref.k_proj(x).view(B, T, H, 2, d).permute(3, 0, 2, 1, 4)
        qb = ref.q_proj(x).view(B, T, 2, H, d).permute(2, 0, 3, 1, 4)
        kb = ref.k_proj(x).view(B, T, 2, H, d).permute(2, 0, 3, 1, 4)
        v = ref.v_proj(x).view(B, T, H, 2 * d).transpose(1, 2)
        m = torch.ones(T, T, dtype=torch.bool).tril() if causal else None
        if mask is not None:
            m = mask if m is None else m & mask
        lam = ref.lambda_full()
        s = 1.0 - ref.lambda_init

        def finish(o, norm_dim=-1, scale=s):
            rms = torch.rsqrt(o.pow(2).mean(norm_dim, keepdim=True) + 1e-5)
            o = o * rms * ref.subln.weight * scale
            return ref.out_proj(o.transpose(1, 2).reshape(B, T, D))

        return {
            LAMBDA: finish(differential_attention(q[0], k[0], q[1], k[1], v, ref.lambda_init, m)),
            NORM_AXIS: finish(differential_attention(q[0], k[0], q[1], k[1], v, lam, m), -2),
            NO_SCALE: finish(differential_attention(q[0], k[0], q[1], k[1], v, lam, m), scale=1.0),
            SWAPPED: finish(differential_attention(q[1], k[1], q[0], k[0], v, lam, m)),
            LAYOUT: finish(differential_attention(qb[0], kb[0], qb[1], kb[1], v, lam, m)),
        }


HINTS = {
    LAMBDA: "lambda must be exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init, built from the four "
            "vectors, not lambda_init alone",
    NORM_AXIS: "RMSNorm normalises each head's own 2d features (the last axis), not the time axis",
    NO_SCALE: "multiply the normalised heads by the constant (1 - lambda_init)",
    SWAPPED: "the first map (sub-head 2h: Q1, K1) is kept, the second (2h + 1: Q2, K2) is "
             "subtracted with weight lambda; yours is the other way round",
    LAYOUT: "head h pairs sub-heads 2h and 2h + 1 (view(B, T, H, 2, d)); you split the "
            "projection into two blocks of H sub-heads",
}


def _compare(got, ref, x, name, **kwargs):
    with torch.no_grad():
        expected = ref(x, **kwargs)
    if torch.allclose(got, expected, **TOL32):
        return
    hint = ("sub-heads 2h / 2h + 1, lambda_full(), self.subln on each head, x (1 - lambda_init), "
            "then out_proj")
    for pitfall, wrong in _variants(ref, x, kwargs.get("mask"), kwargs.get("causal", True)).items():
        if torch.allclose(got, wrong, **TOL32):
            hint = HINTS[pitfall]
            break
    assert_close(got, expected, **TOL32, name=name, hint=hint)


def _forward(submission, init, ref, x, **kwargs):
    got = submission.module("DifferentialAttention", x, init=init, state=_state(ref), **kwargs)
    return expect_tensor(got, shape=x.shape, dtype=torch.float32,
                         name=f"DifferentialAttention{tuple(init.values())}(x)")


# -- lambda_init_fn and differential_attention ----------------------------------------------


def test_lambda_init_schedule(submission):
    """lambda_init(l) = 0.8 - 0.6 exp(-0.3 (l - 1)) for l = 1, 2, ... (1-based)."""
    for layer in (1, 2, 5, 12, 40):
        got = submission.call("lambda_init_fn", layer)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise CheckFailure(
                f"lambda_init_fn({layer}) should be a float, got {type(got).__name__}")
        expected = lambda_init_fn(layer)
        if abs(got - expected) > 1e-12:
            shifted = abs(got - lambda_init_fn(layer + 1)) < 1e-12
            off = ("; that is the value of layer l + 1: the layer number starts at 1, so the "
                   "exponent is -0.3 (l - 1)") if shifted else ""
            raise CheckFailure(f"lambda_init_fn({layer}) = {got!r}, expected {expected!r}{off}")


@pytest.mark.structural
def test_lambda_init_rejects_layer_zero(submission):
    """Layer numbers start at 1: layer 0 raises ValueError."""
    with expect_value_error("layer = 0", "lambda_init_fn(0) was accepted: raise ValueError"):
        submission.call("lambda_init_fn", 0)


@pytest.mark.weight(2)
def test_functional_matches_reference(submission):
    """differential_attention equals (A1 - lam A2) V, with masks, scale and T_q != T_k."""
    cases = [
        ((2, 3, 5, 4), 5, 6, 0.37, None, None),
        ((1, 2, 3, 8), 7, 5, -0.2, "causal", None),
        ((2, 2, 6, 4), 6, 3, "per-head", "padding", 0.3),
    ]
    for seed, (shape, t_k, d_v, lam, mask_kind, scale) in enumerate(cases):
        B, H, T_q, d = shape
        q1, q2 = _randn(*shape, seed=10 * seed), _randn(*shape, seed=10 * seed + 1)
        k1, k2 = _randn(B, H, t_k, d, seed=10 * seed + 2), _randn(B, H, t_k, d, seed=10 * seed + 3)
        v = _randn(B, H, t_k, d_v, seed=10 * seed + 4)
        if lam == "per-head":
            lam = torch.tensor([0.1, 0.6], dtype=torch.float64).view(1, H, 1, 1)
        mask = None
        if mask_kind == "causal":
            mask = torch.ones(T_q, t_k, dtype=torch.bool).tril(t_k - T_q)
        elif mask_kind == "padding":
            mask = torch.ones(B, 1, 1, t_k, dtype=torch.bool)
            mask[1, ..., 4:] = False
        got = submission.call("differential_attention", q1, k1, q2, k2, v, lam, mask, scale)
        got = expect_tensor(got, shape=(B, H, T_q, d_v), name="differential_attention(...)")
        expected = differential_attention(q1, k1, q2, k2, v, lam, mask, scale)
        hint = "(softmax(q1 k1^T * scale) - lam * softmax(q2 k2^T * scale)) @ v"
        if torch.allclose(got, differential_attention(q2, k2, q1, k1, v, lam, mask, scale), **TOL):
            hint = "the first map is kept and the second subtracted: A1 - lam A2, not A2 - lam A1"
        elif mask is not None and torch.allclose(
                got, differential_attention(q1, k1, q2, k2, v, lam, None, scale), **TOL):
            hint = "apply the mask to both maps before their softmaxes"
        assert_close(got, expected, **TOL, name=f"differential_attention case {seed + 1}",
                     hint=hint)


def test_functional_limits(submission):
    """lam = 0 is ordinary attention; identical maps give (1 - lam) x ordinary attention."""
    q, k, v = _randn(1, 2, 4, 6, seed=50), _randn(1, 2, 5, 6, seed=51), _randn(1, 2, 5, 3, seed=52)
    plain = attention_weights(q, k) @ v
    got = expect_tensor(submission.call("differential_attention", q, k, q, k, v, 0.25),
                        shape=plain.shape, name="differential_attention with identical maps")
    assert_close(got, 0.75 * plain, **TOL, name="differential_attention(q, k, q, k, v, 0.25)",
                 hint="identical maps cancel to (1 - lam) times ordinary attention")
    q2, k2 = _randn(1, 2, 4, 6, seed=53), _randn(1, 2, 5, 6, seed=54)
    got = expect_tensor(submission.call("differential_attention", q, k, q2, k2, v, 0.0),
                        shape=plain.shape, name="differential_attention with lam = 0")
    assert_close(got, plain, **TOL, name="differential_attention(..., lam=0)",
                 hint="lam = 0 leaves the first map: softmax(q1 k1^T / sqrt(d)) v")


# -- DifferentialAttention ----------------------------------------------------------------------


SMALL = {"d_model": 16, "n_heads": 2, "layer": 1}
DEEP = {"d_model": 24, "n_heads": 3, "layer": 6}


@pytest.mark.weight(2)
@pytest.mark.pitfall(LAMBDA)
def test_lambda_full(submission):
    """lambda_full() = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init, a 0-d tensor."""
    for init, seed in ((SMALL, 1), (DEEP, 2)):
        ref = _reference(init, seed)
        got = submission.module("DifferentialAttention", init=init, state=_state(ref),
                                method="lambda_full")
        got = expect_tensor(got, shape=(), name=f"lambda_full() of layer {init['layer']}")
        with torch.no_grad():
            expected = ref.lambda_full()
        hint = "exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init"
        with torch.no_grad():
            no_exp = float(ref.lambda_q1 @ ref.lambda_k1 - ref.lambda_q2 @ ref.lambda_k2)
        if abs(float(got) - ref.lambda_init) < 1e-6:
            hint = HINTS[LAMBDA]
        elif abs(float(got) - (no_exp + ref.lambda_init)) < 1e-6:
            hint = "take the exponential of each dot product: exp(lq1 . lk1) - exp(lq2 . lk2)"
        assert_close(got, expected, **TOL32, name=f"lambda_full() of layer {init['layer']}",
                     hint=hint)


@pytest.mark.weight(3)
@pytest.mark.pitfall(SWAPPED)
def test_forward_matches_reference(submission):
    """forward equals the reference (causal), for 2 and 3 heads and layers 1 and 6."""
    for init, seed in ((SMALL, 3), (DEEP, 4)):
        ref = _reference(init, seed)
        x = _x(2, 7, init["d_model"], seed=seed + 20)
        got = _forward(submission, init, ref, x)
        _compare(got, ref, x, f"DifferentialAttention({init}) on x")


@pytest.mark.pitfall(NORM_AXIS)
def test_per_head_norm(submission):
    """Each head is RMS-normalised over its own 2d features (checked with causal=False)."""
    ref = _reference(SMALL, 5)
    x = _x(1, 6, SMALL["d_model"], seed=25)
    got = _forward(submission, SMALL, ref, x, causal=False)
    _compare(got, ref, x, "DifferentialAttention(x, causal=False)", causal=False)


@pytest.mark.pitfall(NO_SCALE)
def test_output_scale(submission):
    """The normalised heads are multiplied by (1 - lambda_init), the constant of the layer."""
    init = {"d_model": 16, "n_heads": 2, "layer": 9}  # lambda_init = 0.745: scale 0.255
    ref = _reference(init, 6)
    x = _x(2, 5, 16, seed=26)
    got = _forward(submission, init, ref, x)
    _compare(got, ref, x, "DifferentialAttention at layer 9")


@pytest.mark.pitfall(LAYOUT)
def test_extra_mask(submission):
    """An extra key-padding mask is ANDed with the causal mask, in both maps."""
    ref = _reference(DEEP, 7)
    x = _x(2, 6, DEEP["d_model"], seed=27)
    mask = torch.ones(2, 1, 1, 6, dtype=torch.bool)
    mask[0, ..., 4:] = False
    got = _forward(submission, DEEP, ref, x, mask=mask)
    _compare(got, ref, x, "DifferentialAttention(x, mask=padding)", mask=mask)


@pytest.mark.property
def test_causal(submission):
    """With causal=True the outputs at positions < 4 ignore tokens 4 and later."""
    ref = _reference(SMALL, 8)
    x = _x(1, 7, 16, seed=28)
    x2 = x.clone()
    x2[:, 4:] += 1.0
    a, b = _forward(submission, SMALL, ref, x), _forward(submission, SMALL, ref, x2)
    if not torch.allclose(a[:, :4], b[:, :4], atol=1e-6):
        raise CheckFailure("changing tokens 4.. changed the outputs at positions 0..3: the future "
                           "leaks; AND causal_mask(T) into the mask when causal=True")


def test_gradient_reaches_lambda_vectors(submission):
    """A loss on the output reaches all four lambda vectors (lambda is built with torch ops)."""
    ref = _reference(SMALL, 9).double()
    code = (
        "_m = DifferentialAttention(**inputs['init']).double()\n"
        "_m.load_state_dict(inputs['state'])\n"
        "with torch.enable_grad():\n"
        "    _m(inputs['x']).pow(2).sum().backward()\n"
        "result = [None if p.grad is None else p.grad.detach().clone() for p in "
        "(_m.lambda_q1, _m.lambda_k1, _m.lambda_q2, _m.lambda_k2)]\n"
    )
    got = submission.run(code, init=SMALL, state=_state(ref), x=_randn(2, 5, 16, seed=29))
    x = _randn(2, 5, 16, seed=29)
    ref.zero_grad()
    ref(x).pow(2).sum().backward()
    names = ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2")
    if not isinstance(got, (list, tuple)) or len(got) != 4:
        raise CheckFailure("could not read the gradients of the four lambda vectors")
    for name, grad in zip(names, got):
        if grad is None:
            raise CheckFailure(f"{name} gets no gradient: build lambda from the four vectors with "
                               "torch operations (no float(), no .item())")
        assert_close(grad, getattr(ref, name).grad, atol=1e-7, rtol=1e-6,
                     name=f"the gradient of {name}", hint=HINTS[LAMBDA])
    if math.isnan(float(sum(g.sum() for g in got))):
        raise CheckFailure("the gradients of the lambda vectors contain NaN")
