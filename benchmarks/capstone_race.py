"""Train several language models side by side, fairly, in one process.

Used by ``capstone.py`` for the comparison with nanoGPT's ``model.py`` on the CPU and
for the attention backends on a GPU. Fair means:

* **identical batches**: one list of ``(x, y)`` windows drawn once, step ``s`` of every
  model trains on batch ``s``;
* **identical optimiser**: :func:`toolkit.train.configure_optimizer` (AdamW, decay on
  matrices only), the same warm-up + cosine schedule, clipping at 1.0;
* **interleaved timing**: the models take turns, ``window`` steps each, and only the
  training steps are timed. On a machine other people load, a busy minute then slows
  every model about equally, and the *ratio* of their speeds stays meaningful even
  when the absolute tokens/s do not. The order of the turns rotates every window.
* **equal steps**: validation loss on the same fixed windows, every ``eval_every``
  steps, outside the timed region.

A model is anything called as ``model(x, y) -> (logits, loss)``.
"""

from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from toolkit.data import get_batch
from toolkit.train import configure_optimizer, estimate_loss, lr_schedule


@dataclass
class RaceResult:
    """What one model did: timed training seconds, and the loss at each evaluation."""

    train_seconds: float = 0.0
    steps: int = 0
    tokens: int = 0
    train_loss: list[float] = field(default_factory=list)  # at the end of each turn
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    val_seconds: list[float] = field(default_factory=list)  # training time spent by then

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.train_seconds if self.train_seconds else float("nan")

    def seconds_to(self, target: float) -> float | None:
        """Training seconds at the first evaluation with validation loss <= ``target``."""
        for loss, seconds in zip(self.val_loss, self.val_seconds):
            if loss <= target:
                return seconds
        return None


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def race(
    models: dict[str, nn.Module],
    train: Tensor,
    val: Tensor,
    *,
    steps: int,
    batch_size: int,
    block_size: int,
    window: int = 5,
    eval_every: int = 100,
    eval_batches: int = 8,
    max_lr: float = 3e-3,
    warmup: int | None = None,
    device: str | torch.device = "cpu",
    autocast_dtype: torch.dtype | None = None,
    warmup_steps_untimed: int = 3,
    seed: int = 0,
    on_window=None,
) -> dict[str, RaceResult]:
    """Train every model in ``models`` for ``steps`` steps, in interleaved windows.

    Args:
        models: name -> model, already on ``device``; each is trained in place.
        train, val: token streams (1-d) for :func:`toolkit.data.get_batch`.
        window: steps per turn.
        autocast_dtype: e.g. ``torch.bfloat16`` for mixed precision on a GPU.
        warmup_steps_untimed: the first steps of every model are not timed, so that
            one-off costs (allocations, kernel compilation, autotuning) stay out of
            the speed; they are training steps all the same, on the first batches.
        on_window: called with the results after every window (a run cut short keeps
            what it measured).

    Returns:
        name -> :class:`RaceResult`.
    """
    device = torch.device(device)
    warmup = max(1, steps // 10) if warmup is None else warmup
    generator = torch.Generator().manual_seed(seed)
    batches = [get_batch(train, batch_size, block_size, generator) for _ in range(steps)]
    optimisers = {name: configure_optimizer(m, max_lr, 0.1) for name, m in models.items()}
    results = {name: RaceResult() for name in models}
    amp = (torch.autocast(device.type, dtype=autocast_dtype) if autocast_dtype
           else nullcontext())

    def run(name: str, start: int, stop: int) -> None:
        model, opt, result = models[name], optimisers[name], results[name]
        model.train()
        for s in range(start, stop):
            lr = lr_schedule(s, warmup, steps, max_lr, max_lr / 10)
            for group in opt.param_groups:
                group["lr"] = lr
            x, y = (t.to(device, non_blocking=True) for t in batches[s])
            opt.zero_grad(set_to_none=True)
            with amp:
                _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
        result.train_loss.append(float(loss.detach()))
        result.steps = stop

    def evaluate(step: int) -> None:
        for name, model in models.items():
            with amp:
                loss = estimate_loss(model, val, batch_size, block_size, eval_batches, seed=seed)
            r = results[name]
            r.val_step.append(step), r.val_loss.append(loss), r.val_seconds.append(r.train_seconds)

    names = list(models)
    for name in names:  # untimed first steps
        run(name, 0, min(warmup_steps_untimed, steps))
    _sync(device)
    start = min(warmup_steps_untimed, steps)
    turn = 0
    while start < steps:
        next_eval = (start // eval_every + 1) * eval_every  # turns end at every evaluation
        stop = min(steps, start + window, next_eval)
        order = names[turn % len(names):] + names[: turn % len(names)]  # rotate who goes first
        for name in order:
            _sync(device)
            t0 = time.perf_counter()
            run(name, start, stop)
            _sync(device)
            results[name].train_seconds += time.perf_counter() - t0
            results[name].tokens += (stop - start) * batch_size * block_size
        if stop % eval_every == 0 or stop == steps:
            evaluate(stop)
        if on_window is not None:
            on_window(results)
        start, turn = stop, turn + 1
    return results
