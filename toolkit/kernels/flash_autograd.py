"""Differentiable attention on the course's Triton kernels: forward and backward.

:class:`TritonFlashAttention` joins the Triton forward (which returns the output and
the log-sum-exp) and the FlashAttention-2 backward
(:func:`toolkit.kernels.flash_backward_tuned.flash_attention_backward_tuned`, without
re-checking its arguments) into one
``torch.autograd.Function``. Like every FlashAttention, it saves only ``q, k, v``, the
output and one log-sum-exp per query row for the backward: O(N) memory where autograd
through plain attention keeps the ``N x N`` probabilities of every head.

    out = triton_attention(q, k, v, causal=True)   # (B, H, N_q, d)
    out.sum().backward()                           # q.grad, k.grad, v.grad

Grouped-query attention needs no copy of ``k``, ``v``: the kernels read KV head
``h // (H / H_kv)`` for query head ``h``, and the gradients of a KV head are summed
over its group, equal to ``scaled_dot_product_attention(..., enable_gqa=True)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.kernels.flash_backward_tuned import _backward_unchecked
from toolkit.kernels.flash_tuned import flash_attention_tuned


class TritonFlashAttention(torch.autograd.Function):
    """``TritonFlashAttention.apply(q, k, v, causal, scale) -> out``, positional arguments only.

    Shapes as :func:`triton_attention`. The backward returns no gradient for ``causal``
    and ``scale``.
    """

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, causal: bool = False, scale=None):
        out, lse = flash_attention_tuned(q, k, v, causal=causal, scale=scale)
        ctx.save_for_backward(q, k, v, out, lse)  # never the probabilities
        ctx.causal, ctx.scale = causal, scale
        return out

    @staticmethod
    def backward(ctx, dout: Tensor):
        q, k, v, out, lse = ctx.saved_tensors
        # the forward checked q, k, v; autograd gives dout out's shape, dtype and device
        dq, dk, dv = _backward_unchecked(q, k, v, out, lse, dout, ctx.causal, scale=ctx.scale)
        return dq, dk, dv, None, None


def triton_attention(
    q: Tensor, k: Tensor, v: Tensor, causal: bool = False, *, scale: float | None = None
) -> Tensor:
    """Exact attention with the Triton FlashAttention kernels, differentiable.

    Args:
        q: ``(B, H, N_q, d)``; k, v: ``(B, H_kv, N_k, d)`` with ``H`` a multiple of ``H_kv``
            (query head ``h`` reads KV head ``h // (H / H_kv)``). fp16 or fp32 (bf16 on a
            GPU only); CUDA tensors, or CPU tensors with ``TRITON_INTERPRET=1``.
        causal: bottom-right aligned causal mask (``j <= i + N_k - N_q``).
        scale: default ``1 / sqrt(d)``.

    Returns:
        ``out (B, H, N_q, d)``, equal to
        ``F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)``
        for ``N_q == N_k`` (whose causal mask is aligned top-left otherwise), with
        gradients for ``q``, ``k`` and ``v``.
    """
    return TritonFlashAttention.apply(q, k, v, bool(causal), scale)
