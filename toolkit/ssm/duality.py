"""Mamba-2's state-space duality: a scalar-decay selective SSM *is* a masked attention.

Mamba-2 (Dao and Gu, arXiv 2405.21060) restricts Mamba's ``A`` to one scalar per head:
at step ``t`` every channel and every state dimension of head ``h`` decays by the same
``a_t = exp(delta_t A_h)`` in ``(0, 1]``. Per head, with ``x_t`` in ``R^P`` (the head's
``P`` channels, already multiplied by ``delta_t``) and ``B_t, C_t`` in ``R^N``:

    h_t = a_t h_{t-1} + x_t B_t^T          (state: P x N)
    y_t = h_t C_t                           (output: P)

Unrolled from ``h_{-1} = 0``:

    y_i = sum_{j <= i} (a_i a_{i-1} ... a_{j+1}) (C_i . B_j) x_j,

that is ``y = (L o C B^T) x``: attention with ``C`` as the queries, ``B`` as the keys, no
softmax, and the causal mask ``L_ij = a_i ... a_{j+1}`` (an empty product, 1, on the
diagonal; 0 above it). ``L_ij = (a_0 ... a_i) / (a_0 ... a_j)`` for ``i >= j``, so every
block of ``L`` on or below the diagonal has rank 1: ``L`` is *1-semiseparable*, and that
structure is what lets the linear-time recurrence compute the same product.

Three ways to compute one ``y``, equal to float tolerance:

* :func:`ssd_recurrent`: the scan, ``O(L N P)`` per head and a constant-size state per
  token (how Mamba-2 generates);
* :func:`ssd_attention`: the quadratic form, ``O(L^2 (N + P))`` per head in a few matrix
  products (what matrix units like, for short sequences);
* :func:`ssd_chunked`: both, as Mamba-2 trains: the quadratic form inside chunks of
  ``Q`` tokens, and the recurrence on the chunks' end states between them, ``O(L Q)``
  instead of ``O(L^2)``.

Mamba's selective scan (:func:`toolkit.ssm.selective_scan`) with ``A_log`` constant over
the state axis is this with ``H = d_inner`` heads of ``P = 1`` channel, ``x = delta u``,
``log_a = delta A`` and every head sharing ``B`` and ``C``.

Shapes (sequence-first, as Mamba-2's reference ``ssd_minimal``): ``x (batch, L, H, P)``,
``log_a (batch, L, H)`` (``log a_t = delta_t A_h <= 0``, finite), ``B, C (batch, L, H, N)``,
state ``(batch, H, P, N)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_int, check_ssd_inputs


def semiseparable_mask(log_a: Tensor) -> Tensor:
    """The decay mask ``L_ij = a_i a_{i-1} ... a_{j+1}`` below the diagonal, 0 above.

    Computed from segment sums of the logs, ``L_ij = exp(sum_{j < r <= i} log a_r)``,
    never as a ratio of cumulative products (those underflow to 0 / 0 on long inputs).

    Args:
        log_a: ``(..., L)`` the log decays, time on the last axis.

    Returns:
        ``(..., L, L)``, row ``i`` (the query's step), column ``j`` (the key's step);
        1 on the diagonal.
    """
    L = log_a.size(-1)
    after_j = torch.ones(L, L, dtype=torch.bool, device=log_a.device).tril(-1)  # r > j
    terms = log_a[..., :, None].expand(*log_a.shape, L)  # terms[..., r, j] = log a_r
    segment = terms.masked_fill(~after_j, 0.0).cumsum(dim=-2)  # sum_{j < r <= i} log a_r
    causal = torch.ones(L, L, dtype=torch.bool, device=log_a.device).tril()  # j <= i
    return torch.exp(segment).masked_fill(~causal, 0.0)  # 0 above the diagonal


def ssd_recurrent(
    x: Tensor,
    log_a: Tensor,
    B: Tensor,
    C: Tensor,
    state: Tensor | None = None,
    return_state: bool = False,
):
    """The scalar-decay SSM one step after the other: ``h_t = a_t h_{t-1} + x_t B_t^T``,
    ``y_t = h_t C_t``.

    Args:
        x: ``(batch, L, H, P)``; log_a: ``(batch, L, H)``; B, C: ``(batch, L, H, N)``.
        state: ``(batch, H, P, N)`` to continue from (default zeros).
        return_state: also return the state after the last step.

    Returns:
        ``y`` ``(batch, L, H, P)``, or ``(y, state)``.
    """
    check_ssd_inputs(x, log_a, B, C)
    batch, L, H, P = x.shape
    h = x.new_zeros(batch, H, P, B.size(-1)) if state is None else state
    a = torch.exp(log_a)  # (batch, L, H)
    ys = []
    for t in range(L):
        h = a[:, t, :, None, None] * h + x[:, t, :, :, None] * B[:, t, :, None, :]  # a h + x B^T
        ys.append(torch.einsum("bhpn,bhn->bhp", h, C[:, t]))  # y_t = h_t C_t
    y = torch.stack(ys, dim=1) if ys else x.new_zeros(x.shape)
    return (y, h) if return_state else y


def ssd_attention(x: Tensor, log_a: Tensor, B: Tensor, C: Tensor) -> Tensor:
    """The same SSM as one masked "attention": ``y = (L o C B^T) x`` (from a zero state).

    Args:
        x: ``(batch, L, H, P)``; log_a: ``(batch, L, H)``; B, C: ``(batch, L, H, N)``.

    Returns:
        ``(batch, L, H, P)``.
    """
    check_ssd_inputs(x, log_a, B, C)
    mask = semiseparable_mask(log_a.transpose(1, 2))  # (batch, H, L, L): L_ij per head
    scores = torch.einsum("bihn,bjhn->bhij", C, B)  # C_i . B_j: queries C, keys B
    return torch.einsum("bhij,bjhp->bihp", mask * scores, x)  # y = (L o C B^T) x


def ssd_chunked(
    x: Tensor,
    log_a: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int,
    state: Tensor | None = None,
    return_state: bool = False,
):
    """Mamba-2's chunked form: quadratic inside each chunk, recurrent between chunks.

    For a chunk of steps ``0..Q-1`` entered with the state ``h`` (``cum_i`` is
    ``log(a_0 ... a_i)`` within the chunk):

        y_i = [(L o C B^T) x]_i + (a_0 ... a_i) h C_i
        h  <- (a_0 ... a_{Q-1}) h + sum_j (a_{j+1} ... a_{Q-1}) x_j B_j^T

    Args:
        x: ``(batch, L, H, P)``; log_a: ``(batch, L, H)``; B, C: ``(batch, L, H, N)``.
        chunk_size: ``Q >= 1``; ``L`` need not be a multiple (the last chunk is shorter).
        state: ``(batch, H, P, N)`` to continue from (default zeros).
        return_state: also return the state after the last step.

    Returns:
        ``y`` ``(batch, L, H, P)``, or ``(y, state)``.
    """
    check_ssd_inputs(x, log_a, B, C)
    check_int("chunk_size", chunk_size)
    batch, L, H, P = x.shape
    h = x.new_zeros(batch, H, P, B.size(-1)) if state is None else state
    ys = []
    for start in range(0, L, chunk_size):
        chunk = slice(start, start + chunk_size)
        xc, ac, Bc, Cc = x[:, chunk], log_a[:, chunk], B[:, chunk], C[:, chunk]
        cum = ac.cumsum(dim=1)  # (batch, Q, H): log(a_0 ... a_i) within the chunk
        inside = ssd_attention(xc, ac, Bc, Cc)  # the chunk's own tokens: quadratic form
        carried = torch.einsum("bhpn,bihn->bihp", h, Cc) * cum.exp()[..., None]  # (a_0..a_i) h C_i
        ys.append(inside + carried)
        to_end = torch.exp(cum[:, -1:] - cum)  # a_{j+1} ... a_{Q-1}: (batch, Q, H)
        written = torch.einsum("bjh,bjhp,bjhn->bhpn", to_end, xc, Bc)  # the chunk's own tokens
        h = cum[:, -1].exp()[..., None, None] * h + written  # (a_0 ... a_{Q-1}) h + written
    y = torch.cat(ys, dim=1) if ys else x.new_zeros(x.shape)
    return (y, h) if return_state else y
