"""RWKV: attention-like token mixing with a decaying, constant-size state (arXiv 2305.13048).

RWKV-4's time mixing replaces softmax attention by the **WKV** operator. Per channel
``c`` (every channel is independent), with a learned decay rate ``w_c >= 0`` and a
learned **bonus** ``u_c`` for the current token:

    wkv_t = ( sum_{i<t} e^{-(t-1-i) w + k_i} v_i  +  e^{u + k_t} v_t )
          / ( sum_{i<t} e^{-(t-1-i) w + k_i}      +  e^{u + k_t}     )

a weighted average of the values seen so far. The weight of a past token is its key's
``e^{k_i}`` times a decay that shrinks by ``e^{-w}`` per step (a fixed, per-channel
recency bias, like ALiBi's but multiplicative); the current token gets the separate
weight ``e^{u + k_t}``. :func:`wkv_parallel` computes the formula directly, ``O(T^2)``.

**Recurrent form.** Numerator and denominator are both sums that decay by ``e^{-w}``
per step, so two running sums ``a_t, b_t`` (per channel) carry them:

    wkv_t = (a_{t-1} + e^{u + k_t} v_t) / (b_{t-1} + e^{u + k_t}),
    a_t = e^{-w} a_{t-1} + e^{k_t} v_t,     b_t = e^{-w} b_{t-1} + e^{k_t}.

``e^{k}`` overflows float32 once ``k > 88``, and long sequences of large keys overflow
the sums long before. The **stable form** (:func:`wkv_recurrent`, the form of the RWKV
kernels and of Hugging Face's ``rwkv_linear_attention_cpu``) stores ``a, b`` divided by
``e^p``, where ``p`` is the largest exponent seen so far, and subtracts the running
maximum before every ``exp``: every exponential it computes is ``<= 1``.

**Token shift.** Each projection reads a per-channel mix of the current token and the
previous one, ``x_t * mu + x_{t-1} * (1 - mu)`` (:func:`token_shift`), a cheap way to
give every layer a little local context (and to build induction-like patterns).

**Generation** needs, per layer, the previous token's input to each mixing block and
``(a, b, p)``: ``O(d_model)`` numbers, whatever the context length.

Parameter names are those of Hugging Face's ``RwkvSelfAttention`` and
``RwkvFeedForward``, where ``time_decay`` stores ``log w`` (``w = exp(time_decay) > 0``)
and ``time_first`` stores ``u``. Shapes: ``k, v (batch, T, channels)``, ``w, u (channels,)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_wkv_inputs

WkvState = tuple[Tensor, Tensor, Tensor]  # (a, b, p): numerator, denominator, max exponent




def wkv_parallel(k: Tensor, v: Tensor, w: Tensor, u: Tensor) -> Tensor:
    """The WKV formula computed directly, every ``(t, i)`` pair at once: ``O(T^2 C)``.

    No stabilisation: exact for short sequences of moderate keys, it overflows where
    :func:`wkv_recurrent` does not. Returns ``(batch, T, C)``.
    """
    check_wkv_inputs(k, v, w, u)
    T = k.size(1)
    t = torch.arange(T, device=k.device)
    distance = (t[:, None] - 1 - t[None, :]).to(k.dtype)  # t - 1 - i: (T, T)
    past = -distance[..., None] * w + k[:, None, :, :]  # -(t-1-i) w + k_i: (batch, T, T, C)
    current = (u + k)[:, :, None, :]  # u + k_t on the diagonal
    diagonal = torch.eye(T, dtype=torch.bool, device=k.device)[..., None]
    future = (t[None, :] > t[:, None])[..., None]  # i > t
    exponent = torch.where(diagonal, current, past).masked_fill(future, float("-inf"))
    weights = torch.exp(exponent)  # (batch, T, T, C)
    return (weights * v[:, None, :, :]).sum(2) / weights.sum(2)


def wkv_recurrent(
    k: Tensor,
    v: Tensor,
    w: Tensor,
    u: Tensor,
    state: WkvState | None = None,
    return_state: bool = False,
):
    """The WKV operator as a numerically stable recurrence, one token per step.

    Args:
        k, v: ``(batch, T, C)`` keys and values.
        w: ``(C,)`` decay rates ``>= 0`` (a past token's weight shrinks by ``e^{-w}`` per step).
        u: ``(C,)`` bonus of the current token.
        state: ``(a, b, p)``, each ``(batch, C)``, from an earlier call: the past's
            numerator and denominator divided by ``e^p``, and ``p``. Default: no past
            (``a = b = 0``, ``p = -1e38``).
        return_state: also return the state after the last token.

    Returns:
        ``wkv`` ``(batch, T, C)``, or ``(wkv, (a, b, p))``.
    """
    check_wkv_inputs(k, v, w, u)
    batch, T, C = k.shape
    if state is None:
        # Three separate tensors: an in-place update of a must not also change b.
        state = (k.new_zeros(batch, C), k.new_zeros(batch, C),
                 k.new_full((batch, C), -1e38))
    a, b, p = state  # past numerator / e^p, past denominator / e^p, p
    outputs = []
    for t in range(T):
        kt, vt = k[:, t], v[:, t]
        # Output: the past (weight e^p) and the current token with its bonus (e^{u + k_t}).
        q = torch.maximum(p, u + kt)  # subtract the larger exponent: both exps are <= 1
        e_past, e_now = torch.exp(p - q), torch.exp(u + kt - q)
        outputs.append((e_past * a + e_now * vt) / (e_past * b + e_now))
        # State: the past decays by e^{-w}, the current token joins with weight e^{k_t}.
        q = torch.maximum(p - w, kt)
        e_past, e_now = torch.exp(p - w - q), torch.exp(kt - q)
        a, b, p = e_past * a + e_now * vt, e_past * b + e_now, q
    out = torch.stack(outputs, dim=1) if outputs else v.new_zeros(v.shape)
    return (out, (a, b, p)) if return_state else out


def token_shift(x: Tensor, last: Tensor | None = None) -> Tensor:
    """``x_{t-1}`` at every position: ``(batch, T, C)``; position 0 gets ``last`` (default 0).

    ``last`` is ``(batch, C)``, the previous chunk's final token during generation.
    """
    first = torch.zeros_like(x[:, :1]) if last is None else last[:, None, :]
    return torch.cat([first, x[:, :-1]], dim=1)


def _mix(x: Tensor, shifted: Tensor, mu: Tensor) -> Tensor:
    return x * mu + shifted * (1 - mu)  # per-channel interpolation with the previous token


class RwkvTimeMixing(nn.Module):
    """RWKV-4 time mixing: ``output(sigmoid(r) * wkv(k, v))`` over token-shifted inputs.

    ``(batch, T, d_model) -> (batch, T, d_model)``; ``forward`` also returns the state
    ``(last x (batch, d_model), (a, b, p))`` to continue from.
    """

    def __init__(self, d_model: int, layer_id: int = 0, n_layers: int = 1):
        super().__init__()
        self.d_model = d_model
        self.time_decay = nn.Parameter(torch.empty(d_model))  # log w
        self.time_first = nn.Parameter(torch.empty(d_model))  # u
        self.time_mix_key = nn.Parameter(torch.empty(1, 1, d_model))
        self.time_mix_value = nn.Parameter(torch.empty(1, 1, d_model))
        self.time_mix_receptance = nn.Parameter(torch.empty(1, 1, d_model))
        self.key = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_model, d_model, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.output = nn.Linear(d_model, d_model, bias=False)
        self._init_mixing(layer_id, n_layers)

    @torch.no_grad()
    def _init_mixing(self, layer_id: int, n_layers: int) -> None:
        # RWKV-4's initialisation: decay rates spread from fast (e^{-5}) to slow (e^{3})
        # across channels, more spread in deeper layers; mixes closer to 1 early on.
        depth = layer_id / max(n_layers - 1, 1)  # 0 .. 1
        late = 1.0 - layer_id / n_layers  # 1 .. almost 0
        c = torch.arange(self.d_model, dtype=torch.float32) / max(self.d_model - 1, 1)
        self.time_decay.copy_(-5 + 8 * c ** (0.7 + 1.3 * depth))
        zigzag = torch.tensor([(i + 1) % 3 - 1 for i in range(self.d_model)]) * 0.5
        self.time_first.copy_(torch.full((self.d_model,), 0.3).log() + zigzag)
        ramp = (torch.arange(self.d_model, dtype=torch.float32) / self.d_model)[None, None]
        self.time_mix_key.copy_(ramp**late)
        self.time_mix_value.copy_(ramp**late + 0.3 * depth)
        self.time_mix_receptance.copy_(ramp ** (0.5 * late))

    def forward(self, x: Tensor, state: tuple[Tensor, WkvState] | None = None):
        """Args: ``x (batch, T, d_model)``; ``state`` from a previous call or ``None``.

        Returns: ``(out (batch, T, d_model), (x[:, -1], (a, b, p)))``.
        """
        last, wkv_state = (None, None) if state is None else state
        shifted = token_shift(x, last)
        k = self.key(_mix(x, shifted, self.time_mix_key))
        v = self.value(_mix(x, shifted, self.time_mix_value))
        r = torch.sigmoid(self.receptance(_mix(x, shifted, self.time_mix_receptance)))
        wkv, wkv_state = wkv_recurrent(k, v, torch.exp(self.time_decay), self.time_first,
                                       state=wkv_state, return_state=True)
        return self.output(r * wkv), (x[:, -1], wkv_state)  # r gates what WKV lets through


class RwkvChannelMixing(nn.Module):
    """RWKV channel mixing: ``sigmoid(r) * value(relu(key(x_k))^2)``.

    The squared ReLU comes from Primer (arXiv 2109.08668).

    ``(batch, T, d_model) -> (batch, T, d_model)``; ``forward`` also returns the last
    token's input, the only state it needs.
    """

    def __init__(self, d_model: int, d_ff: int | None = None):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.time_mix_key = nn.Parameter(torch.rand(1, 1, d_model))
        self.time_mix_receptance = nn.Parameter(torch.rand(1, 1, d_model))
        self.key = nn.Linear(d_model, d_ff, bias=False)
        self.receptance = nn.Linear(d_model, d_model, bias=False)
        self.value = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: Tensor, last: Tensor | None = None) -> tuple[Tensor, Tensor]:
        shifted = token_shift(x, last)
        hidden = F.relu(self.key(_mix(x, shifted, self.time_mix_key))).square()  # relu(.)^2
        r = torch.sigmoid(self.receptance(_mix(x, shifted, self.time_mix_receptance)))
        return r * self.value(hidden), x[:, -1]
