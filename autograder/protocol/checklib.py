"""Helpers for hidden checks: validate what came back, compare, and explain failures.

Every failure message is written for the student who reads it in their feedback:
what was expected, what was found, and a hint where a common mistake fits.
"""

from __future__ import annotations

import contextlib
import functools
import math

import torch

from .trusted import ForbiddenShortcut, SubmissionError


class CheckFailure(AssertionError):
    """A check that did not pass; its message is shown to the student."""


@contextlib.contextmanager
def expect_value_error(what: str, accepted: str):
    """The block must make the student's code raise ValueError on a bad input.

    Args:
        what: the bad input, as the failure names it (``"n_heads = 0"``).
        accepted: the failure when the code ran without raising (say what to do).

    A stub's NotImplementedError goes on as it is: the student then reads that the function
    is not written yet, not that it "should raise ValueError".
    """
    try:
        yield
    except ForbiddenShortcut:
        raise
    except SubmissionError as exc:
        if "ValueError" in str(exc):
            return
        if str(exc).startswith("NotImplementedError"):
            raise
        raise CheckFailure(f"{what} should raise ValueError, got: {exc}") from None
    raise CheckFailure(accepted)


def expect_tensor(value, *, shape=None, dtype=None, name="your result") -> torch.Tensor:
    """``value`` must be a tensor of this shape and dtype with finite entries."""
    if not isinstance(value, torch.Tensor):
        raise CheckFailure(f"{name} should be a torch.Tensor, got {type(value).__name__}")
    if shape is not None and tuple(value.shape) != tuple(shape):
        raise CheckFailure(f"{name} has shape {tuple(value.shape)}, expected {tuple(shape)}")
    if dtype is not None and value.dtype != dtype:
        raise CheckFailure(f"{name} has dtype {value.dtype}, expected {dtype}")
    if value.is_floating_point() and not torch.isfinite(value).all():
        bad = "NaN" if torch.isnan(value).any() else "inf"
        raise CheckFailure(f"{name} contains {bad} values")
    return value


def assert_close(
    actual, expected: torch.Tensor, *, atol=1e-5, rtol=1e-4, hint="", name="your result"
) -> None:
    """Compare a student's tensor with our reference, with a readable message."""
    # A correct answer keeps the dtype of its inputs (float64 in, float64 out).
    actual = expect_tensor(actual, shape=expected.shape, dtype=expected.dtype, name=name)
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        diff = (actual - expected).abs().max().item()
        message = (f"{name}: the values differ from the expected ones (largest difference "
                   f"{diff:.3g})")
        raise CheckFailure(message + (f". Hint: {hint}" if hint else ""))


def assert_equal(actual, expected, *, hint="", name="your result") -> None:
    if isinstance(expected, torch.Tensor):
        actual = expect_tensor(actual, shape=expected.shape, dtype=expected.dtype, name=name)
        if not torch.equal(actual, expected):
            wrong = (actual != expected).sum().item()
            raise CheckFailure(
                f"{name}: {wrong} entries differ from the expected values"
                + (f". Hint: {hint}" if hint else "")
            )
    elif actual != expected:
        raise CheckFailure(
            f"{name} is {actual!r}, expected {expected!r}" + (f". Hint: {hint}" if hint else "")
        )


def dense_attention(q, k, v, causal=False, scale=None, modulo=False, shift=None):
    """Plain float64 attention, the reference for tiled and fused kernels.

    Shapes: q (B, H, N_q, d), k (B, H_kv, N_k, d), v (B, H_kv, N_k, d_v), H a multiple
    of H_kv. Returns (out (B, H, N_q, d_v), lse (B, H, N_q), rowmax (B, H, N_q)); a row
    with every key masked gives out 0 and lse -inf. Two deliberate mistakes, so a check
    can recognise them and say what went wrong:

    * ``modulo``: query head h reads KV head h % H_kv (the right map is h // (H / H_kv));
    * ``shift``: the causal diagonal offset, j <= i + shift; the right one, and the
      default, is N_k - N_q (aligned bottom-right).
    """
    q, k, v = q.double(), k.double(), v.double()
    g = q.shape[1] // k.shape[1]
    if modulo:
        k, v = k.repeat(1, g, 1, 1), v.repeat(1, g, 1, 1)
    else:
        k, v = k.repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    s = q @ k.transpose(-2, -1) * scale  # S = q k^T / sqrt(d)
    if causal:
        n_q, n_k = s.shape[-2:]
        shift = n_k - n_q if shift is None else shift
        future = torch.arange(n_k)[None, :] > torch.arange(n_q)[:, None] + shift
        s = s.masked_fill(future, float("-inf"))
    return torch.softmax(s, -1).nan_to_num(0.0) @ v, torch.logsumexp(s, -1), s.amax(-1)


# -- a checkpoint handed in beside the notebook -------------------------------------------
def checkpoint_loader(file: str, metadata_key: str, config_class: str, model_class: str,
                      saved_by: str, missing_ok: tuple[str, ...] = ()) -> str:
    """Source for ``submission.run``: load the checkpoint ``file`` the student handed in
    beside the notebook into the student's *own* ``model_class``, in their kernel.

    It runs in the student's working directory, where the grader copied the files handed
    in. The check passes the inputs ``vocab_size``, ``min_seq_len`` and ``max_parameters``.
    The code leaves ``result = {"config": <the file's config, JSON>, "stored": <parameters
    stored>}``; when the file has that vocabulary, at least that many positions and at most
    that many parameters, it adds load_state_dict's ``"missing"`` and ``"unexpected"`` names,
    and binds ``_model``: the loaded model in eval mode when nothing unexpected was found
    and only names of ``missing_ok`` (tied weights) were missing, else None. The check
    appends its own evaluation of ``_model`` (under ``_torch.no_grad()``); a check of the
    result on this side is :func:`check_loaded_checkpoint`.

    Args:
        file: the file name (``"capstone.safetensors"``).
        metadata_key: the safetensors metadata entry holding the config as JSON.
        config_class: where the config class lives (``"toolkit.models.GPTConfig"``).
        model_class: the student's class, by its name in the notebook (``"GPT"``).
        saved_by: the call that saves such a file, for the message when it is not one.
    """
    config_module, _, config_name = config_class.rpartition(".")
    return f'''
import json as _json
import os as _os

import torch as _torch
from safetensors import safe_open as _safe_open
from {config_module} import {config_name} as _Config

_path = _os.path.join(_os.getcwd(), {file!r})
if not _os.path.isfile(_path):
    raise FileNotFoundError({file!r} + " was not handed in next to the notebook: run the "
                            "training section, which saves it, and submit the file too")
with _safe_open(_path, framework="pt", device="cpu") as _f:
    _meta = _f.metadata() or {{}}
    if {metadata_key!r} not in _meta:
        raise ValueError({file!r} + " has no " + {metadata_key!r} + " metadata: save it "
                         "with " + {saved_by!r})
    _config = _Config.from_dict(_json.loads(_meta[{metadata_key!r}]))
    _names = list(_f.keys())
    _n_stored = sum(int(_torch.Size(_f.get_slice(_n).get_shape()).numel()) for _n in _names)
    _ok = (_config.vocab_size == inputs["vocab_size"]
           and _config.max_seq_len >= inputs["min_seq_len"]
           and _n_stored <= inputs["max_parameters"])
    _state = {{_n: _f.get_tensor(_n) for _n in _names}} if _ok else None
result = {{"config": _json.dumps(_config.to_dict()), "stored": _n_stored}}
_model = None
if _ok:
    _loaded = {model_class}(_config).float()
    _missing, _unexpected = _loaded.load_state_dict(_state, strict=False)
    result["missing"], result["unexpected"] = list(_missing), list(_unexpected)
    if not _unexpected and set(_missing) <= {set(missing_ok)!r}:
        _model = _loaded.eval()
'''


def check_loaded_checkpoint(got, *, vocab_size: int, min_seq_len: int, max_parameters: int,
                            model_class: str, missing_ok: tuple[str, ...] = (),
                            vocab_note: str, seq_note: str) -> dict:
    """What :func:`checkpoint_loader` sent back, checked: the file's config (returned) has
    ``vocab_size`` and at least ``min_seq_len`` positions, it stores at most
    ``max_parameters`` parameters and fits the student's ``model_class``; else
    :class:`CheckFailure` saying what to change (``vocab_note``, ``seq_note``: why)."""
    import json

    if not isinstance(got, dict) or "config" not in got:
        raise CheckFailure("could not load your checkpoint")
    config = json.loads(got["config"])
    if config.get("vocab_size") != vocab_size:
        raise CheckFailure(f"the checkpoint has vocab_size {config.get('vocab_size')}; "
                           f"{vocab_note}")
    if config.get("max_seq_len", 0) < min_seq_len:
        raise CheckFailure(f"the checkpoint has max_seq_len {config.get('max_seq_len')}; "
                           f"{seq_note}")
    if got.get("stored", 0) > max_parameters:
        raise CheckFailure(f"the checkpoint holds {got['stored']:,} parameters; the limit is "
                           f"{max_parameters:,} (the grader evaluates it on a CPU)")
    missing, unexpected = got.get("missing", ()), got.get("unexpected", ())
    if unexpected or set(missing) - set(missing_ok):
        raise CheckFailure(f"the checkpoint does not fit your {model_class}: missing "
                           f"{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}")
    return config


def once_per_submission(evaluate):
    """``evaluate(submission)``, computed once per submission and shared by the checks that
    score it (one checkpoint, ten levels of points); a failure it raises is raised again,
    as :class:`CheckFailure`, by each of them."""
    memo: dict = {}

    @functools.wraps(evaluate)
    def once(submission):
        if memo.get("submission") is not submission:
            try:
                outcome = evaluate(submission)
            except (CheckFailure, SubmissionError) as exc:
                outcome = exc
            memo.clear()
            memo.update(submission=submission, outcome=outcome)
        if isinstance(memo["outcome"], Exception):
            raise CheckFailure(str(memo["outcome"]))
        return memo["outcome"]

    return once
