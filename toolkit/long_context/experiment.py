"""The context-extension experiment: four small GPTs trained at ``L`` tokens, measured to ``8 L``.

Each model (:func:`toolkit.long_context.models.position_model`) is trained on windows of
exactly ``L`` tokens, half from the course's corpus (:func:`toolkit.data.load_corpus`:
next-token loss on every token) and half passkey documents
(:func:`toolkit.long_context.passkey.passkey_batch`: loss on the answer's digits only,
so the copying is what those windows teach). The measurements then run each model, and
the RoPE one under every method of :data:`toolkit.long_context.evaluation.EXTENSIONS`,
on the held-out corpus and on passkey prompts up to ``8 L`` tokens, never retraining.

:func:`trained_models` trains once and keeps the state dicts in a cache folder
(``~/.cache/transformers-course/long_context``, or ``$TRANSFORMERS_COURSE_CACHE``), keyed
by every setting, so a lecture or a notebook that runs it again loads in a second;
:func:`cached_measurement` keeps the toolkit's measurement of them there too.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from toolkit.data import get_batch, load_corpus
from toolkit.long_context.evaluation import (
    EXTENSIONS,
    loss_by_position,
    passkey_accuracy,
    rope_extension,
)
from toolkit.long_context.models import (
    POSITIONS,
    position_model,
    rope_speeds,
    use_position_functions,
)
from toolkit.long_context.passkey import DIGITS, passkey_batch


@dataclass(frozen=True)
class ExperimentConfig:
    """Every setting of a training run (all of them key the cache).

    Attributes:
        train_len: ``L``, the length of every training window.
        steps: optimiser steps per model.
        batch_size: windows per step, half corpus and half passkey.
        max_lr: AdamW's peak learning rate (linear warm-up, cosine decay to a tenth).
        n_layers, d_model, n_heads: the model (:func:`position_model`).
        seed: data order and initialisation.
    """

    train_len: int = 128
    steps: int = 1000
    batch_size: int = 24
    max_lr: float = 1e-2
    n_layers: int = 2
    d_model: int = 64
    n_heads: int = 4
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def _cache_dir() -> Path:
    root = os.environ.get("TRANSFORMERS_COURSE_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "transformers-course"
    return base / "long_context"


def _model(position: str, cfg: ExperimentConfig):
    return position_model(position, cfg.train_len, n_layers=cfg.n_layers, d_model=cfg.d_model,
                          n_heads=cfg.n_heads, seed=cfg.seed)


def train_position_model(position: str, cfg: ExperimentConfig, *, progress: bool = True,
                         fns=None):
    """Train one model of :data:`POSITIONS` at length ``L``; returns it in eval mode.

    ``fns``: a student's ``apply_rope`` and ``alibi_bias``, by name, for the toolkit's.
    """
    torch.manual_seed(cfg.seed)
    model = use_position_functions(_model(position, cfg), fns)
    corpus = load_corpus()
    generator = torch.Generator().manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.max_lr, weight_decay=0.1,
                                  betas=(0.9, 0.95))
    warmup, half = max(1, cfg.steps // 10), cfg.batch_size // 2
    bar = tqdm(range(cfg.steps), desc=f"training {position} (L={cfg.train_len})",
               disable=not progress, leave=False)
    for step in bar:
        # linear warm-up, then cosine decay from max_lr to max_lr / 10
        decay = 0.5 * (1 + math.cos(math.pi * min(1.0, step / cfg.steps)))
        lr = cfg.max_lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * decay)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(corpus.train, half, cfg.train_len, generator)  # (B/2, L) each
        keys = passkey_batch(half, cfg.train_len, generator)  # (B/2, L + 1)
        logits, _ = model(torch.cat((x, keys[:, :-1])))
        text_loss = F.cross_entropy(logits[:half].flatten(0, 1), y.flatten())
        answer = logits[half:, -DIGITS:]  # the positions that predict the key's digits
        key_loss = F.cross_entropy(answer.flatten(0, 1), keys[:, -DIGITS:].flatten())
        loss = text_loss + key_loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 20 == 0:
            bar.set_postfix(text=f"{text_loss.item():.2f}", key=f"{key_loss.item():.2f}")
    return model.eval()


def trained_models(cfg: ExperimentConfig = ExperimentConfig(), positions=POSITIONS, *,
                   progress: bool = True, fns=None) -> dict:
    """``{position: model}``, trained once per setting and then loaded from the cache.

    ``fns``: a student's ``apply_rope`` and ``alibi_bias``, by name, which the models then
    use (the saved weights do not depend on them).
    """
    models = {}
    for position in tqdm(positions, desc="models", disable=not progress):
        path = _cache_dir() / f"{position}-{cfg.key()}.pt"
        if path.exists():
            model = _model(position, cfg)
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            models[position] = use_position_functions(model, fns).eval()
            continue
        models[position] = train_position_model(position, cfg, progress=progress, fns=fns)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(models[position].state_dict(), tmp)
        tmp.replace(path)  # a half-written file never looks like a checkpoint
    return models


def cached_models(cfg: ExperimentConfig = ExperimentConfig(), positions=POSITIONS
                  ) -> dict | None:
    """``{position: model}`` if every model of ``cfg`` is in the cache, else ``None`` (nothing
    is trained: ``python -m toolkit.long_context`` prepares them)."""
    paths = {p: _cache_dir() / f"{p}-{cfg.key()}.pt" for p in positions}
    if not all(path.exists() for path in paths.values()):
        return None
    return trained_models(cfg, positions, progress=False)


def held_out_windows(length: int, n_windows: int) -> torch.Tensor:
    """``(n_windows, length + 1)`` evenly spaced windows of the corpus's validation stream."""
    val = load_corpus().val
    starts = torch.linspace(0, len(val) - length - 2, n_windows).long()
    return torch.stack([val[s:s + length + 1] for s in starts.tolist()])


def model_variants(models: dict) -> list[tuple[str, object, str]]:
    """``(label, model, method)``: every trained model as it is, then the RoPE model under
    each extension method but ``"none"``."""
    variants = [(position, model, "none") for position, model in models.items()]
    if "rope" in models:
        variants += [(f"rope + {m}", models["rope"], m) for m in EXTENSIONS if m != "none"]
    return variants


#: The measurement functions :func:`measure` calls, by name (a student's replace them).
MEASUREMENTS = {"loss_by_position": loss_by_position, "passkey_accuracy": passkey_accuracy,
                "rope_extension": rope_extension}
_POSITION_FUNCTIONS = ("apply_rope", "alibi_bias")


def _functions(fns) -> dict:
    fns = dict(fns or {})
    unknown = sorted(set(fns) - set(MEASUREMENTS) - set(_POSITION_FUNCTIONS))
    if unknown:
        raise ValueError(f"fns names {unknown}; measure uses "
                         f"{sorted(MEASUREMENTS) + list(_POSITION_FUNCTIONS)}")
    return {**MEASUREMENTS, **fns}


def check_measurements_written(fns=None) -> None:
    """Call each measurement once on a tiny input, so an unwritten one stops a cell at once
    (before minutes of training) with its own "not written yet" message."""
    f = _functions(fns)
    tiny = position_model("none", 8, n_layers=1, d_model=16, n_heads=2, max_seq_len=96)
    f["rope_extension"]("none", 8, 10000.0, 8, 8)
    f["loss_by_position"](tiny, torch.zeros(1, 3, dtype=torch.long))
    f["passkey_accuracy"](tiny, [1], 80, 0.5)


def _with_method(f: dict, model, method: str, seq_len: int, train_len: int):
    if getattr(model, "position", "") != "rope":
        from contextlib import nullcontext
        return nullcontext(model)
    inv_freq, scaling = f["rope_extension"](method, model.config.d_head, model.config.rope_base,
                                            train_len, seq_len)
    return rope_speeds(model, inv_freq, scaling)


def measure(models: dict, train_len: int, *, lengths=(1, 2, 4, 8), n_windows: int = 8,
            depths=(0.1, 0.5, 0.9), n_keys: int = 10, progress: bool = True,
            fns=None) -> dict:
    """Loss by position and passkey accuracy for every variant of :func:`model_variants`.

    ``fns``: the student's own ``loss_by_position``, ``passkey_accuracy`` and
    ``rope_extension`` (and ``apply_rope``, ``alibi_bias`` for the models), by name, in
    place of the toolkit's.

    Returns:
        ``{"loss": {label: (8L,) tensor or None}, "passkey": {label: {(multiple, depth):
        accuracy}}, "train_len": L}``. A learned table has no row past ``L``: its loss
        covers the first ``L`` positions and its passkey entries beyond ``L`` are ``None``.
    """
    f = _functions(fns)
    for model in models.values():
        use_position_functions(model, {k: f[k] for k in _POSITION_FUNCTIONS if k in f})
    longest = max(lengths) * train_len
    windows = held_out_windows(longest, n_windows)
    keys = torch.randint(10**DIGITS, (n_keys,), generator=torch.Generator().manual_seed(1))
    variants = model_variants(models)
    results = {"loss": {}, "passkey": {}, "train_len": train_len}
    steps = tqdm(total=len(variants) * (1 + len(lengths) * len(depths)), desc="measuring",
                 disable=not progress)
    for label, model, method in variants:
        usable = model.config.max_seq_len
        with _with_method(f, model, method, min(longest, usable), train_len):
            results["loss"][label] = f["loss_by_position"](model, windows[:, :usable + 1])
        steps.update()
        for multiple in lengths:
            for depth in depths:
                length = multiple * train_len - DIGITS + 1  # prompt + answer = multiple * L
                accuracy = None
                if length + DIGITS - 1 <= usable:
                    with _with_method(f, model, method, length + DIGITS - 1, train_len):
                        accuracy = f["passkey_accuracy"](model, keys.tolist(), length, depth)
                results["passkey"].setdefault(label, {})[(multiple, depth)] = accuracy
                steps.update()
    steps.close()
    return results


def _measurement_code_key() -> str:
    """A digest of the code a measurement runs: this package and :mod:`toolkit.position`."""
    digest = hashlib.sha256()
    toolkit_dir = Path(__file__).resolve().parents[1]
    for folder in ("long_context", "position"):
        for path in sorted((toolkit_dir / folder).glob("*.py")):
            digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:16]


def cached_measurement(models: dict, cfg: ExperimentConfig, *, progress: bool = True) -> dict:
    """:func:`measure` of the toolkit's own functions on ``models`` (the models of ``cfg``,
    with its defaults), done once per machine: the results are kept beside the models,
    keyed by ``cfg`` and by the code that measures (this package and
    :mod:`toolkit.position`), so a lecture run again, or after ``python -m
    toolkit.long_context``, prints the table at once. Same return value as :func:`measure`."""
    path = _cache_dir() / f"measured-{cfg.key()}-{_measurement_code_key()}.pt"
    if path.exists():
        try:
            return torch.load(path, weights_only=True)
        except Exception:  # noqa: BLE001 - a damaged file is measured again
            path.unlink(missing_ok=True)
    results = measure(models, cfg.train_len, progress=progress)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.tmp")
        torch.save(results, partial)
        partial.replace(path)
    except OSError:
        pass  # a cache that cannot be written only costs a measurement next time
    return results


def passkey_table(results: dict) -> dict[str, dict[int, float | None]]:
    """``{label: {multiple of L: mean accuracy over depths, or None}}``."""
    table = {}
    for label, cells in results["passkey"].items():
        by_length: dict[int, list] = {}
        for (multiple, _), accuracy in cells.items():
            by_length.setdefault(multiple, []).append(accuracy)
        table[label] = {m: (None if any(a is None for a in accs) else sum(accs) / len(accs))
                        for m, accs in sorted(by_length.items())}
    return table


def results_table(results: dict) -> str:
    """The measurement as text: mean loss per band of positions, passkey accuracy per length."""
    L = results["train_len"]
    lines = []
    labels = list(results["loss"])
    longest = max(len(v) for v in results["loss"].values())
    bands = [(0, L)] + [(k * L, 2 * k * L) for k in (1, 2, 4) if k * L < longest]
    header = "".join(f"{f'loss {a // L}-{b // L}L':>12}" for a, b in bands)
    lines.append(f"{'model':<20}{header}   passkey accuracy (mean over depths)")
    for label in labels:
        loss = results["loss"][label]
        cells = "".join(f"{loss[a:b].mean().item():>12.3f}" if len(loss) >= b else f"{'n/a':>12}"
                        for a, b in bands)
        keys = "  ".join(f"{m}L {'n/a' if accuracy is None else f'{accuracy:.0%}'}"
                         for m, accuracy in passkey_table(results)[label].items())
        lines.append(f"{label:<20}{cells}   {keys}")
    return "\n".join(lines)
