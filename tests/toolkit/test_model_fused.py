"""The fused norms and activations of the capstone's fast backends equal the teaching ones.

Values and gradients (input and parameters) against :mod:`toolkit.norm` and
:mod:`toolkit.ffn`, in float32 and float64, plus the half-precision paths' dtypes.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.ffn import ACTIVATIONS, FeedForward, SwiGLU
from toolkit.models.fused import (
    FUSED_ACTIVATIONS,
    FusedFeedForward,
    FusedLayerNorm,
    FusedRMSNorm,
    FusedSwiGLU,
)
from toolkit.norm import LayerNorm, RMSNorm


def _randomise(*modules, seed=0):
    """Give the twins the same non-trivial parameters (gains far from 1, biases non-zero)."""
    g = torch.Generator().manual_seed(seed)
    for name, p in modules[0].named_parameters():
        value = torch.randn(p.shape, generator=g, dtype=p.dtype)
        for m in modules:
            m.get_parameter(name).data.copy_(value)


def _value_and_grads(module, x, g):
    x = x.clone().requires_grad_()
    module.zero_grad()
    y = module(x)
    y.backward(g)
    return y.detach(), x.grad, {n: p.grad.clone() for n, p in module.named_parameters()}


def assert_twins_agree(teaching, fused, x, atol):
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(1), dtype=x.dtype)
    y0, dx0, dp0 = _value_and_grads(teaching, x, g)
    y1, dx1, dp1 = _value_and_grads(fused, x, g)
    assert y1.dtype == y0.dtype
    torch.testing.assert_close(y1, y0, atol=atol, rtol=atol)
    torch.testing.assert_close(dx1, dx0, atol=atol, rtol=atol)
    assert dp1.keys() == dp0.keys()
    for name in dp0:
        torch.testing.assert_close(dp1[name], dp0[name], atol=atol, rtol=atol, msg=name)


@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.float64, 1e-6)])
@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_equals_teaching(dtype, atol, bias):
    teaching = LayerNorm(24, eps=1e-5, bias=bias).to(dtype)
    fused = FusedLayerNorm(24, eps=1e-5, bias=bias).to(dtype)
    _randomise(teaching, fused)
    x = 3 * torch.randn(3, 7, 24, dtype=dtype) + 1
    assert_twins_agree(teaching, fused, x, atol)


# The teaching RMSNorm, like Hugging Face's, takes its statistic in float32 even for a
# float64 input; the fused one keeps float64: they agree to float32 rounding there.
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.float64, 1e-6)])
def test_rms_norm_equals_teaching(dtype, atol):
    teaching, fused = RMSNorm(24, eps=1e-5).to(dtype), FusedRMSNorm(24, eps=1e-5).to(dtype)
    _randomise(teaching, fused)
    x = 3 * torch.randn(3, 7, 24, dtype=dtype) + 1
    assert_twins_agree(teaching, fused, x, atol)


def test_rms_norm_backward_is_the_derivative():
    """The hand-written backward against finite differences, in float64."""
    from toolkit.models.fused import _RMSNormFunction

    x = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    w = torch.randn(6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: _RMSNormFunction.apply(a, b, 1e-5), (x, w))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rms_norm_half_precision_follows_teaching(dtype):
    teaching, fused = RMSNorm(16), FusedRMSNorm(16)  # float32 gains, 16-bit input
    _randomise(teaching, fused)
    x = torch.randn(2, 5, 16).to(dtype)
    with torch.no_grad():
        y0, y1 = teaching(x), fused(x)
    assert y1.dtype == y0.dtype
    torch.testing.assert_close(y1, y0, atol=1e-2, rtol=1e-2)


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_fused_activation_equals_teaching(name):
    x = torch.linspace(-6, 6, 601, dtype=torch.float64, requires_grad=True)
    y0 = ACTIVATIONS[name](x)
    y1 = FUSED_ACTIVATIONS[name](x)
    torch.testing.assert_close(y1, y0, atol=1e-10, rtol=1e-10)
    (g0,) = torch.autograd.grad(y0.sum(), x)
    (g1,) = torch.autograd.grad(y1.sum(), x)
    torch.testing.assert_close(g1, g0, atol=1e-10, rtol=1e-10)


@pytest.mark.parametrize("activation", ["gelu_tanh", "gelu", "relu"])
def test_feed_forward_equals_teaching(activation):
    teaching = FeedForward(16, 40, activation=activation).double()
    fused = FusedFeedForward(16, 40, activation=activation).double()
    fused.load_state_dict(teaching.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    assert_twins_agree(teaching, fused, x, 1e-10)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype,atol", [(torch.float32, 2e-5), (torch.float64, 1e-10)])
def test_swiglu_equals_teaching(dtype, atol, bias):
    teaching = SwiGLU(16, 40, bias=bias).to(dtype)
    fused = FusedSwiGLU(16, 40, bias=bias).to(dtype)
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():  # non-zero biases
        for p in teaching.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=g, dtype=dtype))
    fused.load_state_dict(teaching.state_dict())
    x = 2 * torch.randn(2, 5, 16, dtype=dtype)
    assert_twins_agree(teaching, fused, x, atol)


def test_silu_gate_backward_is_the_derivative():
    """The hand-written backward of silu(g) * u against finite differences, in float64."""
    from toolkit.models.fused import _SiLUGateFunction

    g = 3 * torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    u = torch.randn(4, 7, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(_SiLUGateFunction.apply, (g, u))


def test_swiglu_input_backward_is_the_derivative():
    """The hand-written backward of silu(x W_g^T) * (x W_u^T) (one dL/dx tensor) in float64,
    with a batch axis as the model has: against autograd's derivative of the formula, and
    against central differences along random directions. (Not ``gradcheck``: the backward
    overwrites what it saved, so one forward runs backward once; see the next test.)"""
    from toolkit.models.fused import _SwiGLUInputFunction

    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 5, dtype=torch.float64, generator=g).requires_grad_()
    w_gate, w_up = (torch.randn(7, 5, dtype=torch.float64, generator=g).requires_grad_()
                    for _ in range(2))
    r = torch.randn(2, 3, 7, dtype=torch.float64, generator=g)  # L = sum(h r)
    inputs = (x, w_gate, w_up)
    got = torch.autograd.grad((_SwiGLUInputFunction.apply(*inputs) * r).sum(), inputs)
    formula = (F.silu(x @ w_gate.t()) * (x @ w_up.t()) * r).sum()
    for mine, want in zip(got, torch.autograd.grad(formula, inputs)):
        torch.testing.assert_close(mine, want, rtol=1e-12, atol=1e-12)

    def loss(*args):
        with torch.no_grad():
            return float((_SwiGLUInputFunction.apply(*args) * r).sum())

    eps = 1e-6
    for i, grad in enumerate(got):
        for _ in range(3):
            v = torch.randn(inputs[i].shape, dtype=torch.float64, generator=g)
            plus = [t.detach() + eps * v if j == i else t.detach() for j, t in enumerate(inputs)]
            minus = [t.detach() - eps * v if j == i else t.detach() for j, t in enumerate(inputs)]
            numeric = (loss(*plus) - loss(*minus)) / (2 * eps)
            assert abs(numeric - float((grad * v).sum())) < 1e-7 * max(1.0, abs(numeric))


def test_swiglu_input_backward_runs_once_per_forward():
    """Its backward writes the gradients over the products it saved: a second backward of
    the same graph raises PyTorch's in-place error instead of using overwritten values."""
    from toolkit.models.fused import _SwiGLUInputFunction

    x = torch.randn(2, 3, 5, requires_grad=True)
    w_gate, w_up = torch.randn(7, 5, requires_grad=True), torch.randn(7, 5, requires_grad=True)
    loss = _SwiGLUInputFunction.apply(x, w_gate, w_up).square().sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()
