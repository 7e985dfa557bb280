"""Fused norms and feed-forward layers for the capstone GPT's fast backends.

The teaching layers (:mod:`toolkit.norm`, :mod:`toolkit.ffn`) spell every formula out
in tensor operations, one kernel launch and one intermediate tensor each: LayerNorm's
mean, centring, variance, ``rsqrt``, scale and shift; GELU's cube, ``tanh`` and
products. PyTorch has one kernel for each of these layers. The classes below are
subclasses with the *same* parameters (a state dict moves between them unchanged) and
the same function, computed by those kernels:

===================  =============================================================
teaching             fused
===================  =============================================================
``LayerNorm``        ``F.layer_norm``
``RMSNorm``          ``F.rms_norm``, with its backward written out
``gelu_tanh``        ``F.gelu(x, approximate="tanh")``
``gelu_exact``       ``F.gelu(x)``
===================  =============================================================

(:class:`toolkit.ffn.SwiGLU` already gates with ``F.silu``. Joining its gate and up
projections into one product was measured slower on a CPU: the gradient then needs
the two halves copied back together, more memory traffic than the product saves.)

Equal to the teaching versions to float rounding (tested). :class:`toolkit.models.GPT`
builds them for every ``attention_backend`` except ``"reference"``.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.ffn import FeedForward
from toolkit.norm import LayerNorm, RMSNorm

#: The fused kernel for each activation name of :data:`toolkit.ffn.ACTIVATIONS`.
FUSED_ACTIVATIONS = {
    "gelu": F.gelu,  # 0.5 x (1 + erf(x / sqrt 2))
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
    "gelu_tanh": partial(F.gelu, approximate="tanh"),
    "relu": F.relu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
}


class FusedLayerNorm(LayerNorm):
    """:class:`toolkit.norm.LayerNorm` computed by ``F.layer_norm`` (one kernel)."""

    def forward(self, x: Tensor) -> Tensor:
        # (x - mean) / sqrt(var + eps) * gamma + beta over the last axis
        return F.layer_norm(x, (self.d_model,), self.weight, self.bias, self.eps)


class _RMSNormFunction(torch.autograd.Function):
    """``y = x r gamma`` with ``r = 1 / sqrt(mean(x^2) + eps)`` per row; backward by hand.

    ``F.rms_norm`` runs its forward as one kernel, but PyTorch differentiates it through
    the composite ops (square, mean, ``rsqrt``, products), a dozen passes over the
    activations. With ``g = dL/dy`` the gradients are, per row of ``d`` features:

        dL/dgamma_j = sum over rows of g_j x_j r
        dL/dx_k = r g_k gamma_k - x_k (r^3 / d) sum_j g_j gamma_j x_j

    (the second term because ``r`` depends on every ``x_j``: ``dr/dx_k = -r^3 x_k / d``).
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        d = x.shape[-1]
        ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square() / d  # mean(x^2)
        ctx.save_for_backward(x, weight, torch.rsqrt(ms + eps))
        return F.rms_norm(x, (d,), weight, eps)  # x r gamma, one kernel

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):
        x, weight, r = ctx.saved_tensors
        g_r = g * r
        d_weight = (g_r * x).flatten(0, -2).sum(0)  # sum over rows of g x r
        g_w = g_r.mul_(weight)  # r g gamma (in place: one buffer fewer)
        dot = torch.linalg.vecdot(g_w, x).unsqueeze(-1)  # r sum_j g_j gamma_j x_j
        d_x = g_w.addcmul_(x, dot * r.square() / x.shape[-1], value=-1.0)
        return d_x, d_weight, None


class FusedRMSNorm(RMSNorm):
    """:class:`toolkit.norm.RMSNorm` computed by ``F.rms_norm``.

    In float32 and float64 the backward is :class:`_RMSNormFunction`'s, written out. The
    teaching version normalises half-precision inputs in float32 and multiplies by
    ``gamma`` after casting back; here too.
    """

    def forward(self, x: Tensor) -> Tensor:
        if x.dtype == self.weight.dtype and x.dtype in (torch.float32, torch.float64):
            return _RMSNormFunction.apply(x, self.weight, self.eps)  # x / rms(x) * gamma
        x_hat = F.rms_norm(x.float(), (self.d_model,), None, self.eps)  # statistic in float32
        return x_hat.to(x.dtype) * self.weight


class FusedFeedForward(FeedForward):
    """:class:`toolkit.ffn.FeedForward` with the activation's fused kernel."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.act = FUSED_ACTIVATIONS[self.activation]
