"""Argument checks: mixtures of experts and recurrent layers (SSMs, RWKV)."""

from __future__ import annotations

import torch
from torch import Tensor

#: The two gate conventions of a mixture of experts, by the order of softmax and top-k
#: (see :func:`toolkit.moe.top_k_gating`).
GATINGS = ("softmax_then_topk", "topk_then_softmax")



# --------------------------------------------------------------------------------------
# Experts and recurrent layers
# --------------------------------------------------------------------------------------


def check_gating(gating) -> None:
    """One of :data:`GATINGS`: where the softmax sits relative to the top-k choice."""
    if gating not in GATINGS:
        raise ValueError(
            f"gating must be 'topk_then_softmax' (Mixtral: softmax over the k selected logits) "
            f"or 'softmax_then_topk' (Switch/GShard: softmax over all experts), got {gating!r}"
        )


def check_top_k(k, n_experts: int) -> None:
    """Experts per token: an ``int`` with ``1 <= k <= n_experts``."""
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n_experts:
        raise ValueError(f"k must be an integer in [1, n_experts={n_experts}], got {k!r}")


def check_capacity_factor(capacity_factor, *, optional: bool = True) -> None:
    """A number ``> 0`` (1.0 fits a perfectly even split), or ``None`` (no capacity
    limit) where ``optional``."""
    if capacity_factor is None and optional:
        return
    if isinstance(capacity_factor, bool) or not (
        isinstance(capacity_factor, (int, float)) and capacity_factor > 0
    ):
        raise ValueError(
            "capacity_factor must be a number > 0 (Switch uses 1.0 to 1.25)"
            + (" or None for no limit" if optional else "") + f", got {capacity_factor!r}"
        )


def check_routing(indices: Tensor, n_experts: int, gates: Tensor | None = None) -> None:
    """A routing table: int ``(n_tokens, k)`` experts in ``[0, n_experts)``, and ``gates``
    (if given) of the same shape (see :func:`toolkit.moe.top_k_gating`)."""
    if indices.dim() != 2 or indices.dtype not in (torch.int64, torch.int32):
        raise ValueError(
            f"indices must be an int64 (n_tokens, k) tensor, got {indices.dtype} "
            f"{tuple(indices.shape)}"
        )
    if indices.numel() and (indices.min() < 0 or indices.max() >= n_experts):
        raise ValueError(f"indices must lie in [0, n_experts={n_experts})")
    if gates is not None and gates.shape != indices.shape:
        raise ValueError(
            f"gates {tuple(gates.shape)} and indices {tuple(indices.shape)} must have the "
            "same (n_tokens, k) shape"
        )


def check_dispatch_inputs(x: Tensor, gates: Tensor, indices: Tensor, n_experts: int) -> None:
    """Dispatch's tokens ``x (n_tokens, d_model)`` and their routing table (see
    :func:`check_routing` and :func:`toolkit.moe.sorted_dispatch`)."""
    check_routing(indices, n_experts, gates)
    if x.dim() != 2 or x.size(0) != indices.size(0):
        raise ValueError(
            f"x must be (n_tokens={indices.size(0)}, d_model): flatten (batch, seq, d_model) "
            f"first; got {tuple(x.shape)}"
        )


def check_step_sizes(delta) -> None:
    """An SSM's step size ``delta``: a number or a tensor, every entry ``> 0``."""
    if not bool((torch.as_tensor(delta) > 0).all()):
        raise ValueError(
            "delta (the step size) must be > 0 everywhere; Mamba makes it positive with "
            f"softplus; got {delta!r}"
        )


def check_zoh_inputs(delta, A: Tensor) -> None:
    """Zero-order hold of a diagonal ``A``: steps ``> 0`` and no zero in ``A`` (the exact
    ``B_bar`` divides by ``A``; see :func:`toolkit.ssm.discretize_zoh`)."""
    check_step_sizes(delta)
    if bool((A == 0).any()):
        raise ValueError(
            "A has zero entries: the zero-order hold divides by A (as A -> 0, B_bar -> "
            "delta B), so this diagonal form needs every A != 0 (outside the graded "
            "exercise, toolkit.ssm.discretize_zoh_matrix handles a singular A)"
        )


def check_selective_inputs(u: Tensor, delta: Tensor, A_log: Tensor, B: Tensor, C: Tensor) -> None:
    """Mamba's scan inputs: ``u, delta (batch, L, d_inner)``, ``A_log (d_inner, N)``,
    ``B, C (batch, L, N)`` (see :func:`toolkit.ssm.selective_scan`)."""
    if u.dim() != 3 or delta.shape != u.shape:
        raise ValueError(
            f"u and delta must both be (batch, L, d_inner), got {tuple(u.shape)} and "
            f"{tuple(delta.shape)}"
        )
    if A_log.dim() != 2 or A_log.size(0) != u.size(-1):
        raise ValueError(f"A_log must be (d_inner={u.size(-1)}, N), got {tuple(A_log.shape)}")
    expected = (u.size(0), u.size(1), A_log.size(1))
    for name, t in (("B", B), ("C", C)):
        if tuple(t.shape) != expected:
            raise ValueError(f"{name} must be (batch, L, N) = {expected}, got {tuple(t.shape)}")


def check_wkv_inputs(k: Tensor, v: Tensor, w: Tensor, u: Tensor) -> None:
    """RWKV's WKV inputs: ``k, v (batch, T, C)``, ``w, u (C,)`` (see
    :func:`toolkit.rwkv.wkv_recurrent`)."""
    if k.dim() != 3 or v.shape != k.shape:
        raise ValueError(
            f"k and v must both be (batch, T, C), got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    for name, t in (("w", w), ("u", u)):
        if t.shape != (k.size(-1),):
            raise ValueError(f"{name} must be (C={k.size(-1)},), got {tuple(t.shape)}")


def check_ssd_inputs(x: Tensor, log_a: Tensor, B: Tensor, C: Tensor) -> None:
    """Mamba-2's scalar-decay SSM inputs: ``x (batch, L, H, P)``, ``log_a (batch, L, H)``,
    ``B, C (batch, L, H, N)`` (see :func:`toolkit.ssm.ssd_recurrent`)."""
    if x.dim() != 4:
        raise ValueError(f"x must be (batch, L, heads, d_head), got {tuple(x.shape)}")
    if tuple(log_a.shape) != tuple(x.shape[:3]):
        raise ValueError(
            f"log_a must be (batch, L, heads) = {tuple(x.shape[:3])}, got {tuple(log_a.shape)}"
        )
    if B.dim() != 4 or tuple(B.shape[:3]) != tuple(x.shape[:3]) or C.shape != B.shape:
        raise ValueError(
            f"B and C must both be (batch, L, heads, N) with (batch, L, heads) = "
            f"{tuple(x.shape[:3])}, got {tuple(B.shape)} and {tuple(C.shape)}"
        )
