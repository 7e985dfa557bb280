"""Time-invariant SSMs: zero-order hold, the recurrence, and the same thing as a convolution.

**Discretisation.** Hold the input constant over a step of length ``delta`` (zero-order
hold, ZOH) and integrate ``h' = A h + B u`` exactly over the step:

    h_t = A_bar h_{t-1} + B_bar u_t,
    A_bar = exp(delta A),
    B_bar = (delta A)^{-1} (exp(delta A) - I) delta B.

For a diagonal ``A`` (S4D, Mamba) everything is elementwise, and
``B_bar = (exp(delta A) - 1) / A * B`` (:func:`discretize_zoh`). For a full matrix the
same pair comes out of one matrix exponential of a block matrix (Van Loan's trick,
:func:`discretize_zoh_matrix`), a useful check of the diagonal formula.

Mamba's reference code keeps the exact ``A_bar`` but takes ``B_bar = delta B``, the
first-order (Euler) approximation of the same integral (:func:`discretize_simplified`;
the two agree as ``delta A -> 0``). Which one a function uses is part of its contract.

**Recurrent = convolutional.** Unroll the recurrence from ``h_{-1} = 0``:

    y_t = C h_t + D u_t = sum_{l=0}^{t} C A_bar^l B_bar u_{t-l} + D u_t,

a causal convolution of ``u`` with the kernel ``K = (C B_bar, C A_bar B_bar,
C A_bar^2 B_bar, ...)`` (S4, arXiv 2111.00396). Training uses the convolution (all
positions at once, by FFT in ``O(L log L)``), generation the recurrence (constant
memory per token). :func:`ssm_recurrent` and :func:`ssm_convolutional` compute the same
numbers; the kernel's length is how far back the model can remember, and
``|A_bar| < 1`` (``A < 0``) makes it fade.

Shapes: ``H`` independent channels with state size ``N`` each: ``A, B, C`` are
``(H, N)`` (diagonal ``A``, real as in S4D-Real and Mamba), ``D`` is ``(H,)``, inputs
``u`` are ``(batch, L, H)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_step_sizes, check_zoh_inputs


def broadcast_delta(delta, like: Tensor) -> Tensor:
    """``delta`` (a float or a tensor ``(...)``, all ``> 0``) as a ``(..., 1)`` tensor."""
    check_step_sizes(delta)
    delta = torch.as_tensor(delta, dtype=like.dtype, device=like.device)
    return delta[..., None]  # broadcast over the state axis N


def discretize_zoh(delta, A: Tensor, B: Tensor) -> tuple[Tensor, Tensor]:
    """Exact zero-order hold for a diagonal ``A``.

    Args:
        delta: step size(s) ``> 0``: a float or a tensor ``(...)`` broadcastable to the
            leading axes of ``A`` (one step per channel, or per token and channel).
        A: ``(..., N)`` the diagonal of ``A``, nonzero (negative for a stable SSM).
        B: ``(..., N)``, broadcastable with ``A``.

    Returns:
        ``(A_bar, B_bar)``: ``A_bar = exp(delta A)``,
        ``B_bar = (delta A)^{-1} (exp(delta A) - 1) delta B = (exp(delta A) - 1) / A * B``.
    """
    check_zoh_inputs(delta, A)
    delta = broadcast_delta(delta, A)
    dA = delta * A  # delta A, elementwise for a diagonal A
    A_bar = torch.exp(dA)  # exp(delta A)
    B_bar = torch.expm1(dA) / A * B  # (delta A)^{-1} (exp(delta A) - 1) delta B
    return A_bar, B_bar


def discretize_simplified(delta, A: Tensor, B: Tensor) -> tuple[Tensor, Tensor]:
    """Mamba's discretisation: exact ``A_bar = exp(delta A)``, Euler ``B_bar = delta B``.

    Args and returns as in :func:`discretize_zoh` (``A`` may contain zeros here).
    """
    delta = broadcast_delta(delta, A)
    return torch.exp(delta * A), delta * B


def discretize_zoh_matrix(delta: float, A: Tensor, B: Tensor) -> tuple[Tensor, Tensor]:
    """Zero-order hold for a full ``A`` ``(N, N)`` and ``B`` ``(N, P)`` (Van Loan, 1978).

    ``exp(delta [[A, B], [0, 0]]) = [[A_bar, B_bar], [0, I]]``: the top blocks are the
    exact ``A_bar`` and ``B_bar``, with no inverse of ``A`` needed (so ``A`` may be
    singular).
    """
    if A.dim() != 2 or A.size(0) != A.size(1) or B.dim() != 2 or B.size(0) != A.size(0):
        raise ValueError(
            f"A must be (N, N) and B (N, P), got {tuple(A.shape)} and {tuple(B.shape)}"
        )
    check_step_sizes(delta)
    N, P = B.shape
    M = torch.zeros(N + P, N + P, dtype=A.dtype, device=A.device)
    M[:N, :N], M[:N, N:] = A, B  # [[A, B], [0, 0]]
    E = torch.linalg.matrix_exp(delta * M)
    return E[:N, :N], E[:N, N:]


def _check_lti(A_bar: Tensor, B_bar: Tensor, C: Tensor, u: Tensor) -> None:
    if not (A_bar.dim() == 2 and A_bar.shape == B_bar.shape == C.shape):
        raise ValueError(
            "A_bar, B_bar and C must all be (H, N), got "
            f"{tuple(A_bar.shape)}, {tuple(B_bar.shape)}, {tuple(C.shape)}"
        )
    if u.dim() != 3 or u.size(-1) != A_bar.size(0):
        raise ValueError(f"u must be (batch, L, H={A_bar.size(0)}), got {tuple(u.shape)}")


def ssm_recurrent(
    A_bar: Tensor,
    B_bar: Tensor,
    C: Tensor,
    D: Tensor | None,
    u: Tensor,
    state: Tensor | None = None,
    return_state: bool = False,
):
    """Run ``h_t = A_bar h_{t-1} + B_bar u_t``, ``y_t = C h_t + D u_t`` one step at a time.

    Args:
        A_bar, B_bar, C: ``(H, N)``; D: ``(H,)`` or ``None`` (no skip term).
        u: ``(batch, L, H)``.
        state: ``(batch, H, N)`` to continue from (default zeros).
        return_state: also return the last state.

    Returns:
        ``y`` ``(batch, L, H)``, or ``(y, state)``.
    """
    _check_lti(A_bar, B_bar, C, u)
    h = u.new_zeros(u.size(0), *A_bar.shape) if state is None else state  # (batch, H, N)
    ys = []
    for t in range(u.size(1)):
        h = A_bar * h + B_bar * u[:, t, :, None]  # h_t = A_bar h_{t-1} + B_bar u_t
        ys.append((C * h).sum(-1))  # C h_t: (batch, H)
    y = torch.stack(ys, dim=1) if ys else u.new_zeros(u.shape)
    if D is not None:
        y = y + D * u  # skip term D u_t
    return (y, h) if return_state else y


def ssm_kernel(A_bar: Tensor, B_bar: Tensor, C: Tensor, length: int) -> Tensor:
    """``K_l = C A_bar^l B_bar`` for ``l = 0 .. length - 1``: ``(H, length)``."""
    if A_bar.shape != B_bar.shape or A_bar.shape != C.shape:
        raise ValueError("A_bar, B_bar and C must have the same (H, N) shape")
    powers = A_bar[..., None] ** torch.arange(length, device=A_bar.device)  # A_bar^l: (H, N, L)
    return (C[..., None] * powers * B_bar[..., None]).sum(-2)  # sum over the state axis N


def ssm_convolutional(
    A_bar: Tensor, B_bar: Tensor, C: Tensor, D: Tensor | None, u: Tensor
) -> Tensor:
    """The same output as :func:`ssm_recurrent`, as a causal convolution with ``K`` (by FFT).

    Returns:
        ``(batch, L, H)``.
    """
    _check_lti(A_bar, B_bar, C, u)
    L = u.size(1)
    K = ssm_kernel(A_bar, B_bar, C, L)  # (H, L)
    n = 2 * L  # zero-pad so that the circular FFT convolution is a linear (causal) one
    y = torch.fft.irfft(torch.fft.rfft(u.transpose(1, 2), n) * torch.fft.rfft(K, n), n)[..., :L]
    y = y.transpose(1, 2)  # y_t = sum_{l <= t} K_l u_{t-l}: (batch, L, H)
    return y + D * u if D is not None else y
