"""Attention backends of the capstone GPT: the same causal attention, four ways.

``GPTConfig.attention_backend`` chooses how the attention layer of
:class:`toolkit.models.FastGPT` (:class:`toolkit.models.FastCausalSelfAttention`) computes
``softmax(q k^T / sqrt(D) + mask) v`` once the queries, keys and values are projected
(and rotated, and cached):

==============  ============================================================================
``reference``   the teaching code students write in the capstone: each KV head copied for
                its query heads (:func:`toolkit.gqa.repeat_kv`), a boolean causal mask
                (:func:`toolkit.masks.causal_mask`) and the score matrix of
                :func:`toolkit.attention.scaled_dot_product_attention`, as
                :class:`toolkit.models.GPT` computes it
``sdpa``        PyTorch's fused attention, ``F.scaled_dot_product_attention``, with its own
                grouped-query support (``enable_gqa=True``: no copies of K and V)
``blocked``     score matrices in blocks of query positions, each only as wide as the
                keys the block can see, the query heads of a KV head in one product
                (:mod:`toolkit.models.blocked_attention`); the fastest on a CPU for
                sequences of a few hundred positions
``triton``      the course's FlashAttention kernels, forward and FlashAttention-2
                backward (:func:`toolkit.kernels.triton_attention`); CUDA, or Triton's
                interpreter on the CPU (``TRITON_INTERPRET=1``, slow: for tests)
``auto``        the fastest correct one for the tensors (:func:`resolve_backend`), as
                measured: ``blocked`` for a full causal pass of a few hundred positions on
                a CPU (:data:`BLOCKED_AUTO_LENGTHS`), ``sdpa`` otherwise
==============  ============================================================================

All four compute the same function, equal to float rounding in outputs and gradients
(tested): query ``i`` of ``T`` sits at absolute position ``(T_k - T) + i`` and sees keys
``j <= (T_k - T) + i``, the bottom-right alignment that makes a KV-cache decoding step
(``T = 1``) see every cached key.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.attention import scaled_dot_product_attention
from toolkit.gqa import repeat_kv
from toolkit.masks import causal_mask
from toolkit.models.blocked_attention import blocked_causal_attention

#: The values ``GPTConfig.attention_backend`` accepts.
ATTENTION_BACKENDS = ("auto", "reference", "sdpa", "blocked", "triton")

#: The sequence lengths (queries = keys) for which ``auto`` picks ``blocked`` on a CPU, with
#: grouped query heads (GQA, MQA) and with one KV head per query head (MHA). Shorter, and
#: for multi-head attention at 128, PyTorch's kernel trains as fast or faster; longer, the
#: probabilities ``blocked`` keeps for the backward grow as ``T^2`` and its lead shrinks.
BLOCKED_AUTO_LENGTHS = {"grouped": range(128, 1024 + 1), "multi-head": range(256, 1024 + 1)}

#: The dtypes the Triton kernels compile for (the interpreter refuses bf16 on its own).
_TRITON_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def resolve_backend(
    name: str, device: torch.device, dtype: torch.dtype,
    queries: int | None = None, keys: int | None = None, group: int = 1,
) -> str:
    """The backend that runs for ``name`` on ``queries`` queries over ``keys`` keys (unknown:
    ``None``) of ``device`` and ``dtype``, ``group`` query heads sharing each KV head.

    ``"auto"`` is ``"blocked"`` on a CPU for a full causal pass (``queries == keys``, the
    shape of training and of a prompt without a cache) of a length in
    :data:`BLOCKED_AUTO_LENGTHS`, in float32 or float64: there it trained faster than
    PyTorch's fused kernel (``benchmarks/attention.py --cpu-backends`` measures the two
    per length, head size and grouping). Everywhere else ``"auto"`` is ``"sdpa"``. On a
    CPU the Triton kernels only run in the interpreter (correct, far too slow). On an
    H100, training the capstone in bf16 with ``"triton"`` ran at 0.88x (d 128, T 128)
    and 0.85x (d 512, T 1024) of ``"sdpa"``'s tokens/s (``benchmarks/capstone.py
    --tables backends``): the course kernels match PyTorch's at long sequences, but not
    whole steps. ``benchmarks/step_accounting.py`` counts what such a step does besides
    the kernels (launches, tensor operations, host work). ``"triton"`` stays one word
    away. Any other name is returned as it is.
    """
    if name not in ATTENTION_BACKENDS:
        raise ValueError(f"attention_backend must be one of {ATTENTION_BACKENDS}, got {name!r}")
    if name != "auto":
        return name
    lengths = BLOCKED_AUTO_LENGTHS["grouped" if group > 1 else "multi-head"]
    full_pass = queries is not None and queries == keys
    if (device.type == "cpu" and dtype in (torch.float32, torch.float64) and full_pass
            and queries in lengths):
        return "blocked"
    return "sdpa"


def reference_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The teaching path: KV heads copied, an explicit mask and score matrix.

    Shapes: ``q (B, H, T, D)``; ``k, v (B, H_kv, T_k, D)`` -> ``(B, H, T, D)``.
    """
    n_rep = q.size(1) // k.size(1)
    k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # query head h reads KV head h // n_rep
    T, T_k = q.size(2), k.size(2)
    mask = causal_mask(T, T_k, offset=T_k - T, device=q.device)  # j <= (T_k - T) + i
    return scaled_dot_product_attention(q, k, v, mask)


def sdpa_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """``F.scaled_dot_product_attention`` with native GQA and the bottom-right causal mask.

    PyTorch's ``is_causal`` aligns the mask top-left (query ``i`` sees keys ``j <= i``),
    which is right only when ``T == T_k``. A decoding step (``T = 1``) sees every key and
    needs no mask; a chunk after a cached prefix (``1 < T < T_k``) gets the boolean mask.
    """
    T, T_k = q.size(2), k.size(2)
    gqa = q.size(1) != k.size(1)
    if T == T_k:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
    if T == 1:
        return F.scaled_dot_product_attention(q, k, v, enable_gqa=gqa)
    mask = causal_mask(T, T_k, offset=T_k - T, device=q.device)  # True = may attend
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa)


def triton_causal_attention(q: Tensor, k: Tensor, v: Tensor) -> Tensor:
    """The course's Triton kernels (bottom-right causal, GQA by KV-head index), differentiable."""
    if q.dtype not in _TRITON_DTYPES:
        raise ValueError(
            f"attention_backend='triton' runs float16, bfloat16 and float32; got {q.dtype} "
            "(use 'sdpa' or 'reference' for float64)"
        )
    from toolkit.kernels import triton_attention

    return triton_attention(q, k, v, causal=True)


_ATTEND = {"reference": reference_attention, "sdpa": sdpa_attention,
           "blocked": blocked_causal_attention, "triton": triton_causal_attention}


def causal_attention(q: Tensor, k: Tensor, v: Tensor, backend: str = "auto") -> Tensor:
    """Causal attention of ``T`` new queries over ``T_k`` keys, with ``backend``.

    Args:
        q: ``(B, H, T, D)``; k, v: ``(B, H_kv, T_k, D)`` with ``T_k >= T`` and ``H`` a
            multiple of ``H_kv`` (query head ``h`` reads KV head ``h // (H / H_kv)``).
        backend: one of :data:`ATTENTION_BACKENDS`.

    Returns:
        ``(B, H, T, D)``: ``softmax(q k^T / sqrt(D) + mask) v`` with query ``i`` seeing
        keys ``j <= (T_k - T) + i``.
    """
    group = q.size(1) // k.size(1)  # query heads per KV head
    backend = resolve_backend(backend, q.device, q.dtype, q.size(2), k.size(2), group)
    return _ATTEND[backend](q, k, v)
