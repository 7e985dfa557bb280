"""Hidden checks for Exercise 1: ``LayerNorm`` and ``RMSNorm``.

The student's modules are built in their kernel, loaded with weights made here and
compared with :mod:`toolkit.norm` (itself tested against ``torch.nn.LayerNorm`` and
``torch.nn.RMSNorm``). Inputs are float64 where exact agreement is expected. Tiny inputs
with a large ``eps`` tell ``sqrt(var + eps)`` from ``sqrt(var) + eps``.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.norm import LayerNorm, RMSNorm

pytestmark = pytest.mark.grade_cell("test_norms")

EPS = "eps added outside the square root"
AXIS = "Normalised over the batch or sequence axis instead of the features"
UNBIASED = "LayerNorm with the unbiased variance (divides by d - 1)"
TOL = dict(atol=1e-10, rtol=1e-8)

# Runs in the student's kernel: build the module in a dtype, load our weights, apply it.
RUN = """
import torch as _torch

_m = {cls}(*inputs["args"]).to(inputs["x"].dtype)
_load_exercise_state(_m, inputs["state"])
with _torch.no_grad():
    result = _m(inputs["x"])
"""


def _randn(*shape, seed, dtype=torch.float64, scale=3.0, shift=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=dtype) * scale + shift


def _reference(cls, *args, seed=0, dtype=torch.float64):
    module = cls(*args).to(dtype)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(_randn(*p.shape, seed=seed + p.numel(), dtype=dtype, scale=0.5))
    return module


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _apply(submission, name, args, module, x):
    return submission.run(RUN.format(cls=name), args=list(args), state=_state(module), x=x)


def _differs(a, b) -> bool:
    return not (isinstance(a, torch.Tensor) and a.shape == b.shape
                and torch.allclose(a.to(b.dtype), b, atol=1e-8, rtol=1e-6))


# ---------------------------------------------------------------- LayerNorm


@pytest.mark.weight(2)
@pytest.mark.pitfall(UNBIASED)
def test_layernorm_matches_reference(submission):
    """LayerNorm(12) with loaded gamma and beta equals the reference on (B, T, d) float64."""
    ref = _reference(LayerNorm, 12, seed=1)
    x = _randn(3, 5, 12, seed=2)
    got = _apply(submission, "LayerNorm", [12], ref, x)
    expect_tensor(got, shape=x.shape, dtype=torch.float64, name="LayerNorm(x)")
    with torch.no_grad():
        expected = ref(x)
        mean = x.mean(-1, keepdim=True)
        unbiased = (x - mean) / (x.var(-1, keepdim=True) + ref.eps).sqrt() * ref.weight + ref.bias
    if not _differs(got, unbiased):
        raise CheckFailure("your LayerNorm divides the variance by d - 1 (Tensor.var's default): "
                           "the biased variance divides by d, as torch.nn.LayerNorm does")
    assert_close(got, expected, **TOL, name="LayerNorm(x)",
                 hint="(x - mean) / sqrt(biased var + eps) * weight + bias, over the last axis")


@pytest.mark.pitfall(UNBIASED)
def test_layernorm_two_features(submission):
    """With d = 2 and eps = 0, LayerNorm([0, 2]) is exactly [-1, 1] (biased variance 1)."""
    ref = LayerNorm(2, eps=0.0).double()
    got = _apply(submission, "LayerNorm", [2, 0.0], ref, torch.tensor([[0.0, 2.0]],
                                                                      dtype=torch.float64))
    if isinstance(got, torch.Tensor) and torch.allclose(got, torch.tensor(
            [[-0.5**0.5, 0.5**0.5]], dtype=torch.float64)):
        raise CheckFailure("LayerNorm([0, 2]) gave [-0.707, 0.707]: that is the unbiased "
                           "variance (2). Divide the squared deviations by d, not d - 1")
    assert_close(got, torch.tensor([[-1.0, 1.0]], dtype=torch.float64), **TOL,
                 name="LayerNorm(2, eps=0)([0, 2])")


@pytest.mark.pitfall(EPS)
def test_layernorm_tiny_inputs_large_eps(submission):
    """Tiny activations with eps = 0.1: eps goes inside the square root."""
    ref = _reference(LayerNorm, 8, 0.1, seed=3)
    x = _randn(4, 8, seed=4, scale=1e-3, shift=1e-3)
    got = _apply(submission, "LayerNorm", [8, 0.1], ref, x)
    with torch.no_grad():
        expected = ref(x)
    assert_close(got, expected, **TOL, name="LayerNorm(8, eps=0.1) on inputs of size 1e-3",
                 hint="(x - mean) / sqrt(var + eps): eps added to the variance, inside the root")


@pytest.mark.pitfall(AXIS)
def test_layernorm_is_per_token(submission):
    """A token's output depends on its own features only, not on the batch or the sequence."""
    ref = _reference(LayerNorm, 6, seed=5)
    x = _randn(4, 5, 6, seed=6)
    full = _apply(submission, "LayerNorm", [6], ref, x)
    alone = _apply(submission, "LayerNorm", [6], ref, x[2:3, 1:2].clone())
    expect_tensor(full, shape=x.shape, name="LayerNorm on a (4, 5, 6) batch")
    if _differs(alone, full[2:3, 1:2]):
        raise CheckFailure("one token's LayerNorm output changed when the other sequences and "
                           "positions were removed: normalise over the last axis (the features) "
                           "only, never over the batch or the sequence")
    with torch.no_grad():
        assert_close(full, ref(x), **TOL, name="LayerNorm on a (4, 5, 6) batch")


def test_layernorm_without_bias(submission):
    """LayerNorm(d, bias=False) has no beta and still normalises."""
    ref = _reference(LayerNorm, 10, 1e-5, False, seed=7)
    x = _randn(3, 10, seed=8)
    got = _apply(submission, "LayerNorm", [10, 1e-5, False], ref, x)
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="LayerNorm(10, bias=False)(x)",
                     hint="with bias=False, self.bias is None and nothing is added")


@pytest.mark.structural
def test_layernorm_parameters(submission):
    """LayerNorm's parameters are weight (ones) and bias (zeros), each (d,)."""
    got = submission.module_state("LayerNorm", init={"d_model": 7})
    if not isinstance(got, dict) or sorted(got) != ["bias", "weight"]:
        raise CheckFailure(f"LayerNorm(7) should have parameters ['bias', 'weight'], got "
                           f"{sorted(got) if isinstance(got, dict) else got}")
    assert_close(got["weight"], torch.ones(7), name="the initial weight (gamma)")
    assert_close(got["bias"], torch.zeros(7), name="the initial bias (beta)")


# ---------------------------------------------------------------- RMSNorm


@pytest.mark.weight(2)
@pytest.mark.pitfall(EPS)
def test_rmsnorm_matches_reference(submission):
    """RMSNorm(12) with a loaded gamma equals the reference on (B, T, d) float64."""
    ref = _reference(RMSNorm, 12, seed=9)
    x = _randn(3, 5, 12, seed=10)
    got = _apply(submission, "RMSNorm", [12], ref, x)
    expect_tensor(got, shape=x.shape, dtype=torch.float64, name="RMSNorm(x)")
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="RMSNorm(x)",
                     hint="x / sqrt(mean(x^2) over the last axis + eps) * weight; a float64 "
                          "input stays float64 (only fp16 and bf16 go through float32)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(EPS)
def test_rmsnorm_tiny_inputs_large_eps(submission):
    """Tiny activations with eps = 0.01: eps goes inside the square root."""
    ref = _reference(RMSNorm, 8, 1e-2, seed=11)
    x = _randn(4, 8, seed=12, scale=1e-3, shift=0.0)
    got = _apply(submission, "RMSNorm", [8, 1e-2], ref, x)
    with torch.no_grad():
        expected = ref(x)
        outside = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + 1e-2) * ref.weight
    if not _differs(got, outside):
        raise CheckFailure("your RMSNorm computes x / (sqrt(mean(x^2)) + eps): eps belongs inside "
                           "the square root, x / sqrt(mean(x^2) + eps). On inputs of size 1e-3 "
                           "with eps = 0.01 the two differ by a factor of about nine")
    assert_close(got, expected, **TOL, name="RMSNorm(8, eps=0.01) on inputs of size 1e-3")


@pytest.mark.pitfall(AXIS)
def test_rmsnorm_is_per_token(submission):
    """A token's RMSNorm output depends on its own features only."""
    ref = _reference(RMSNorm, 6, seed=13)
    x = _randn(3, 7, 6, seed=14)
    full = _apply(submission, "RMSNorm", [6], ref, x)
    alone = _apply(submission, "RMSNorm", [6], ref, x[1:2, 4:5].clone())
    expect_tensor(full, shape=x.shape, name="RMSNorm on a (3, 7, 6) batch")
    if _differs(alone, full[1:2, 4:5]):
        raise CheckFailure("one token's RMSNorm output changed when the other tokens were removed: "
                           "take mean(x^2) over the last axis (dim=-1) only")
    with torch.no_grad():
        assert_close(full, ref(x), **TOL, name="RMSNorm on a (3, 7, 6) batch")


def test_rmsnorm_float32(submission):
    """float32 in, float32 out, equal to the reference."""
    ref = _reference(RMSNorm, 16, seed=15, dtype=torch.float32)
    x = _randn(2, 3, 16, seed=16, dtype=torch.float32)
    got = _apply(submission, "RMSNorm", [16], ref, x)
    with torch.no_grad():
        assert_close(got, ref(x), atol=1e-5, rtol=1e-5, name="RMSNorm on float32 input")


def test_rmsnorm_half_precision(submission):
    """fp16 inputs of size 300: the statistic is computed in float32 (300^2 overflows fp16)."""
    ref = RMSNorm(8).half()
    x = torch.full((2, 8), 300.0, dtype=torch.float16)
    x[1] = torch.linspace(-400, 400, 8, dtype=torch.float16)
    got = _apply(submission, "RMSNorm", [8], ref, x)
    expect_tensor(got, shape=x.shape, dtype=torch.float16, name="RMSNorm on fp16 input")
    exact = x.double() / x.double().pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    if not torch.allclose(got.double(), exact, atol=2e-3, rtol=2e-3):
        raise CheckFailure("RMSNorm on fp16 inputs of size 300 is wrong: x^2 overflows fp16 "
                           "(largest value 65504). Compute mean(x^2) in float32 "
                           "(x.float()) for fp16/bf16 inputs, then cast the result back")


@pytest.mark.structural
def test_rmsnorm_parameters(submission):
    """RMSNorm's only parameter is weight (ones), shape (d,)."""
    got = submission.module_state("RMSNorm", init={"d_model": 5})
    if not isinstance(got, dict) or sorted(got) != ["weight"]:
        raise CheckFailure(f"RMSNorm(5) should have one parameter 'weight', got "
                           f"{sorted(got) if isinstance(got, dict) else got}")
    assert_close(got["weight"], torch.ones(5), name="the initial weight (gamma)")
