"""The online softmax: a row's maximum and normaliser gathered in one streaming pass.

``softmax(x)_j = exp(x_j - m) / l`` needs the row maximum ``m`` and the sum
``l = sum_j exp(x_j - m)``. Both can be built while reading the row block by block
(Milakov and Gimelshein, arXiv 1805.02867): when a new block raises the maximum from
``m`` to ``m'``, every term summed so far was relative to the old maximum, so multiply
the running sum by ``exp(m - m')`` and add the new block:

    m' = max(m, max_j x_j)           l' = l * exp(m - m') + sum_j exp(x_j - m')

Attention needs ``sum_j softmax_j v_j``, not the softmax itself. Keep an unnormalised
accumulator ``acc = sum_j exp(x_j - m) v_j``; when the maximum changes it must be
rescaled by the same ``exp(m - m')`` (forgetting that is the classic bug), and one
division by ``l`` at the end normalises:

    acc' = acc * exp(m - m') + sum_j exp(x_j - m') v_j,   out = acc / l
"""

from __future__ import annotations

import torch
from torch import Tensor

NEG_INF = float("-inf")


def online_softmax(x: Tensor, block: int) -> Tensor:
    """Softmax over the last axis, computing ``m`` and ``l`` in one streaming pass over blocks.

    Educational: the statistics are gathered block by block (as a kernel would,
    without the whole row in memory), then a second pass normalises. Equal to
    ``torch.softmax(x, -1)`` for finite inputs.
    """
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    m = torch.full(x.shape[:-1], NEG_INF, dtype=x.dtype, device=x.device)  # running max
    l = torch.zeros(x.shape[:-1], dtype=x.dtype, device=x.device)  # running sum
    for start in range(0, x.shape[-1], block):
        xb = x[..., start : start + block]
        m_new = torch.maximum(m, xb.amax(dim=-1))  # m' = max(m, max_j x_j)
        # l' = l * exp(m - m') + sum_j exp(x_j - m'): old terms re-expressed relative to m'
        l = l * torch.exp(m - m_new) + torch.exp(xb - m_new.unsqueeze(-1)).sum(dim=-1)
        m = m_new
    return torch.exp(x - m.unsqueeze(-1)) / l.unsqueeze(-1)  # softmax_j = exp(x_j - m) / l


def online_softmax_trace(scores: Tensor, values: Tensor, block: int) -> list[dict]:
    """Step-by-step record of the online softmax + accumulator for one query row.

    Args:
        scores: ``(N,)`` one row of scaled scores ``q . k_j / sqrt(d)``.
        values: ``(N, d_v)``.
        block: keys per tile.

    Returns:
        one dict per tile with ``start``, ``stop``, ``m_prev``, ``m``, ``l``,
        ``rescale = exp(m_prev - m)``, ``acc`` (unnormalised, ``(d_v,)``) and
        ``out = acc / l``, the answer if the row ended after this tile. After the
        last tile ``out`` equals ``softmax(scores) @ values``.
    """
    if scores.dim() != 1 or values.dim() != 2 or values.shape[0] != scores.shape[0]:
        raise ValueError("scores must be (N,) and values (N, d_v) with the same N")
    if block < 1:
        raise ValueError(f"block must be >= 1, got {block}")
    m = torch.tensor(NEG_INF, dtype=scores.dtype)
    l = torch.tensor(0.0, dtype=scores.dtype)
    acc = torch.zeros(values.shape[1], dtype=values.dtype)
    steps = []
    for start in range(0, scores.shape[0], block):
        stop = min(start + block, scores.shape[0])
        s = scores[start:stop]
        m_new = torch.maximum(m, s.max())  # m' = max(m, max_j s_j)
        rescale = torch.exp(m - m_new)  # exp(m - m'), 0 on the first tile
        p = torch.exp(s - m_new)  # exp(s_j - m')
        l_new = l * rescale + p.sum()  # l' = l exp(m - m') + sum_j p_j
        acc = acc * rescale + p @ values[start:stop]  # acc' = acc exp(m - m') + P V
        steps.append(
            {
                "start": start,
                "stop": stop,
                "m_prev": float(m),
                "m": float(m_new),
                "rescale": float(rescale),
                "l": float(l_new),
                "acc": acc.clone(),
                "out": acc / l_new,
            }
        )
        m, l = m_new, l_new
    return steps
