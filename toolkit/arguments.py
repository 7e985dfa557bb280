"""Argument checks shared by the toolkit and the course notebooks.

Bad input should fail at once, with a ``ValueError`` that names the argument, says
what was expected and shows what came in, rather than deep inside a matrix product
with a shape error nobody can trace back. Every check here does exactly that and
returns nothing when the argument is fine. The toolkit's references call them, and so
do the notebook exercises that are copies of those references, so a student's
function refuses bad input with the same message as the toolkit's.

Sections: numbers; positional-encoding settings; attention tensors; Transformer
blocks; norms and feed-forward networks; masked language modelling and distillation;
experts and recurrent layers. Tensor shapes follow the toolkit: attention tensors
``(B, H, T, d)``, module inputs ``(B, T, d_model)``.
"""

from __future__ import annotations

import torch
from torch import Tensor

#: The two memory layouts of RoPE's feature pairs (see :func:`toolkit.position.apply_rope`).
ROPE_LAYOUTS = ("half", "interleaved")

#: Activations of :class:`toolkit.transformer.PositionwiseFeedForward` and its blocks.
BLOCK_ACTIVATIONS = ("gelu", "relu")

#: The two gate conventions of a mixture of experts, by the order of softmax and top-k
#: (see :func:`toolkit.moe.top_k_gating`).
GATINGS = ("softmax_then_topk", "topk_then_softmax")


# --------------------------------------------------------------------------------------
# Numbers
# --------------------------------------------------------------------------------------


def check_int(name: str, value, *, minimum: int = 1) -> None:
    """``value`` is an ``int`` (a ``bool`` is not) and at least ``minimum``.

    ``minimum=1`` (the default) for sizes and counts, ``minimum=0`` where zero makes
    sense (an empty table, no extra blocks).
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_even(name: str, value) -> None:
    """``value`` is an even integer >= 2: a feature size split into pairs."""
    check_int(name, value, minimum=2)
    if value % 2:
        raise ValueError(
            f"{name}={value} must be even: features are rotated/encoded in pairs; "
            "use an even dimension"
        )


def check_dropout(dropout) -> None:
    """A dropout probability ``p`` with ``0 <= p < 1`` (``p = 1`` would drop everything)."""
    if not (isinstance(dropout, (int, float)) and 0.0 <= dropout < 1.0):
        raise ValueError(f"dropout must be in [0, 1), got {dropout!r}")


# --------------------------------------------------------------------------------------
# Positional-encoding settings
# --------------------------------------------------------------------------------------


def check_frequency_base(base) -> None:
    """The geometric base of sinusoid / RoPE frequencies ``base^(-2i/d)``: a number > 1."""
    if not (isinstance(base, (int, float)) and base > 1):
        raise ValueError(f"base must be a number > 1 (10000.0 is the usual choice), got {base!r}")


def check_context_scale(scale) -> None:
    """A context-extension factor ``s = L_new / L_train >= 1`` (1 means no extension)."""
    if not (isinstance(scale, (int, float)) and scale >= 1):
        raise ValueError(
            f"scale = L_new / L_train must be a number >= 1 (1.0 means no extension), got {scale!r}"
        )


def check_rope_layout(layout) -> None:
    """One of :data:`ROPE_LAYOUTS`: ``"half"`` or ``"interleaved"``."""
    if layout not in ROPE_LAYOUTS:
        raise ValueError(
            f"layout must be 'half' (GPT-NeoX / HF LLaMA) or 'interleaved' (RoFormer / GPT-J), "
            f"got {layout!r}"
        )


# --------------------------------------------------------------------------------------
# Attention tensors
# --------------------------------------------------------------------------------------


def check_kv_heads(n_heads: int, n_kv_heads: int) -> None:
    """Grouped-query heads: both counts >= 1 and ``n_heads`` a multiple of ``n_kv_heads``."""
    if n_kv_heads < 1 or n_heads < 1:
        raise ValueError(f"n_heads and n_kv_heads must be >= 1, got {n_heads}, {n_kv_heads}")
    if n_heads % n_kv_heads != 0:
        raise ValueError(
            f"n_heads={n_heads} must be a multiple of n_kv_heads={n_kv_heads} "
            "(each KV head serves a whole group of query heads)"
        )


def check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    """``q (B, H, T_q, d)``, ``k (B, H, T_k, d)``, ``v (B, H, T_k, d_v)``: same heads and batch."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, H, T, d), got shape {tuple(t.shape)}")
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same feature size, got {q.shape[-1]} and {k.shape[-1]}")
    if k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"k and v need the same (B, H, T), got {tuple(k.shape)} and {tuple(v.shape)}"
        )
    if q.shape[:2] != k.shape[:2]:
        raise ValueError(f"q and k need the same (B, H), got {tuple(q.shape)} and {tuple(k.shape)}")


def check_flash_inputs(q: Tensor, k: Tensor, v: Tensor, block_q: int, block_k: int) -> int:
    """Tiled attention's inputs; returns the GQA group size ``g = H / H_kv``.

    ``q (B, H, N_q, d)``, ``k (B, H_kv, N_k, d)``, ``v (B, H_kv, N_k, d_v)`` with ``H`` a
    multiple of ``H_kv``, and tile sizes ``block_q, block_k >= 1``.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{name} must be (B, heads, N, d), got shape {tuple(t.shape)}")
    if q.shape[0] != k.shape[0] or k.shape[:3] != v.shape[:3]:
        raise ValueError(
            f"k and v must be (B, H_kv, N_k, .) with q's batch; got q {tuple(q.shape)}, "
            f"k {tuple(k.shape)}, v {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k need the same d, got {q.shape[-1]} and {k.shape[-1]}")
    H, H_kv = q.shape[1], k.shape[1]
    if H % H_kv != 0:
        raise ValueError(f"q heads ({H}) must be a multiple of k/v heads ({H_kv}) for GQA")
    if block_q < 1 or block_k < 1:
        raise ValueError(f"block_q and block_k must be >= 1, got {block_q}, {block_k}")
    return H // H_kv


def check_flash_backward_inputs(q: Tensor, out: Tensor, lse: Tensor, dout: Tensor) -> None:
    """The FlashAttention backward's extra inputs fit the forward's ``q (B, H, N_q, d)``.

    ``out`` and ``dout`` ``(B, H, N_q, d)`` in ``q``'s dtype and on its device (the
    forward's output and the loss's gradient with respect to it); ``lse`` ``(B, H, N_q)``
    float32 (or float64 for float64 gradient checks) on ``q``'s device (the forward's
    natural-log log-sum-exp).
    """
    for name, t in (("out", out), ("dout", dout)):
        if not isinstance(t, Tensor) or t.shape != q.shape:
            got = tuple(t.shape) if isinstance(t, Tensor) else type(t).__name__
            raise ValueError(f"{name} must have q's shape {tuple(q.shape)}, got {got}")
        if t.dtype != q.dtype or t.device != q.device:
            raise ValueError(
                f"{name} must have q's dtype and device ({q.dtype}, {q.device}), "
                f"got {t.dtype}, {t.device}"
            )
    lse_dtypes = (torch.float32, torch.float64) if q.dtype == torch.float64 else (torch.float32,)
    if not isinstance(lse, Tensor) or lse.shape != q.shape[:3] or lse.dtype not in lse_dtypes:
        got = f"{tuple(lse.shape)} {lse.dtype}" if isinstance(lse, Tensor) else type(lse).__name__
        raise ValueError(
            f"lse must be the forward's float32 log-sum-exp, shape {tuple(q.shape[:3])}; got {got}"
        )
    if lse.device != q.device:
        raise ValueError(f"lse must be on q's device {q.device}, got {lse.device}")


def check_bool_mask(name: str, mask: Tensor | None) -> None:
    """``None`` or a ``bool`` mask (``True`` = may attend), never 1/0 numbers."""
    if mask is not None and mask.dtype != torch.bool:
        raise ValueError(
            f"{name} must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "convert 1/0 attention masks with toolkit.masks.padding_mask_from_attention_mask"
        )


# --------------------------------------------------------------------------------------
# Transformer blocks
# --------------------------------------------------------------------------------------


def check_block_args(d_model: int, n_heads: int, d_ff: int, dropout: float, activation: str):
    """A block's sizes (positive integers), dropout and activation (:data:`BLOCK_ACTIVATIONS`)."""
    check_int("d_model", d_model)
    check_int("n_heads", n_heads)
    check_int("d_ff", d_ff)
    check_dropout(dropout)
    if activation not in BLOCK_ACTIVATIONS:
        raise ValueError(
            f"activation must be one of {sorted(BLOCK_ACTIVATIONS)}, got {activation!r}"
        )


def check_sequence(name: str, x: Tensor, d_model: int) -> None:
    """A batch of sequences ``(batch, seq, d_model)``."""
    if x.dim() != 3 or x.size(-1) != d_model:
        raise ValueError(
            f"{name} must have shape (batch, seq, d_model={d_model}), got {tuple(x.shape)}"
        )


# --------------------------------------------------------------------------------------
# Norms and feed-forward networks
# --------------------------------------------------------------------------------------


def check_eps(eps) -> None:
    """A norm's ``eps``: a number ``>= 0`` (added to the variance inside the square root)."""
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps < 0:
        raise ValueError(f"eps must be a number >= 0 (1e-5 and 1e-6 are usual), got {eps!r}")


def check_features(name: str, x: Tensor, d_model: int) -> None:
    """A tensor ``(..., d_model)`` whose last axis holds a token's features."""
    if x.dim() == 0 or x.size(-1) != d_model:
        raise ValueError(f"{name} must have last dimension d_model={d_model} (the features), "
                         f"got shape {tuple(x.shape)}")


def check_activation(activation, choices) -> None:
    """``activation`` names one of ``choices`` (e.g. the keys of ``toolkit.ffn.ACTIVATIONS``)."""
    if activation not in choices:
        raise ValueError(f"activation must be one of {sorted(choices)}, got {activation!r}")


# --------------------------------------------------------------------------------------
# Masked language modelling and distillation
# --------------------------------------------------------------------------------------


def check_token_ids(name: str, ids: Tensor, dims: int | None = None) -> None:
    """Integer token ids (``int64`` or ``int32``), with ``dims`` axes when given."""
    if ids.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{name} must hold integer token ids, got dtype {ids.dtype}")
    if dims is not None and ids.dim() != dims:
        raise ValueError(f"{name} must have {dims} axes ((N, T) for 2), got {tuple(ids.shape)}")


def check_mlm_probabilities(mlm_probability, mask_replace_prob, random_replace_prob) -> None:
    """BERT's masking rates: each in ``[0, 1]`` and ``mask + random <= 1`` (the rest stay)."""
    if not (0 <= mlm_probability <= 1 and 0 <= mask_replace_prob <= 1
            and 0 <= random_replace_prob <= 1 - mask_replace_prob):
        raise ValueError("probabilities must lie in [0, 1], with mask_replace_prob + "
                         f"random_replace_prob <= 1; got mlm_probability={mlm_probability}, "
                         f"mask_replace_prob={mask_replace_prob}, "
                         f"random_replace_prob={random_replace_prob}")


def check_same_shape(name_a: str, a: Tensor, name_b: str, b: Tensor) -> None:
    """Two tensors compared position by position (a student's and a teacher's logits)."""
    if a.shape != b.shape:
        raise ValueError(f"{name_a} {tuple(a.shape)} and {name_b} {tuple(b.shape)} must have "
                         "the same shape")


def check_temperature(temperature) -> None:
    """A softmax temperature ``T > 0`` (``T = 1`` leaves the distribution as it is)."""
    if isinstance(temperature, bool) or not (isinstance(temperature, (int, float))
                                             and temperature > 0):
        raise ValueError(f"temperature must be a number > 0, got {temperature!r}")


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
            "delta B); use toolkit.ssm.discretize_zoh_matrix for a singular A"
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
