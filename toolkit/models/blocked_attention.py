"""Causal attention in row blocks: the capstone's fast attention on a CPU for short
sequences (``attention_backend="blocked"``).

A fused attention kernel (FlashAttention, arXiv 2205.14135; PyTorch's CPU kernel is one)
never stores the ``T x T_k`` probabilities: it streams over key blocks with a running
softmax and, in the backward, computes the probabilities a second time. That is the
right trade when the probabilities do not fit in fast memory. At the capstone's size on
a CPU they do (16 sequences x 4 heads x 128 x 128 floats is 4 MiB a layer), so this
backend computes each block's probabilities once, keeps them, and arranges the work in
two ways:

1. **Only the key blocks a query block can see**, as the fused kernels do. The queries
   are cut into blocks of ``block_size`` positions; the block of queries ``s .. e - 1``
   sees keys ``0 .. e - 1`` (with the bottom-right alignment of a cache, see below), so
   its scores are one ``b x e`` product, not ``b x T_k``: with blocks of 32 over 128
   positions, 10/16 of the full score matrix is computed, and the masked half of the
   diagonal block is the only waste.
2. **One product per KV head, not per query head.** With grouped-query attention
   (arXiv 2305.13245) the ``G = H / H_kv`` query heads of a group read the same keys and
   values. Their queries are stacked, ``(B, H_kv, T, G, D)``, so that a block of query
   positions is ``G b`` consecutive rows of one matrix: the scores of the whole group
   are one product with the group's keys (larger products run closer to the machine's
   peak), and the gradients of K and V come out summed over the group by the products
   themselves, with no copy of K or V per query head.

Forward, per query block (``q`` scaled by ``1 / sqrt(D)`` once, ``M`` the causal mask,
0 or ``-inf``)::

    P_blk = softmax(q_blk k[:e]^T + M)        (B H_kv, G b, e)      kept for the backward
    o_blk = P_blk v[:e]                       (B H_kv, G b, D)

Backward, per block, with ``dO`` the gradient of the output (the softmax gradient is
``dS = P (dP - rowsum(dP P))``, one fused ATen kernel)::

    dV[:e] += P_blk^T dO_blk
    dP      = dO_blk v[:e]^T
    dS      = P_blk (dP - rowsum(dP P_blk))
    dQ_blk  = dS k[:e] / sqrt(D)
    dK[:e] += dS^T q_blk                      (q_blk already scaled)

Alignment: ``T`` queries over ``T_k >= T`` keys sit at absolute positions
``T_k - T .. T_k - 1`` (the last ``T`` of the sequence, as after a KV cache), so query
``i`` sees keys ``j <= (T_k - T) + i``, as every backend of :mod:`toolkit.models.backends`.

The probabilities cost memory (``B H T T_k / 2`` floats a layer, about): this backend is
for short sequences, which is why ``auto`` chooses it only on a CPU and only for the
lengths of :data:`toolkit.models.backends.BLOCKED_AUTO_LENGTHS`
(``benchmarks/attention.py --cpu-backends`` measures it against PyTorch's kernel per
length). Equal to the reference attention to float rounding in outputs and gradients
(tested, float64 to 1e-12).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
from torch import Tensor

from toolkit.masks import causal_mask, mask_to_additive

#: Query positions per block: of 16, 32, 48 and 64, 32 trained the capstone fastest on a
#: CPU (smaller blocks skip more of the masked scores but run more, smaller products).
BLOCK_SIZE = 32


@lru_cache(maxsize=64)
def causal_block_mask(
    rows: int, cols: int, first_position: int, group: int, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """``(rows * group, cols)`` additive mask of one query block: ``0`` where query ``t``
    (at absolute position ``first_position + t``) may see key ``j``
    (``j <= first_position + t``), ``-inf`` elsewhere; each query's row repeated
    ``group`` times in a row, the order of the stacked query heads. An ordinary tensor
    even under ``torch.inference_mode``, so that a mask made while generating can serve a
    later training step."""
    with torch.inference_mode(False), torch.no_grad():
        allowed = causal_mask(rows, cols, offset=first_position, device=device)
        return mask_to_additive(allowed, dtype).repeat_interleave(group, dim=0)


class _BlockedCausalAttention(torch.autograd.Function):
    """Forward and backward of :func:`blocked_causal_attention` (formulas in the module
    docstring). Internal layout: ``(B H_kv, T G, D)`` for the queries (query heads of a
    group side by side), ``(B H_kv, T_k, D)`` for keys and values."""

    @staticmethod
    def forward(ctx, q: Tensor, k: Tensor, v: Tensor, block_size: int) -> Tensor:
        B, H, T, D = q.shape
        H_kv, T_k = k.shape[1], k.shape[2]
        G, offset = H // H_kv, T_k - T  # query heads per KV head; queries' first position
        # q / sqrt(D) in (B, H_kv, T, G, D): one copy, and every block a slice of rows
        q_rows = torch.empty(B, H_kv, T, G, D, dtype=q.dtype, device=q.device)
        torch.mul(q.unflatten(1, (H_kv, G)).transpose(2, 3), 1 / math.sqrt(D), out=q_rows)
        q_rows = q_rows.view(B * H_kv, T * G, D)
        k_rows, v_rows = k.reshape(B * H_kv, T_k, D), v.reshape(B * H_kv, T_k, D)
        outs, probs = [], []
        for s in range(0, T, block_size):
            e = min(s + block_size, T)
            seen = offset + e  # keys 0 .. seen - 1
            mask = causal_block_mask(e - s, seen, offset + s, G, q.device, q.dtype)
            # q k^T + M (the mask is the product's starting value), softmax in place
            p = torch.baddbmm(mask, q_rows[:, s * G:e * G], k_rows[:, :seen].transpose(1, 2))
            torch.softmax(p, dim=-1, out=p)  # (B H_kv, G b, seen)
            o = torch.bmm(p, v_rows[:, :seen])  # P v: (B H_kv, G b, D)
            outs.append(o.view(B, H_kv, e - s, G, D).transpose(1, 2))  # (B, b, H_kv, G, D)
            probs.append(p)
        out = torch.cat(outs, dim=1)  # (B, T, H, D) in memory: the output projection reads it
        ctx.save_for_backward(q_rows, k_rows, v_rows, *probs)
        ctx.block_size, ctx.group = block_size, G
        return out.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D), a view

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, d_out: Tensor):
        q_rows, k_rows, v_rows, *probs = ctx.saved_tensors
        block_size, G = ctx.block_size, ctx.group
        B, H, T, D = d_out.shape
        H_kv, T_k = H // G, k_rows.shape[1]
        offset = T_k - T
        # dO in the queries' layout: (B H_kv, T G, D), dense (the gradient of a sum is an
        # expanded tensor, which the batched products would copy one matrix at a time)
        d_rows = d_out.unflatten(1, (H_kv, G)).transpose(2, 3).reshape(B * H_kv, T * G, D)
        d_rows = d_rows.contiguous()
        k_scaled = k_rows * (1 / math.sqrt(D))  # dQ = dS k / sqrt(D)
        d_q, d_k, d_v = [], None, None
        # Last block first: it sees every key, so its dK and dV parts are the whole tensors
        # and the earlier blocks add into their leading rows. (Products into new tensors:
        # an in-place baddbmm_ on a slice runs one small product per batch entry.)
        for p, s in reversed(list(zip(probs, range(0, T, block_size)))):
            e = min(s + block_size, T)
            rows, seen = slice(s * G, e * G), offset + e
            d_o = d_rows[:, rows]
            d_v_part = torch.bmm(p.transpose(1, 2), d_o)  # P^T dO: (B H_kv, seen, D)
            d_p = torch.bmm(d_o, v_rows[:, :seen].transpose(1, 2))  # dP = dO v^T
            d_s = torch._softmax_backward_data(d_p, p, -1, p.dtype)  # P (dP - rowsum(dP P))
            d_q_blk = torch.bmm(d_s, k_scaled[:, :seen])  # dS k / sqrt(D): (B H_kv, G b, D)
            d_q.append(d_q_blk.view(B, H_kv, e - s, G, D).transpose(1, 2))
            d_k_part = torch.bmm(d_s.transpose(1, 2), q_rows[:, rows])  # dS^T q (q scaled)
            if d_k is None:
                d_k, d_v = d_k_part, d_v_part
            else:
                d_k[:, :seen] += d_k_part
                d_v[:, :seen] += d_v_part
        # (B, T, H, D) in memory, as q came from the joint projection; (B, H, T, D) a view
        d_q = torch.cat(d_q[::-1], dim=1).view(B, T, H, D).transpose(1, 2)
        return d_q, d_k.view(B, H_kv, T_k, D), d_v.view(B, H_kv, T_k, D), None


def blocked_causal_attention(
    q: Tensor, k: Tensor, v: Tensor, block_size: int = BLOCK_SIZE
) -> Tensor:
    """Causal attention computed in blocks of ``block_size`` query positions, the query
    heads of each KV head stacked (see the module docstring).

    Args:
        q: ``(B, H, T, D)``; k, v: ``(B, H_kv, T_k, D)`` with ``T_k >= T`` and ``H`` a
            multiple of ``H_kv`` (query head ``h`` reads KV head ``h // (H / H_kv)``).
            Any strides (views of a joint projection are fine).
        block_size: query positions per block (>= 1).

    Returns:
        ``(B, H, T, D)``, ``softmax(q k^T / sqrt(D) + mask) v`` with query ``i`` seeing
        keys ``j <= (T_k - T) + i``; stored as ``(B, T, H, D)`` (a transposed view), the
        layout the output projection reads.
    """
    if q.dim() != 4 or k.shape != v.shape or k.dim() != 4:
        raise ValueError(f"q must be (B, H, T, D) and k, v (B, H_kv, T_k, D); got "
                         f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if q.shape[1] % k.shape[1] or k.shape[2] < q.shape[2]:
        raise ValueError(f"need H a multiple of H_kv and T_k >= T; got q {tuple(q.shape)}, "
                         f"k {tuple(k.shape)}")
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    return _BlockedCausalAttention.apply(q, k, v, block_size)
