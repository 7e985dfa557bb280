"""The Mamba block: a gated, convolved selective SSM (arXiv 2312.00752, Figure 3).

One Mamba layer replaces both attention and the MLP of a Transformer block:

    x, z = in_proj(input).chunk(2)          two branches, each d_inner = expand * d_model wide
    x = silu(causal_depthwise_conv(x))      each channel mixes its last d_conv positions
    delta, B, C = split(x_proj(x))          input-dependent SSM parameters
    delta = softplus(dt_proj(delta))        low-rank (dt_rank) then per-channel, > 0
    y = selective_scan(x, delta, A = -exp(A_log), B, C, D)
    output = out_proj(y * silu(z))          the z branch gates the SSM's output

The short convolution gives each channel a little local context before the SSM; the
gate plays the role of a gated MLP. Parameter names and shapes are those of Hugging
Face's ``MambaMixer`` (``in_proj``, ``conv1d``, ``x_proj``, ``dt_proj``, ``A_log``, ``D``,
``out_proj``): its state dict loads here unchanged and gives the same output
(``tests/toolkit/test_ssm.py``).

**Generation in constant memory.** A step needs only the last ``d_conv`` inputs of the
convolution and the SSM state, ``(batch, d_inner, d_conv + N)`` numbers whatever the
context length (:class:`MambaCache`, :meth:`MambaMixer.step`). An attention layer's KV
cache grows by ``2 d_model`` numbers per token instead.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_int, check_sequence
from toolkit.ssm.selective import selective_scan, selective_step


@dataclass
class MambaCache:
    """What a Mamba layer remembers between tokens.

    Attributes:
        conv_state: ``(batch, d_inner, d_conv)``, the convolution's last ``d_conv`` inputs
            (oldest first).
        ssm_state: ``(batch, d_inner, d_state)``, the SSM state ``h_t``.
    """

    conv_state: Tensor
    ssm_state: Tensor

    def nbytes(self) -> int:
        """Bytes held, independent of how many tokens came before."""
        return sum(t.numel() * t.element_size() for t in (self.conv_state, self.ssm_state))


class MambaMixer(nn.Module):
    """The Mamba block's mixer: ``(batch, L, d_model) -> (batch, L, d_model)``.

    Args:
        d_model: model width.
        d_state: SSM state size ``N`` per channel (Mamba: 16).
        d_conv: width of the causal depthwise convolution (Mamba: 4).
        expand: ``d_inner = expand * d_model`` (Mamba: 2).
        dt_rank: rank of the ``delta`` projection (default ``ceil(d_model / 16)``).
        conv_bias, bias: biases of ``conv1d`` and of ``in_proj`` / ``out_proj``.
        dt_min, dt_max: range of the initial step sizes (log-uniform).
        scan: the selective scan :meth:`forward` runs, with the signature of
            :func:`toolkit.ssm.selective_scan` (the default, for ``None``); a notebook passes
            its own.
    """

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        d_conv: int = 4,
        expand: int = 2,
        dt_rank: int | None = None,
        conv_bias: bool = True,
        bias: bool = False,
        dt_min: float = 1e-3,
        dt_max: float = 0.1,
        scan: Callable | None = None,
    ):
        super().__init__()
        self.scan = scan
        for name, value in (("d_model", d_model), ("d_state", d_state), ("d_conv", d_conv),
                            ("expand", expand)):
            check_int(name, value)
        self.d_model, self.d_state, self.d_conv = d_model, d_state, d_conv
        self.d_inner = d_inner = expand * d_model
        self.dt_rank = math.ceil(d_model / 16) if dt_rank is None else dt_rank
        self.in_proj = nn.Linear(d_model, 2 * d_inner, bias=bias)  # -> x and z branches
        self.conv1d = nn.Conv1d(d_inner, d_inner, d_conv, groups=d_inner, padding=d_conv - 1,
                                bias=conv_bias)  # depthwise: one filter per channel
        self.x_proj = nn.Linear(d_inner, self.dt_rank + 2 * d_state, bias=False)  # -> delta, B, C
        self.dt_proj = nn.Linear(self.dt_rank, d_inner, bias=True)
        # S4D-Real initialisation A = -(1, 2, ..., N) in every channel.
        A = torch.arange(1, d_state + 1, dtype=torch.float32).repeat(d_inner, 1)
        self.A_log = nn.Parameter(torch.log(A))
        self.D = nn.Parameter(torch.ones(d_inner))
        self.out_proj = nn.Linear(d_inner, d_model, bias=bias)
        with torch.no_grad():  # initial delta = softplus(bias) log-uniform in [dt_min, dt_max]
            dt = torch.exp(torch.rand(d_inner) * (math.log(dt_max) - math.log(dt_min))
                           + math.log(dt_min))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus^{-1}(dt)

    def _ssm_parameters(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``delta (..., d_inner)``, ``B``, ``C`` ``(..., d_state)`` from the conv output."""
        dt, B, C = self.x_proj(x).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        return F.softplus(self.dt_proj(dt)), B, C  # delta = softplus(W_dt dt + b_dt) > 0

    def forward(self, x: Tensor, return_cache: bool = False):
        """Run a whole sequence.

        Args:
            x: ``(batch, L, d_model)``.
            return_cache: also return the :class:`MambaCache` after the last token, to
                continue with :meth:`step`.

        Returns:
            ``(batch, L, d_model)``, or ``(output, cache)``.
        """
        check_sequence("x", x, self.d_model)
        L = x.size(1)
        x_in, z = self.in_proj(x).chunk(2, dim=-1)  # (batch, L, d_inner) each
        # Conv1d pads d_conv - 1 zeros on both sides; the first L outputs are the causal ones.
        x_conv = self.conv1d(x_in.transpose(1, 2))[..., :L].transpose(1, 2)
        u = F.silu(x_conv)
        delta, B, C = self._ssm_parameters(u)
        scan = selective_scan if self.scan is None else self.scan
        if not return_cache:
            return self.out_proj(scan(u, delta, self.A_log, B, C, self.D) * F.silu(z))
        y, h = scan(u, delta, self.A_log, B, C, self.D, return_state=True)
        out = self.out_proj(y * F.silu(z))  # gate with the z branch
        conv_state = F.pad(x_in.transpose(1, 2), (max(0, self.d_conv - L), 0))[..., -self.d_conv:]
        return out, MambaCache(conv_state, h)

    def empty_cache(self, batch: int, dtype=None, device=None) -> MambaCache:
        """The cache before the first token: zeros."""
        dtype = self.D.dtype if dtype is None else dtype
        device = self.D.device if device is None else device
        return MambaCache(
            torch.zeros(batch, self.d_inner, self.d_conv, dtype=dtype, device=device),
            torch.zeros(batch, self.d_inner, self.d_state, dtype=dtype, device=device),
        )

    def step(self, x_t: Tensor, cache: MambaCache) -> tuple[Tensor, MambaCache]:
        """One new token in ``O(d_inner (d_conv + d_state))``, whatever the context length.

        Args:
            x_t: ``(batch, d_model)``.
            cache: from :meth:`empty_cache`, :meth:`forward` or a previous step.

        Returns:
            ``(output (batch, d_model), new cache)``.
        """
        x_in, z = self.in_proj(x_t).chunk(2, dim=-1)  # (batch, d_inner)
        conv_state = torch.cat([cache.conv_state[..., 1:], x_in[..., None]], dim=-1)  # shift in
        x_conv = (conv_state * self.conv1d.weight[:, 0]).sum(-1)  # sum_j w_j x_{t - d_conv + 1 + j}
        if self.conv1d.bias is not None:
            x_conv = x_conv + self.conv1d.bias
        u = F.silu(x_conv)
        delta, B, C = self._ssm_parameters(u)
        y, ssm_state = selective_step(cache.ssm_state, u, delta, self.A_log, B, C, self.D)
        return self.out_proj(y * F.silu(z)), MambaCache(conv_state, ssm_state)
