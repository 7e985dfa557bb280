"""Measuring a model past its training length: loss by position, the passkey probe, RoPE speeds.

Three measurements, each a function of a model that returns ``(logits, loss)`` from
``model(idx)`` (the course's :class:`toolkit.models.GPT` does):

* :func:`loss_by_position`: the next-token loss at every position of long windows. A
  model that breaks down past its training length ``L`` shows a curve that is flat up to
  ``L`` and climbs after it; one that extrapolates stays flat (or keeps falling, since
  later tokens have more context).
* :func:`passkey_accuracy`: the share of hidden numbers the model repeats exactly, by
  greedy decoding after a :mod:`toolkit.long_context.passkey` prompt.
* :func:`rope_extension`: the speeds and the cos/sin scaling a RoPE model trained on
  ``L`` tokens runs with on ``T`` tokens, for each method of Assignment 02, without
  retraining (:func:`toolkit.long_context.models.rope_speeds` installs them).
"""

from __future__ import annotations

import torch
from torch import Tensor

from toolkit.arguments import check_int
from toolkit.long_context.passkey import DIGITS, passkey_tokens
from toolkit.position import (
    rope_inv_freq,
    rope_inv_freq_dynamic_ntk,
    rope_inv_freq_linear,
    rope_inv_freq_ntk,
    yarn_inv_freq_and_temperature,
)

#: The context-extension methods :func:`rope_extension` knows, in the order they are plotted.
EXTENSIONS = ("none", "PI", "NTK", "dynamic NTK", "YaRN")


def loss_by_position(model, windows: Tensor) -> Tensor:
    """Mean next-token cross-entropy at each position of a batch of windows.

    The model reads ``windows[:, :-1]`` (``T`` tokens) and is scored on predicting
    ``windows[:, 1:]``: entry ``t`` is the mean over the windows of
    ``-log p(windows[n, t + 1] | windows[n, :t + 1])``, in nats. Evaluated in eval mode
    without gradients; the model's mode is restored afterwards.

    Args:
        model: maps ``(N, T)`` token ids to ``(logits (N, T, V), loss)``.
        windows: ``(N, T + 1)`` int64 token ids, ``T >= 1``.

    Returns:
        ``(T,)`` float64 tensor.
    """
    if not isinstance(windows, Tensor) or windows.ndim != 2 or windows.shape[1] < 2:
        raise ValueError("windows must be an (N, T + 1) tensor of token ids with T >= 1")
    if windows.dtype != torch.long:
        raise ValueError(f"windows must hold int64 token ids, got {windows.dtype}")
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits, _ = model(windows[:, :-1])  # (N, T, V): position t predicts token t + 1
    model.train(was_training)
    log_p = torch.log_softmax(logits.double(), dim=-1)  # log p(v | tokens <= t)
    nll = -log_p.gather(-1, windows[:, 1:, None]).squeeze(-1)  # (N, T): -log p(next token)
    return nll.mean(dim=0)  # average over windows, one number per position


def passkey_accuracy(model, keys, length: int, depth: float) -> float:
    """Share of ``keys`` the model repeats exactly after a passkey prompt.

    For each key, the prompt of :func:`toolkit.long_context.passkey.passkey_tokens`
    (``length`` tokens, the key line at ``depth``); then ``DIGITS`` steps of greedy
    decoding, each feeding the whole sequence so far (prompt plus the digits already
    chosen) and appending the arg-max of the last position's logits. A key counts only if
    all ``DIGITS`` digits are right. Eval mode, no gradients, mode restored.

    Args:
        model: maps ``(B, T)`` token ids to ``(logits (B, T, V), loss)``; it must accept
            ``length + DIGITS - 1`` tokens.
        keys: a non-empty sequence of ints in ``[0, 10^DIGITS)``.

    Returns:
        a Python float in ``[0, 1]``.
    """
    keys = [int(k) for k in keys]
    if not keys:
        raise ValueError("keys must hold at least one number")
    check_int("length", length)
    prompts, answers = zip(*(passkey_tokens(k, length, depth) for k in keys), strict=True)
    x, answer = torch.stack(prompts), torch.stack(answers)  # (K, length), (K, DIGITS)
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for _ in range(DIGITS):
            logits, _ = model(x)
            x = torch.cat((x, logits[:, -1].argmax(dim=-1, keepdim=True)), dim=1)  # greedy
    model.train(was_training)
    correct = (x[:, length:] == answer).all(dim=1)  # every digit right
    return float(correct.double().mean())


def rope_extension(
    method: str,
    d_head: int,
    base: float,
    train_len: int,
    seq_len: int,
    *,
    dynamic_factor: float = 2.0,
) -> tuple[Tensor, float]:
    """The speeds and cos/sin scaling for a RoPE model trained on ``train_len`` tokens, run on
    ``seq_len`` tokens.

    The static methods are configured for this very length, ``s = max(1, seq_len / train_len)``:

    * ``"none"``: plain ``theta_i``, scaling 1;
    * ``"PI"``: ``theta_i / s``; ``"NTK"``: the NTK-aware base for ``s``; scaling 1;
    * ``"YaRN"``: YaRN's speeds for ``s`` with ``L = train_len`` and its attention factor
      ``0.1 ln s + 1`` as the scaling.

    ``"dynamic NTK"`` is configured once, with ``dynamic_factor`` (HF's ``factor``), and
    follows the length itself: ``rope_inv_freq_dynamic_ntk(d, base, seq_len, train_len,
    dynamic_factor)``, scaling 1.

    Returns:
        ``(inv_freq, attention_scaling)``: a ``(d_head / 2,)`` float32 tensor and a float.
    """
    check_int("train_len", train_len)
    check_int("seq_len", seq_len)
    s = max(1.0, seq_len / train_len)  # the static methods' scale, set for this length
    if method == "none":
        return rope_inv_freq(d_head, base), 1.0
    if method == "PI":
        return rope_inv_freq_linear(d_head, base, s), 1.0
    if method == "NTK":
        return rope_inv_freq_ntk(d_head, base, s), 1.0
    if method == "dynamic NTK":
        return rope_inv_freq_dynamic_ntk(d_head, base, seq_len, train_len, dynamic_factor), 1.0
    if method == "YaRN":
        return yarn_inv_freq_and_temperature(d_head, base, s, train_len)  # (theta', 0.1 ln s + 1)
    raise ValueError(f"method must be one of {EXTENSIONS}, got {method!r}")
