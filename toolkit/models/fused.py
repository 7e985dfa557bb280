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
``RMSNorm``          ``F.rms_norm`` on a GPU; on a CPU, where that is a composite,
                     :class:`_RMSNormFunction` (LayerNorm's fused backward)
``gelu_tanh``        ``F.gelu(x, approximate="tanh")``
``gelu_exact``       ``F.gelu(x)``
``SwiGLU``           the gate ``silu(g) * u`` as :class:`_SiLUGateFunction`; without
                     biases, with its two input products as
                     :class:`_SwiGLUInputFunction` (one tensor for ``dL/dx``; the
                     gradients written over its saved products)
===================  =============================================================

(Joining SwiGLU's gate and up projections into one product was measured slower on a
CPU: joined at every step, the gradient needs the two halves copied back together;
stored as one matrix, with the gate's gradient written straight into one tensor, the
modern recipe still trained at 0.89x of nanoGPT's speed against 0.96x without.)

Equal to the teaching versions to float rounding (tested). :class:`toolkit.models.FastGPT`
builds them in place of :class:`toolkit.models.GPT`'s teaching layers.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.ffn import FeedForward, SwiGLU
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

    On a CPU ``F.rms_norm`` is a composite of square, mean, ``rsqrt`` and products, and
    so is its gradient: a dozen passes over the activations. The forward here reads
    ``x`` once for ``r`` (``vector_norm``) and writes ``x r gamma`` in two passes. With
    ``g = dL/dy`` and ``x_hat = x r``, per row of ``d`` features:

        dL/dgamma = sum over rows of g x_hat
        dL/dx = r (g gamma - x_hat mean(g gamma x_hat))

    LayerNorm's gradient is the same with ``x_hat = (x - mu) r`` and one more term,
    ``- r mean(g gamma)``, from the mean it subtracts. So LayerNorm's fused backward
    kernel (``aten.native_layer_norm_backward``), given ``mu = 0`` and RMSNorm's ``r``,
    computes both gradients in one pass; adding ``r mean(g gamma)`` back makes it
    RMSNorm's.
    """

    @staticmethod
    def forward(ctx, x: Tensor, weight: Tensor, eps: float) -> Tensor:
        d = x.shape[-1]
        ms = torch.linalg.vector_norm(x, dim=-1, keepdim=True).square() / d  # mean(x^2)
        r = torch.rsqrt(ms + eps)  # (..., 1)
        ctx.save_for_backward(x, weight, r)
        return (x * r).mul_(weight)  # x r gamma

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g: Tensor):
        x, weight, r = ctx.saved_tensors
        d = x.shape[-1]
        d_x, d_weight, _ = torch.ops.aten.native_layer_norm_backward(
            g, x, [d], torch.zeros_like(r), r, weight, None, [True, True, False]
        )  # LayerNorm's gradients with mu = 0
        # + r mean(g gamma): the (..., 1) factor first, so that the full-size pass is one
        # broadcast add (addcmul_ with two broadcast factors is several times slower)
        d_x.add_((g @ weight).unsqueeze(-1).mul_(r).div_(d))
        return d_x, d_weight, None


class FusedRMSNorm(RMSNorm):
    """:class:`toolkit.norm.RMSNorm` on fused kernels.

    ``F.rms_norm`` on a GPU (one kernel each way); on a CPU, float32 and float64 go
    through :class:`_RMSNormFunction`. The teaching version normalises half-precision
    inputs in float32 and multiplies by ``gamma`` after casting back; here too.
    """

    def forward(self, x: Tensor) -> Tensor:
        full_precision = x.dtype == self.weight.dtype and x.dtype in (torch.float32, torch.float64)
        if full_precision and x.device.type == "cpu":
            return _RMSNormFunction.apply(x, self.weight, self.eps)  # x / rms(x) * gamma
        if full_precision:
            return F.rms_norm(x, (self.d_model,), self.weight, self.eps)
        x_hat = F.rms_norm(x.float(), (self.d_model,), None, self.eps)  # statistic in float32
        return x_hat.to(x.dtype) * self.weight


class FusedFeedForward(FeedForward):
    """:class:`toolkit.ffn.FeedForward` with the activation's fused kernel."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.act = FUSED_ACTIVATIONS[self.activation]


class _SiLUGateFunction(torch.autograd.Function):
    """``h = silu(g) * u``, SwiGLU's gate, writing fewer new full-size tensors.

    ``g`` and ``u`` are ``(..., d_ff)``, the largest activations of the block. On a CPU
    each elementwise pass that writes a *new* tensor of that size costs about twice one
    that writes in place: the new memory is not in cache yet. Autograd's version writes
    five (``silu(g)``, the product; in the backward ``dh s``, ``dh u`` and ``silu'``'s
    product) and keeps ``silu(g)`` alive for the backward. Here, with ``s = silu(g)``:

        forward:  h = s, then h *= u                    (one new tensor)
        backward: dL/du = s dh  (s recomputed, then *= dh in place)
                  dL/dg = (dh u) silu'(g),  silu'(g) = sigmoid(g) (1 + g (1 - sigmoid(g)))
                  (the product new, ``silu_backward`` in place)

    Three new tensors instead of five, one pass more (``s`` is recomputed rather than
    saved), and the training step of the modern recipe about 4 % faster on a CPU.
    """

    @staticmethod
    def forward(ctx, g: Tensor, u: Tensor) -> Tensor:
        ctx.save_for_backward(g, u)
        return F.silu(g).mul_(u)  # silu(g) * u

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_h: Tensor):
        g, u = ctx.saved_tensors
        d_u = F.silu(g).mul_(d_h)  # dL/du = dh silu(g)
        d_g = torch.mul(d_h, u)  # dh u, then times silu'(g) in place:
        torch.ops.aten.silu_backward.grad_input(d_g, g, grad_input=d_g)
        return d_g, d_u


class _SwiGLUInputFunction(torch.autograd.Function):
    """``h = silu(x W_gate^T) * (x W_up^T)``: SwiGLU's two input products and its gate,
    with one gradient tensor for ``x``.

    ``x`` feeds two layers, so autograd computes ``dL/dx`` as two products and adds them:
    a third ``(..., d)`` tensor and one more pass. Here the second product accumulates into
    the first (``addmm_``):

        dL/dx = dL/dg W_gate + dL/du W_up        (one tensor, written twice)
        dL/dW_gate = (dL/dg)^T x,  dL/dW_up = (dL/du)^T x

    with ``dL/dg`` and ``dL/du`` from the gate as in :class:`_SiLUGateFunction`, but written
    over ``u`` and ``g``: this Function made them, nothing else holds them, and the
    backward reads each for the last time as it overwrites it. So the backward writes no
    new ``(..., d_ff)`` tensor at all (fresh memory is what such a pass pays for most on
    a CPU, see :class:`_SiLUGateFunction`). The price: the graph can be run backward once
    (a training step's ``loss.backward()``); a second pass (``retain_graph=True``,
    ``gradcheck``) raises PyTorch's error about a tensor "modified by an inplace
    operation". No biases (the modern recipe has none; :class:`FusedSwiGLU` takes the
    layers' path with them).
    """

    @staticmethod
    def forward(ctx, x: Tensor, w_gate: Tensor, w_up: Tensor) -> Tensor:
        g, u = x @ w_gate.t(), x @ w_up.t()  # (..., d_ff) each
        ctx.save_for_backward(x, w_gate, w_up, g, u)
        return F.silu(g).mul_(u)  # silu(g) * u

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_h: Tensor):
        x, w_gate, w_up, g, u = ctx.saved_tensors
        d_g = u.mul_(d_h)  # dh u over u, then times silu'(g) in place:
        torch.ops.aten.silu_backward.grad_input(d_g, g, grad_input=d_g)
        d_u = F.silu(g, inplace=True).mul_(d_h)  # dL/du = dh silu(g), over g
        x2, d_g2, d_u2 = x.flatten(0, -2), d_g.flatten(0, -2), d_u.flatten(0, -2)  # N rows
        d_x = torch.mm(d_g2, w_gate).addmm_(d_u2, w_up)  # dg W_gate + du W_up, one tensor
        return d_x.view_as(x), d_g2.t() @ x2, d_u2.t() @ x2


class FusedSwiGLU(SwiGLU):
    """:class:`toolkit.ffn.SwiGLU` with its input products and gate computed by
    :class:`_SwiGLUInputFunction` (with biases: the gate alone, :class:`_SiLUGateFunction`)."""

    def forward(self, x: Tensor) -> Tensor:
        if self.gate_proj.bias is None and self.up_proj.bias is None:
            gated = _SwiGLUInputFunction.apply(x, self.gate_proj.weight, self.up_proj.weight)
        else:
            gated = _SiLUGateFunction.apply(self.gate_proj(x), self.up_proj(x))  # silu(g) * u
        return self.dropout(self.down_proj(gated))
