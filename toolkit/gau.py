"""The gated attention unit (GAU): one cheap head, gated like a GLU (arXiv 2202.10447).

A Transformer block spends its parameters on multi-head attention and then an MLP.
Hua et al. merge the two into one layer built around a gated linear unit
(``O = (U * V) W_o``, as in a GLU feed-forward network) and let a single, weak
attention head mix the ``V`` branch across tokens before the gating:

    U = silu(X W_u),  V = silu(X W_v)        (T, e),  e = expansion_factor * d_model
    Z = silu(X W_z)                           (T, s),  s small (128 in the paper)
    Q = Z * gamma_q + beta_q                  per-dimension scale and offset,
    K = Z * gamma_k + beta_k                  separate for Q and K
    A = relu(Q K^T / T + bias)^2              (T, T), squared ReLU instead of softmax
    O = (U * (A V)) W_o

Queries and keys are two cheap affine views of one shared low-dimensional ``Z``; with
the same scale and offset they would be identical and ``Q K^T`` symmetric, so token
``i`` would score ``j`` exactly as ``j`` scores ``i``. The squared ReLU (from Primer,
arXiv 2109.08668) needs no softmax normalisation: the paper divides the scores by the
sequence length ``T`` instead, and adds a relative position bias (or RoPE) before the
ReLU. The attention can be this weak because the gate ``U`` does much of the work.

Conventions chosen here: the unit is the paper's ``O`` (no norm and no residual: the
block around it adds those, as for every other mixer in the toolkit). With
``causal=True`` future keys get zero weight and row ``i`` is divided by ``i + 1``, the
number of keys it sees, so a prefix's outputs do not depend on what follows it
(the paper's pseudo-code shows the bidirectional case, divided by ``T``). Parameter
names: ``u_proj``, ``v_proj``, ``z_proj``, ``o_proj``, and ``q_gamma``, ``q_beta``,
``k_gamma``, ``k_beta`` of shape ``(s,)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_int, check_sequence


class GatedAttentionUnit(nn.Module):
    """``(batch, T, d_model) -> (batch, T, d_model)``.

    Args:
        d_model: model width.
        expansion_factor: ``e = int(expansion_factor * d_model)``, the width of ``U`` and
            ``V`` (paper: 2).
        d_qk: ``s``, the width of ``Z``, ``Q`` and ``K`` (paper: 128).
        causal: decoder-style: key ``j`` is visible to query ``i`` only if ``j <= i``.
        bias: biases in the four linear maps.
    """

    def __init__(
        self,
        d_model: int,
        expansion_factor: float = 2.0,
        d_qk: int = 128,
        causal: bool = False,
        bias: bool = True,
    ):
        super().__init__()
        check_int("d_model", d_model)
        check_int("d_qk", d_qk)
        e = int(expansion_factor * d_model)
        check_int("int(expansion_factor * d_model)", e)
        self.d_model, self.causal = d_model, causal
        self.u_proj = nn.Linear(d_model, e, bias=bias)  # gate branch U
        self.v_proj = nn.Linear(d_model, e, bias=bias)  # value branch V
        self.z_proj = nn.Linear(d_model, d_qk, bias=bias)  # shared base Z of Q and K
        self.q_gamma = nn.Parameter(1.0 + 0.02 * torch.randn(d_qk))  # Q = Z * gamma_q + beta_q
        self.q_beta = nn.Parameter(torch.zeros(d_qk))
        self.k_gamma = nn.Parameter(1.0 + 0.02 * torch.randn(d_qk))  # K = Z * gamma_k + beta_k
        self.k_beta = nn.Parameter(torch.zeros(d_qk))
        self.o_proj = nn.Linear(e, d_model, bias=bias)

    def forward(self, x: Tensor, attn_bias: Tensor | None = None) -> Tensor:
        """Args:
            x: ``(batch, T, d_model)``.
            attn_bias: optional ``(T, T)`` (or broadcastable) additive position bias,
                added after the division by the length and before the ReLU.

        Returns:
            ``(batch, T, d_model)``.
        """
        check_sequence("x", x, self.d_model)
        T = x.size(1)
        u = F.silu(self.u_proj(x))  # (batch, T, e)
        v = F.silu(self.v_proj(x))  # (batch, T, e)
        z = F.silu(self.z_proj(x))  # (batch, T, s)
        q = z * self.q_gamma + self.q_beta  # per-dimension scale and offset for Q...
        k = z * self.k_gamma + self.k_beta  # ...and different ones for K
        scores = q @ k.transpose(-2, -1)  # (batch, T, T)
        if self.causal:
            visible = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()  # j <= i
            n_keys = torch.arange(1, T + 1, device=x.device, dtype=x.dtype)[:, None]  # i + 1
            scores = scores / n_keys
        else:
            scores = scores / T
        if attn_bias is not None:
            scores = scores + attn_bias
        A = F.relu(scores).square()  # relu(.)^2, no softmax
        if self.causal:
            A = A.masked_fill(~visible, 0.0)  # future keys get exactly 0
        return self.o_proj(u * (A @ v))  # O = (U * A V) W_o
