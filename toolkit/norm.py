"""Normalisation layers: LayerNorm and RMSNorm.

Every sub-layer of a Transformer reads from the residual stream through a
normalisation layer, so that the sub-layer sees inputs of a controlled scale no
matter how large the stream has grown.

LayerNorm (arXiv 1607.06450) standardises each token's feature vector, then
re-scales and re-shifts it with learned per-feature parameters:

    LN(x) = (x - mean(x)) / sqrt(var(x) + eps) * gamma + beta

* ``mean`` and ``var`` are taken over the last (feature) axis of one token.
* ``var`` is the *biased* variance (divide by ``d``, not ``d - 1``), as in
  ``torch.nn.LayerNorm``. It has ``2 d`` parameters (``gamma`` and ``beta``).

RMSNorm (arXiv 1910.07467) drops the centring and the shift. Its authors found
that the re-scaling, not the re-centring, is what makes LayerNorm help:

    RMSNorm(x) = x / sqrt(mean(x^2) + eps) * gamma

It has ``d`` parameters and is a little cheaper (no mean to subtract). LLaMA,
Mistral, Gemma and most recent decoders use it.

Where ``eps`` sits matters. It goes *inside* the square root, added to the variance
(or to ``mean(x^2)``): ``sqrt(var + eps)``. Adding it outside, ``sqrt(var) + eps``,
gives the same numbers for ordinary activations but not for small ones: with
``var = 1e-6`` and ``eps = 1e-2``, ``sqrt(var + eps) = 0.100`` while
``sqrt(var) + eps = 0.011``, nine times smaller. PyTorch, Hugging Face and the papers
all put it inside.

Why not BatchNorm? BatchNorm (arXiv 1502.03167) averages each feature over the
*batch* (and the positions), so a token's output depends on which other sequences
and how much padding share its batch, and training needs running statistics for
inference. Layer and RMS norms use one token's own features only: the result is the
same whatever the batch, the sequence length or the padding.

Parameter names follow PyTorch and Hugging Face: ``gamma`` is stored as
``weight`` and ``beta`` as ``bias``, so a state dict loads into
``torch.nn.LayerNorm`` / ``torch.nn.RMSNorm`` unchanged.

Shapes: input ``(..., d)``, output the same shape.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from toolkit.arguments import check_eps, check_features, check_int


class LayerNorm(nn.Module):
    """Layer normalisation over the last axis, with learned ``gamma`` and ``beta``.

    Args:
        d_model: size ``d`` of the last axis.
        eps: added to the variance before the square root (default ``1e-5``, as
            in PyTorch and GPT-2).
        bias: whether to learn ``beta`` (``False`` gives a bias-free LayerNorm).

    Shapes: ``(..., d)`` -> ``(..., d)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-5, bias: bool = True):
        super().__init__()
        check_int("d_model", d_model)
        check_eps(eps)
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma
        self.bias = nn.Parameter(torch.zeros(d_model)) if bias else None  # beta

    def forward(self, x: Tensor) -> Tensor:
        check_features("x", x, self.d_model)
        mean = x.mean(dim=-1, keepdim=True)  # mu = (1/d) sum_i x_i
        var = (x - mean).pow(2).mean(dim=-1, keepdim=True)  # sigma^2 = (1/d) sum_i (x_i - mu)^2
        x_hat = (x - mean) * torch.rsqrt(var + self.eps)  # (x - mu) / sqrt(sigma^2 + eps)
        out = x_hat * self.weight  # * gamma
        if self.bias is not None:
            out = out + self.bias  # + beta
        return out

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}, bias={self.bias is not None}"


class RMSNorm(nn.Module):
    """Root-mean-square normalisation (arXiv 1910.07467): no centring, no ``beta``.

    Args:
        d_model: size ``d`` of the last axis.
        eps: added to ``mean(x^2)`` before the square root (default ``1e-6``, as
            in LLaMA).

    For half-precision inputs (fp16, bf16) the statistic is computed in float32, as
    Hugging Face's LLaMA does: squaring fp16 values overflows from 256 on. Other
    dtypes are computed as they are (``torch.nn.RMSNorm`` does the same).

    Shapes: ``(..., d)`` -> ``(..., d)``.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        check_int("d_model", d_model)
        check_eps(eps)
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))  # gamma

    def forward(self, x: Tensor) -> Tensor:
        check_features("x", x, self.d_model)
        x32 = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        ms = x32.pow(2).mean(dim=-1, keepdim=True)  # mean(x^2) over the features
        x_hat = x32 * torch.rsqrt(ms + self.eps)  # x / sqrt(mean(x^2) + eps)
        return x_hat.to(x.dtype) * self.weight  # * gamma

    def extra_repr(self) -> str:
        return f"{self.d_model}, eps={self.eps}"
