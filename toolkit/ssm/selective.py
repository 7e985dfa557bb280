"""Mamba's selective scan: an SSM whose step, input and output maps depend on the token.

An LTI SSM applies the same ``A_bar, B_bar, C`` at every step, so it cannot decide to
remember one token and ignore the next. Mamba (arXiv 2312.00752, Algorithm 2) makes
``delta``, ``B`` and ``C`` functions of the current input:

    delta_t = softplus(W_delta x_t + b)  > 0     (per channel: how big a step to take)
    B_t = W_B x_t,  C_t = W_C x_t                 (per token, shared by the channels)
    A = -exp(A_log)                               (a learned constant, always negative)

    h_t = exp(delta_t A) h_{t-1} + delta_t B_t u_t,      y_t = C_t h_t + D u_t.

A large ``delta_t`` resets the state towards the current input (``exp(delta_t A) -> 0``);
a small one keeps the past and ignores the token. ``A = -exp(A_log)`` keeps every
``exp(delta A)`` in ``(0, 1)``, so the state can never blow up, whatever ``A_log`` learns.
As in Mamba's code, ``B_bar = delta B`` (see :func:`toolkit.ssm.lti.discretize_simplified`).

The parameters now change with ``t``, so there is no fixed kernel to convolve with.
But each step is the affine map ``h -> a_t h + b_t`` (with ``a_t = exp(delta_t A)``,
``b_t = delta_t B_t u_t``), and composing two such maps gives another one:

    (a_1, b_1) then (a_2, b_2)  =  (a_2 a_1,  a_2 b_1 + b_2).

This operator is associative, so all prefixes can be computed with a parallel scan in
``log2 L`` rounds (:func:`associative_scan`, Hillis and Steele's form) instead of ``L``
sequential steps: :func:`selective_scan_parallel` equals :func:`selective_scan`.

Shapes (sequence-first, like the rest of the toolkit; Hugging Face's kernels use
``(batch, channels, seq)``): ``u, delta (batch, L, d_inner)``, ``A_log (d_inner, N)``,
``B, C (batch, L, N)``, ``D (d_inner,)``, state ``(batch, d_inner, N)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_selective_inputs


def selective_scan(
    u: Tensor,
    delta: Tensor,
    A_log: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    state: Tensor | None = None,
    return_state: bool = False,
):
    """Mamba's selective SSM, one time step after the other.

    Args:
        u: ``(batch, L, d_inner)`` input.
        delta: ``(batch, L, d_inner)`` step sizes, already positive (after softplus).
        A_log: ``(d_inner, N)``; the SSM uses ``A = -exp(A_log)``.
        B, C: ``(batch, L, N)`` input and output maps of each token.
        D: ``(d_inner,)`` skip weights, or ``None``.
        state: ``(batch, d_inner, N)`` to continue from (default zeros).
        return_state: also return the last state.

    Returns:
        ``y`` ``(batch, L, d_inner)``, or ``(y, state)``.
    """
    check_selective_inputs(u, delta, A_log, B, C)
    batch, L, d_inner = u.shape
    A = -torch.exp(A_log)  # (d_inner, N), negative: the state decays
    A_bar = torch.exp(delta[..., None] * A)  # exp(delta_t A): (batch, L, d_inner, N)
    Bu = delta[..., None] * B[:, :, None, :] * u[..., None]  # B_bar_t u_t, B_bar_t = delta_t B_t
    h = u.new_zeros(batch, d_inner, A_log.size(1)) if state is None else state
    ys = []
    for t in range(L):  # along time, in order: h_t sees inputs 0..t only
        h = A_bar[:, t] * h + Bu[:, t]  # h_t = A_bar_t h_{t-1} + B_bar_t u_t
        ys.append((h * C[:, t, None, :]).sum(-1))  # C_t h_t: (batch, d_inner)
    y = torch.stack(ys, dim=1) if ys else u.new_zeros(u.shape)
    if D is not None:
        y = y + D * u  # skip term D u_t
    return (y, h) if return_state else y


def selective_step(
    state: Tensor,
    u_t: Tensor,
    delta_t: Tensor,
    A_log: Tensor,
    B_t: Tensor,
    C_t: Tensor,
    D: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One token of :func:`selective_scan`: constant time and memory, whatever came before.

    Args:
        state: ``(batch, d_inner, N)``.
        u_t, delta_t: ``(batch, d_inner)``; B_t, C_t: ``(batch, N)``; A_log, D as above.

    Returns:
        ``(y_t (batch, d_inner), new state)``.
    """
    A_bar = torch.exp(delta_t[..., None] * -torch.exp(A_log))  # exp(delta_t A), A = -exp(A_log)
    state = A_bar * state + delta_t[..., None] * B_t[:, None, :] * u_t[..., None]
    y = (state * C_t[:, None, :]).sum(-1)  # C_t h_t
    return (y + D * u_t if D is not None else y), state


def associative_scan(a: Tensor, b: Tensor, dim: int = 1) -> Tensor:
    """All prefixes of ``h_t = a_t h_{t-1} + b_t`` (``h_{-1} = 0``) in ``ceil(log2 L)`` rounds.

    Hillis-Steele inclusive scan with the operator
    ``(a_1, b_1) . (a_2, b_2) = (a_2 a_1, a_2 b_1 + b_2)``: after round ``r`` each position
    holds the composition of the (up to) ``2^r`` steps ending there. ``O(L log L)`` work,
    ``O(log L)`` depth; a GPU kernel would use the work-efficient (Blelloch) order.

    Args:
        a, b: same shape; ``dim`` is the time axis.

    Returns:
        ``h``, the shape of ``b``.
    """
    if a.shape != b.shape:
        raise ValueError(
            f"a and b must have the same shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    a, b = a.movedim(dim, 0), b.movedim(dim, 0)
    offset = 1
    while offset < a.size(0):
        # Compose every step with the block ending `offset` earlier; before the start
        # stands the identity map (a, b) = (1, 0).
        a_prev = torch.cat([torch.ones_like(a[:offset]), a[:-offset]])
        b_prev = torch.cat([torch.zeros_like(b[:offset]), b[:-offset]])
        a, b = a * a_prev, a * b_prev + b  # (a_2 a_1, a_2 b_1 + b_2)
        offset *= 2
    return b.movedim(0, dim)


def selective_scan_parallel(
    u: Tensor, delta: Tensor, A_log: Tensor, B: Tensor, C: Tensor, D: Tensor | None = None
) -> Tensor:
    """:func:`selective_scan` computed with :func:`associative_scan` (from a zero state).

    Returns:
        ``(batch, L, d_inner)``.
    """
    check_selective_inputs(u, delta, A_log, B, C)
    A_bar = torch.exp(delta[..., None] * -torch.exp(A_log))  # (batch, L, d_inner, N)
    Bu = delta[..., None] * B[:, :, None, :] * u[..., None]
    h = associative_scan(A_bar, Bu, dim=1)  # every h_t at once
    y = (h * C[:, :, None, :]).sum(-1)  # C_t h_t
    return y + D * u if D is not None else y
