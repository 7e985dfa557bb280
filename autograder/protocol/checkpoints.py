"""Helpers for hidden checks of a checkpoint handed in beside the notebook (05, 06, 07).

A student trains a model in the notebook and hands in its weights (``mlm.safetensors``,
``capstone.safetensors``); the check loads them into the student's *own* class inside
their kernel (:func:`checkpoint_loader`, source sent with ``submission.run``), checks what
came back (:func:`check_loaded_checkpoint`) and scores the model's quality once for all
its levels of points (:func:`once_per_submission`). Part of the check library with
:mod:`.checklib`.
"""

from __future__ import annotations

import functools
import json

from .checklib import CheckFailure
from .trusted import SubmissionError


def checkpoint_loader(file: str, metadata_key: str, config_class: str, model_class: str,
                      saved_by: str, missing_ok: tuple[str, ...] = (),
                      build: str | None = None) -> str:
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
        build: the expression that builds the student's model from ``_config`` (default
            ``model_class(_config)``; a model built from plain arguments says how, e.g.
            ``"HybridLM(**_config.to_dict(), scan=selective_scan)"``).
    """
    config_module, _, config_name = config_class.rpartition(".")
    build = build or f"{model_class}(_config)"
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
    _loaded = ({build}).float()
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
