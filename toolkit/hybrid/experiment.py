"""The MQAR experiment: pure attention, pure Mamba and a hybrid of both, at equal size.

Three :class:`toolkit.hybrid.model.HybridLM` of the same width and depth, which differ
only in their layer pattern (:data:`PATTERNS`: ``"AA"``, ``"MM"``, ``"MA"``; their
parameter counts agree within half a percent), are trained on the same stream of MQAR
batches (:func:`toolkit.hybrid.mqar.mqar_batch`; the number of pairs cycles through
``train_pairs``, the loss is the cross-entropy at the query positions only). Then
:func:`measure` scores each on fresh batches at every number of pairs of ``eval_pairs``,
and :func:`results_table` prints recall against the number of pairs beside what each model
keeps per sequence to go on generating (:func:`toolkit.hybrid.model.state_numbers`): the
attention layer's cache grows with the sequence, the Mamba layer's state does not.

:func:`trained_models` trains once and keeps the state dicts in a cache folder
(``~/.cache/transformers-course/hybrid``, or ``$TRANSFORMERS_COURSE_CACHE``), keyed by every
setting, so a lecture that runs it again loads in a second.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from toolkit.hybrid.model import HybridLM, parameter_count, state_numbers
from toolkit.hybrid.mqar import IGNORE, mqar_batch, recall_accuracy

#: The compared layer patterns: pure attention, pure Mamba, the hybrid.
PATTERNS = ("AA", "MM", "MA")


@dataclass(frozen=True)
class MQARConfig:
    """Every setting of a training run (all of them key the cache).

    Attributes:
        vocab_size: keys and values, half each (:func:`mqar_batch`).
        train_pairs: the numbers of key-value pairs the training batches cycle through.
        steps: optimiser steps per model; batch_size: sequences per step.
        max_lr: AdamW's peak learning rate (linear warm-up over a tenth of the steps,
            cosine decay to a tenth).
        d_model, n_heads, d_state: the model (:class:`HybridLM`); ``max_seq_len`` fits
            the longest evaluation.
        seed: data order and initialisation.
    """

    vocab_size: int = 64
    train_pairs: tuple[int, ...] = (4, 8, 16)
    steps: int = 600
    batch_size: int = 32
    max_lr: float = 3e-3
    d_model: int = 64
    n_heads: int = 4
    d_state: int = 16
    max_seq_len: int = 64
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]


def _cache_dir() -> Path:
    root = os.environ.get("TRANSFORMERS_COURSE_CACHE")
    base = Path(root) if root else Path.home() / ".cache" / "transformers-course"
    return base / "hybrid"


def build_model(pattern: str, cfg: MQARConfig) -> HybridLM:
    """The untrained model of ``pattern`` at the sizes of ``cfg`` (seeded)."""
    torch.manual_seed(cfg.seed)
    return HybridLM(cfg.vocab_size, pattern, d_model=cfg.d_model, n_heads=cfg.n_heads,
                    d_state=cfg.d_state, max_seq_len=cfg.max_seq_len)


def train_on_mqar(model: nn.Module, steps: int, pairs=(2, 4, 8), vocab_size: int = 32, *,
                  batch_size: int = 32, lr: float = 1e-2, seed: int = 0,
                  batch_fn: Callable = mqar_batch) -> nn.Module:
    """Train ``model`` (``ids (B, T) -> logits (B, T, vocab_size)``) on MQAR: ``steps``
    batches of ``batch_size`` sequences, the number of pairs cycling through ``pairs``, the
    loss the cross-entropy at the query positions only, AdamW at a constant ``lr``,
    gradients clipped at norm 1. ``batch_fn`` makes the batches (assignment 06 passes the
    student's ``mqar_batch``); its generator is seeded with ``seed``. Returns the model in
    eval mode. (The short run of assignment 06; :func:`train_recall_model` is the longer,
    scheduled run of the experiment.)"""
    generator = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for step in range(steps):
        batch = batch_fn(batch_size, pairs[step % len(pairs)], vocab_size, generator=generator)
        mqar_step(model, optimizer, *batch)
    return model.eval()


def mqar_step(model: nn.Module, optimizer: torch.optim.Optimizer, inputs: Tensor,
              targets: Tensor) -> Tensor:
    """One optimiser step on an MQAR batch: the cross-entropy at the query positions only
    (``targets`` is ``IGNORE`` elsewhere), gradients clipped at norm 1. Returns the loss."""
    logits = model(inputs)  # (B, T, V)
    loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return loss


def train_recall_model(pattern: str, cfg: MQARConfig, *, progress: bool = True) -> HybridLM:
    """Train one model on MQAR; returns it in eval mode."""
    model = build_model(pattern, cfg)
    generator = torch.Generator().manual_seed(cfg.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.max_lr, weight_decay=0.0)
    warmup = max(1, cfg.steps // 10)
    bar = tqdm(range(cfg.steps), desc=f"training {pattern}", disable=not progress, leave=False)
    for step in bar:
        # linear warm-up, then cosine decay from max_lr to max_lr / 10
        decay = 0.5 * (1 + math.cos(math.pi * step / cfg.steps))
        for group in optimizer.param_groups:
            group["lr"] = cfg.max_lr * min(1.0, (step + 1) / warmup) * (0.1 + 0.9 * decay)
        n_pairs = cfg.train_pairs[step % len(cfg.train_pairs)]
        loss = mqar_step(model, optimizer, *mqar_batch(cfg.batch_size, n_pairs, cfg.vocab_size,
                                                       generator=generator))
        if step % 20 == 0:
            bar.set_postfix(pairs=n_pairs, loss=f"{loss.item():.2f}")
    return model.eval()


def trained_models(cfg: MQARConfig = MQARConfig(), patterns=PATTERNS, *,
                   progress: bool = True) -> dict[str, HybridLM]:
    """``{pattern: model}``, trained once per setting and then loaded from the cache."""
    models = {}
    for pattern in tqdm(patterns, desc="models", disable=not progress):
        path = _cache_dir() / f"{pattern}-{cfg.key()}.pt"
        if path.exists():
            model = build_model(pattern, cfg)
            model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
            models[pattern] = model.eval()
            continue
        models[pattern] = train_recall_model(pattern, cfg, progress=progress)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        torch.save(models[pattern].state_dict(), tmp)
        tmp.replace(path)  # a half-written file never looks like a checkpoint
    return models


def cached_models(cfg: MQARConfig = MQARConfig(), patterns=PATTERNS) -> dict | None:
    """``{pattern: model}`` if every model of ``cfg`` is in the cache, else ``None`` (nothing
    is trained: ``python -m toolkit.hybrid`` prepares them)."""
    if not all((_cache_dir() / f"{p}-{cfg.key()}.pt").exists() for p in patterns):
        return None
    return trained_models(cfg, patterns, progress=False)


@torch.no_grad()
def measure(models: dict[str, HybridLM], cfg: MQARConfig = MQARConfig(), *,
            eval_pairs=(4, 8, 16), n_sequences: int = 256, seed: int = 1) -> dict:
    """Recall of every model at every number of pairs, on the same fresh batches.

    Returns:
        ``{"recall": {pattern: {n_pairs: recall}}, "parameters": {pattern: count},
        "state": {pattern: numbers kept after the longest sequence}, "seq_len": that length,
        "vocab_size", "d_model", "d_state": the models' sizes}``.
    """
    batches = {n: mqar_batch(n_sequences, n, cfg.vocab_size,
                             generator=torch.Generator().manual_seed(seed + n))
               for n in eval_pairs}
    longest = 4 * max(eval_pairs)  # 2 n_pairs + 2 n_queries tokens
    results = {"recall": {}, "parameters": {}, "state": {}, "seq_len": longest,
               "vocab_size": cfg.vocab_size, "d_model": cfg.d_model, "d_state": cfg.d_state}
    for pattern, model in models.items():
        results["recall"][pattern] = {n: recall_accuracy(model(x), y)
                                      for n, (x, y) in batches.items()}
        results["parameters"][pattern] = parameter_count(model)
        results["state"][pattern] = state_numbers(pattern, longest, cfg.d_model, cfg.d_state)
    return results


def results_table(results: dict) -> str:
    """Recall per number of pairs, parameters and generation state, one row per model."""
    pairs = list(next(iter(results["recall"].values())))
    header = "".join(f"{f'{n} pairs':>10}" for n in pairs)
    state = f"state @ {results['seq_len']} tokens"
    lines = [f"{'model':<8}{'params':>9}{header}{state:>22}"]
    for pattern, recall in results["recall"].items():
        cells = "".join(f"{recall[n]:>10.1%}" for n in pairs)
        lines.append(f"{pattern:<8}{results['parameters'][pattern]:>9,}{cells}"
                     f"{results['state'][pattern]:>22,}")
    return "\n".join(lines)
