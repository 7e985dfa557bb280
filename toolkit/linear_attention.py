"""Linear attention: "Transformers are RNNs" (Katharopoulos et al., arXiv 2006.16236).

Softmax attention computes, for query ``i``,

    out_i = sum_j sim(q_i, k_j) v_j / sum_j sim(q_i, k_j),   sim(q, k) = exp(q.k / sqrt(d)).

Replace the similarity by a dot product of feature maps, ``sim(q, k) = phi(q).phi(k)``
with ``phi(x) = elu(x) + 1`` (positive, so the weights stay positive). Then the sum
factorises, because ``phi(q_i)`` does not depend on ``j``:

    out_i = phi(q_i)^T (sum_j phi(k_j) v_j^T) / (phi(q_i)^T sum_j phi(k_j))
          = phi(q_i)^T S / (phi(q_i)^T z)

with ``S = phi(K)^T V`` (``d x d_v``) and ``z = phi(K)^T 1`` (``d``). Computing ``S`` once
costs ``O(T d d_v)``: linear in the sequence length instead of quadratic.

Causal version: query ``i`` may only use keys ``j <= i``, so ``S`` and ``z`` become
*prefix sums* ``S_i = sum_{j<=i} phi(k_j) v_j^T``, ``z_i = sum_{j<=i} phi(k_j)``. Written
as a loop this is a recurrent network with a matrix-valued state:

    S_i = S_{i-1} + phi(k_i) v_i^T,   z_i = z_{i-1} + phi(k_i),
    out_i = phi(q_i)^T S_i / (phi(q_i)^T z_i)

so a causal linear-attention model decodes each new token in ``O(d d_v)`` time and
memory, independent of how many tokens came before. The three forms here compute the
same numbers (the tests check it):

* :func:`linear_attention_quadratic`: the ``T x T`` form ``phi(Q) phi(K)^T``, masked and
  row-normalised, to connect back to ordinary attention;
* :func:`linear_attention` / :func:`causal_linear_attention`: the factorised forms;
* :func:`causal_linear_attention_recurrent`: the RNN form, one step per token.

All tensors are ``(B, H, T, d)``; ``v`` may have its own last dimension ``d_v``.
There is no ``1/sqrt(d)`` scaling: the normalisation by ``phi(q)^T z`` already
makes the weights sum to 1 (as in the paper).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from toolkit.arguments import check_qkv

FeatureMap = Callable[[Tensor], Tensor]


def elu_feature_map(x: Tensor) -> Tensor:
    """``phi(x) = elu(x) + 1``: positive everywhere, ``x + 1`` for ``x > 0``, ``exp(x)`` below."""
    return F.elu(x) + 1.0  # elu(x) + 1 > 0


def linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> Tensor:
    """Non-causal linear attention in ``O(T d d_v)``.

    Args:
        q: ``(B, H, T_q, d)``; k: ``(B, H, T_k, d)``; v: ``(B, H, T_k, d_v)``.
        feature_map: ``phi``, applied to queries and keys.
        eps: added to the normaliser to avoid dividing by zero.

    Returns:
        ``(B, H, T_q, d_v)``.
    """
    check_qkv(q, k, v)
    phi_q, phi_k = feature_map(q), feature_map(k)
    kv = phi_k.transpose(-2, -1) @ v  # S = phi(K)^T V: (B, H, d, d_v)
    z = phi_k.sum(dim=-2)  # z = phi(K)^T 1: (B, H, d)
    numerator = phi_q @ kv  # phi(q_i)^T S: (B, H, T_q, d_v)
    denominator = (phi_q * z.unsqueeze(-2)).sum(-1, keepdim=True)  # phi(q_i)^T z: (B, H, T_q, 1)
    return numerator / (denominator + eps)


def causal_linear_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> Tensor:
    """Causal linear attention with prefix sums (``torch.cumsum``) over time.

    Materialises every prefix state ``S_i`` at once: ``(B, H, T, d, d_v)`` memory.
    That is wasteful, but it shows that the causal form is an ordinary parallel
    computation; efficient implementations process chunks and carry the state.

    Args:
        q, k: ``(B, H, T, d)``; v: ``(B, H, T, d_v)`` (same ``T``).

    Returns:
        ``(B, H, T, d_v)``.
    """
    check_qkv(q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"causal attention needs T_q == T_k, got {q.shape[2]} and {k.shape[2]}")
    phi_q, phi_k = feature_map(q), feature_map(k)
    outer = phi_k.unsqueeze(-1) * v.unsqueeze(-2)  # phi(k_j) v_j^T: (B, H, T, d, d_v)
    S = outer.cumsum(dim=2)  # S_i = sum_{j<=i} phi(k_j) v_j^T
    z = phi_k.cumsum(dim=2)  # z_i = sum_{j<=i} phi(k_j): (B, H, T, d)
    numerator = (phi_q.unsqueeze(-1) * S).sum(dim=-2)  # phi(q_i)^T S_i: (B, H, T, d_v)
    denominator = (phi_q * z).sum(-1, keepdim=True)  # phi(q_i)^T z_i: (B, H, T, 1)
    return numerator / (denominator + eps)


def causal_linear_attention_recurrent(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
    state: tuple[Tensor, Tensor] | None = None,
    return_state: bool = False,
):
    """Causal linear attention as an RNN: one token per step, constant-size state.

    Args:
        q, k: ``(B, H, T, d)``; v: ``(B, H, T, d_v)``.
        state: optional ``(S, z)`` from an earlier call, ``S (B, H, d, d_v)`` and
            ``z (B, H, d)``; lets you feed a sequence in pieces (incremental decoding).
        return_state: also return the final ``(S, z)``.

    Returns:
        ``(B, H, T, d_v)``, or ``(out, (S, z))`` if ``return_state``.
    """
    check_qkv(q, k, v)
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"causal attention needs T_q == T_k, got {q.shape[2]} and {k.shape[2]}")
    B, H, T, d = q.shape
    d_v = v.shape[-1]
    phi_q, phi_k = feature_map(q), feature_map(k)
    if state is None:
        S = q.new_zeros(B, H, d, d_v)  # S_0 = 0
        z = q.new_zeros(B, H, d)  # z_0 = 0
    else:
        S, z = state
    outputs = []
    for t in range(T):
        S = S + phi_k[:, :, t, :, None] * v[:, :, t, None, :]  # S_t = S_{t-1} + phi(k_t) v_t^T
        z = z + phi_k[:, :, t]  # z_t = z_{t-1} + phi(k_t)
        num = (phi_q[:, :, t, :, None] * S).sum(-2)  # phi(q_t)^T S_t: (B, H, d_v)
        den = (phi_q[:, :, t] * z).sum(-1, keepdim=True)  # phi(q_t)^T z_t: (B, H, 1)
        outputs.append(num / (den + eps))
    out = torch.stack(outputs, dim=2) if outputs else v.new_zeros(B, H, 0, d_v)
    return (out, (S, z)) if return_state else out


def linear_attention_quadratic(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    causal: bool = False,
    feature_map: FeatureMap = elu_feature_map,
    eps: float = 1e-6,
) -> Tensor:
    """The same attention written the quadratic way, to compare with softmax attention.

    ``A = phi(Q) phi(K)^T`` (``T x T``, all entries positive), zeroed above the
    diagonal if ``causal``, then each row divided by its sum: ``out = (A / A 1) V``.
    Softmax attention is the special case ``A = exp(Q K^T / sqrt(d))``.

    Returns:
        ``(B, H, T_q, d_v)``; with ``causal``, ``T_q`` must equal ``T_k`` (as for the
        factorised causal forms it is compared with).
    """
    check_qkv(q, k, v)
    if causal and q.shape[2] != k.shape[2]:
        raise ValueError(f"causal attention needs T_q == T_k, got {q.shape[2]} and {k.shape[2]}")
    A = feature_map(q) @ feature_map(k).transpose(-2, -1)  # phi(q_i).phi(k_j): (B, H, T_q, T_k)
    if causal:
        T = A.shape[-1]
        keep = torch.ones(T, T, dtype=torch.bool, device=A.device).tril()  # j <= i
        A = A * keep  # masked cells contribute 0 (not -inf: there is no softmax here)
    return (A @ v) / (A.sum(-1, keepdim=True) + eps)  # row-normalised weights times V
