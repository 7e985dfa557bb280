"""Position-wise feed-forward networks: the classic MLP and the GLU family.

After attention has moved information *between* tokens, the feed-forward
network (FFN) processes every token *on its own*, with the same weights at every
position. It holds most of a Transformer's parameters.

Classic FFN (arXiv 1706.03762; GPT-2 uses GELU instead of ReLU):

    FFN(x) = W2 act(W1 x + b1) + b2,   W1: d -> 4d,  W2: 4d -> d

GELU (arXiv 1606.08415) weights its input by the probability that a standard
normal variable is below it:

    GELU(x) = x * Phi(x) = 0.5 x (1 + erf(x / sqrt(2)))                  (exact)
           ~= 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))            (tanh approx.)

GPT-2 was trained with the tanh approximation ("gelu_new" in Hugging Face);
BERT and ``torch.nn.GELU()`` use the exact form. They differ by less than 1e-3.

Gated linear units (GLU family, arXiv 2002.05202) multiply two projections of
the input, one passed through an activation that acts as a gate:

    GLU-variant(x) = W_down (act(W_gate x) * (W_up x))     (elementwise product)

    GLU:    act = sigmoid       ReGLU:  act = ReLU
    GEGLU:  act = GELU          SwiGLU: act = Swish = SiLU, x * sigmoid(x)

A gated FFN has *three* matrices instead of two. To keep the parameter count
of a 4d-hidden classic FFN (``2 * 4d * d = 8 d^2``), the hidden size shrinks to
``(2/3) * 4d = 8d/3`` (``3 * (8d/3) * d = 8 d^2``). LLaMA (arXiv 2302.13971)
then rounds it up to a multiple of 256 for hardware efficiency:
``int(2 * 4 * 4096 / 3) = 10922 -> 11008`` for ``d = 4096``. LLaMA and PaLM use
no biases in these layers.

Parameter names follow Hugging Face: ``gate_proj``, ``up_proj``, ``down_proj``
for the gated family (as in ``LlamaMLP``), ``fc1`` / ``fc2`` for the classic MLP
(as in OPT and BART). Other libraries name the same two matrices differently
(PyTorch's ``nn.TransformerEncoderLayer``: ``linear1`` / ``linear2``; T5:
``wi`` / ``wo``; GPT-2: ``c_fc`` / ``c_proj``); the tests that load their weights
map those names onto ``fc1`` / ``fc2``.

**This module is the toolkit's one feed-forward network.** Two classes, the
variants as options:

=============================  =================================================
:class:`FeedForward`           the classic MLP: ``activation`` (GELU exact or tanh,
                               ReLU, SiLU), ``bias``, ``dropout`` on the output
                               (GPT-2) and ``hidden_dropout`` on the hidden
                               activation (PyTorch's encoder layer, T5)
:class:`GatedFeedForward`      the GLU family: ``activation`` of the gate, ``bias``,
                               ``dropout``; :class:`GLU`, :class:`ReGLU`,
                               :class:`GEGLU`, :class:`SwiGLU` only fix the activation
=============================  =================================================

Its users: the blocks of the three families (:mod:`toolkit.transformer.blocks`, the
classic MLP with PyTorch's dropout placement), the Post-LN / Pre-LN blocks
(:mod:`toolkit.residual`, by name through ``make_ffn``), T5's layers
(:mod:`toolkit.seq2seq.attention`, ReLU without biases), the capstone GPT
(:mod:`toolkit.models`) and the experts of :mod:`toolkit.moe`. One copy stays
outside on purpose: the small position models of :mod:`toolkit.long_context` run
in Lecture and Assignment 02, while the toolkit that students install stubs
:class:`GatedFeedForward` and its subclasses (Assignment 05's exercise) until 05 is
unlocked; so they carry their own SwiGLU, tested equal to :class:`SwiGLU`.

Shapes: every module maps ``(batch, seq, d_model)`` -> ``(batch, seq, d_model)``
(any leading axes work).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_activation, check_dropout, check_int


def gelu_exact(x: Tensor) -> Tensor:
    """``GELU(x) = x * Phi(x)`` with the standard normal CDF ``Phi``.

    Equals ``torch.nn.functional.gelu(x, approximate="none")``.
    """
    # x * Phi(x) with Phi(x) = (1 + erf(x / sqrt(2))) / 2
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def gelu_tanh(x: Tensor) -> Tensor:
    """Tanh approximation of GELU, the form GPT-2 was trained with.

    Equals ``torch.nn.functional.gelu(x, approximate="tanh")``.
    """
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))  # sqrt(2/pi) (x + 0.044715 x^3)
    return 0.5 * x * (1.0 + torch.tanh(inner))  # 0.5 x (1 + tanh(inner))


#: Activations by name, shared by :class:`FeedForward` and :class:`GatedFeedForward`.
ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {
    "gelu": gelu_exact,
    "gelu_tanh": gelu_tanh,
    "relu": F.relu,
    "silu": F.silu,  # Swish with beta = 1: x * sigmoid(x)
    "sigmoid": torch.sigmoid,
}


def swiglu_hidden_dim(d_model: int, multiple_of: int = 256) -> int:
    """Hidden size of a gated FFN with the parameters of a 4d-hidden classic FFN.

    Follows LLaMA's reference code exactly: ``h = int(2 * 4d / 3)`` (8d/3 rounded
    down), then rounded *up* to the next multiple of ``multiple_of``.

    >>> swiglu_hidden_dim(4096)           # LLaMA-7B
    11008
    >>> swiglu_hidden_dim(4096, multiple_of=1)
    10922
    """
    check_int("d_model", d_model)
    check_int("multiple_of", multiple_of)
    hidden = int(2 * (4 * d_model) / 3)  # 8d/3: the parameter-parity hidden size
    return multiple_of * math.ceil(hidden / multiple_of)  # round up to a multiple


class FeedForward(nn.Module):
    """Classic two-layer MLP: ``fc2(act(fc1(x)))``, i.e. ``W2 act(W1 x + b1) + b2``.

    Args:
        d_model: input and output size ``d``.
        d_ff: hidden size (default ``4 d``).
        activation: ``"gelu"`` (exact, default), ``"gelu_tanh"`` (GPT-2), ``"relu"``
            (original Transformer, T5), ``"silu"``.
        bias: whether ``fc1`` and ``fc2`` have biases (GPT-2, BERT: yes; T5: no).
        dropout: dropout on the output (GPT-2's residual dropout).
        hidden_dropout: dropout on the hidden activation, before ``fc2``
            (``nn.TransformerEncoderLayer``'s ``dropout``, T5's ``DenseReluDense``).

    With ``hidden_dropout=p`` and ``dropout=0`` this is the feed-forward part of
    PyTorch's ``nn.TransformerEncoderLayer`` (``linear2(dropout(act(linear1(x))))``,
    its ``linear1`` / ``linear2`` are ``fc1`` / ``fc2``); with ``activation="relu"``,
    ``bias=False`` it is T5's ``wo(relu(wi(x)))``.

    Shapes: ``(..., d_model)`` -> ``(..., d_model)``, through ``(..., d_ff)``.
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        activation: str = "gelu",
        bias: bool = True,
        dropout: float = 0.0,
        hidden_dropout: float = 0.0,
    ):
        super().__init__()
        check_int("d_model", d_model)
        d_ff = 4 * d_model if d_ff is None else d_ff
        check_int("d_ff", d_ff)
        check_activation(activation, ACTIVATIONS)
        check_dropout(hidden_dropout)
        self.act = ACTIVATIONS[activation]
        self.activation = activation
        self.fc1 = nn.Linear(d_model, d_ff, bias=bias)  # W1, b1: d -> 4d
        self.fc2 = nn.Linear(d_ff, d_model, bias=bias)  # W2, b2: 4d -> d
        self.dropout = nn.Dropout(dropout)
        self.hidden_dropout = nn.Dropout(hidden_dropout)

    def forward(self, x: Tensor) -> Tensor:
        h = self.hidden_dropout(self.act(self.fc1(x)))  # act(W1 x + b1): (..., d_ff)
        return self.dropout(self.fc2(h))  # W2 h + b2: (..., d_model)


class GatedFeedForward(nn.Module):
    """Gated FFN: ``down_proj(act(gate_proj(x)) * up_proj(x))`` (arXiv 2002.05202).

    Args:
        d_model: input and output size ``d``.
        d_ff: hidden size; default :func:`swiglu_hidden_dim` ``(d_model, multiple_of)``.
        activation: the gate's activation, a key of :data:`ACTIVATIONS`.
        multiple_of: rounding for the default hidden size (LLaMA: 256).
        bias: biases on the three projections (LLaMA: none).
        dropout: dropout on the output.

    The subclasses :class:`GLU`, :class:`ReGLU`, :class:`GEGLU`, :class:`SwiGLU` fix
    the activation. Shapes: ``(..., d_model)`` -> ``(..., d_model)``.
    """

    default_activation = "silu"

    def __init__(
        self,
        d_model: int,
        d_ff: int | None = None,
        activation: str | None = None,
        multiple_of: int = 256,
        bias: bool = False,
        dropout: float = 0.0,
    ):
        super().__init__()
        check_int("d_model", d_model)
        d_ff = swiglu_hidden_dim(d_model, multiple_of) if d_ff is None else d_ff
        check_int("d_ff", d_ff)
        self.activation = self.default_activation if activation is None else activation
        check_activation(self.activation, ACTIVATIONS)
        self.act = ACTIVATIONS[self.activation]
        self.d_ff = d_ff
        self.gate_proj = nn.Linear(d_model, d_ff, bias=bias)  # W_gate: d -> h
        self.up_proj = nn.Linear(d_model, d_ff, bias=bias)  # W_up:   d -> h
        self.down_proj = nn.Linear(d_ff, d_model, bias=bias)  # W_down: h -> d
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        gated = self.act(self.gate_proj(x)) * self.up_proj(x)  # act(W_gate x) * (W_up x)
        return self.dropout(self.down_proj(gated))  # W_down (...)


class GLU(GatedFeedForward):
    """Original gated linear unit: the gate is a sigmoid (arXiv 1612.08083)."""

    default_activation = "sigmoid"


class ReGLU(GatedFeedForward):
    """GLU with a ReLU gate."""

    default_activation = "relu"


class GEGLU(GatedFeedForward):
    """GLU with a GELU gate (exact GELU; pass ``activation="gelu_tanh"`` for the approximation)."""

    default_activation = "gelu"


class SwiGLU(GatedFeedForward):
    """GLU with a Swish/SiLU gate, the FFN of PaLM, LLaMA and Mistral.

    ``SwiGLU(x) = down_proj(silu(gate_proj(x)) * up_proj(x))`` with
    ``silu(z) = z * sigmoid(z)``; hidden size 8d/3 rounded up to ``multiple_of``.
    """

    default_activation = "silu"
