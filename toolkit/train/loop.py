"""The training loop: AdamW, warm-up + cosine decay, clipping, held-out evaluation.

* **Objective**: mean next-token cross-entropy ``-log p(x_(t+1) | x_<=t)`` over
  random windows of the training stream (:func:`toolkit.data.get_batch`). A
  uniform guess over ``V`` tokens scores ``ln V`` (5.55 nats for bytes).
* **AdamW** (arXiv 1711.05101): Adam with *decoupled* weight decay
  ``theta <- theta - lr * lambda * theta``, applied to weight matrices and
  embeddings only; biases and norm gains are not decayed (shrinking a norm's
  gain towards 0 is not a useful prior). GPT-3 settings: ``betas = (0.9, 0.95)``,
  ``lambda = 0.1``.
* **Learning-rate schedule**: linear warm-up from 0 to ``max_lr`` over
  ``warmup`` steps (Adam's second-moment estimates are noisy at the start, and
  Post-LN models diverge without it, arXiv 2002.04745), then cosine decay to
  ``min_lr`` at ``max_steps`` (SGDR, arXiv 1608.03983):

      lr(s) = max_lr * (s + 1) / warmup                                  s < warmup
      lr(s) = min_lr + 0.5 (1 + cos(pi (s - warmup) / (max_steps - warmup))) (max_lr - min_lr)
      lr(s) = min_lr                                                     s >= max_steps

* **Gradient clipping** (arXiv 1211.5063): if the global gradient norm
  ``||g|| = sqrt(sum_p ||g_p||^2)`` exceeds ``c``, scale all gradients by
  ``c / ||g||``; one bad batch then cannot throw the weights far.
* **Held-out evaluation**: every ``eval_every`` steps, the mean loss over a fixed
  set of validation windows (same windows each time, so the curve is comparable).
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from toolkit.data import get_batch


@dataclass
class TrainConfig:
    """Optimisation settings for :func:`train`.

    ``min_lr`` defaults to ``max_lr / 10``; ``warmup_steps`` to 10% of ``max_steps``.
    ``grad_clip`` of ``None`` or ``0`` disables clipping.
    """

    max_steps: int = 200
    batch_size: int = 16
    block_size: int = 128
    max_lr: float = 3e-3
    min_lr: float | None = None
    warmup_steps: int | None = None
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float | None = 1.0
    eval_every: int = 50
    eval_batches: int = 8
    seed: int = 0
    progress: bool = True
    device: str = "cpu"

    def __post_init__(self):
        for name in ("max_steps", "batch_size", "block_size", "eval_every", "eval_batches"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.max_lr <= 0:
            raise ValueError(f"max_lr must be > 0, got {self.max_lr}")
        if self.min_lr is None:
            self.min_lr = self.max_lr / 10
        if self.warmup_steps is None:
            self.warmup_steps = self.max_steps // 10
        if not 0 <= self.warmup_steps <= self.max_steps:
            raise ValueError(f"warmup_steps must be in [0, max_steps], got {self.warmup_steps}")
        if not 0 <= self.min_lr <= self.max_lr:
            raise ValueError(f"min_lr must be in [0, max_lr], got {self.min_lr}")
        if self.grad_clip is not None and self.grad_clip < 0:
            raise ValueError(f"grad_clip must be >= 0 or None, got {self.grad_clip}")


def lr_schedule(step: int, warmup: int, max_steps: int, max_lr: float, min_lr: float) -> float:
    """Learning rate at ``step`` (0-based): linear warm-up, then cosine decay.

    ``lr(warmup) = max_lr`` (end of warm-up), ``lr(max_steps) = min_lr`` and
    ``min_lr`` after that. Step ``s < warmup`` gets ``max_lr * (s + 1) / warmup``,
    so the first step already moves the weights.
    """
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if not 0 <= warmup <= max_steps:
        raise ValueError(f"warmup must be in [0, max_steps={max_steps}], got {warmup}")
    if step < warmup:
        return max_lr * (step + 1) / warmup  # linear warm-up
    if step >= max_steps:
        return min_lr
    progress = (step - warmup) / (max_steps - warmup)  # 0 -> 1 over the decay phase
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (max_lr - min_lr)  # cosine


def configure_optimizer(
    model: nn.Module, lr: float, weight_decay: float, betas: tuple[float, float] = (0.9, 0.95)
) -> torch.optim.AdamW:
    """AdamW with two parameter groups: matrices (dim >= 2) decayed, vectors not.

    Embeddings and the (tied) output head are matrices and are decayed; biases
    and norm gains are vectors and are not. A tied tensor appears once.

    The update runs fused (one kernel per tensor) where PyTorch has that kernel, on CPUs
    and CUDA GPUs. On a CPU PyTorch's default is otherwise a Python loop over the
    parameter tensors, which costs a small model as much as a layer's matrix product.
    """
    params = dict(model.named_parameters())  # named_parameters drops duplicates (tying)
    decay = [p for p in params.values() if p.requires_grad and p.dim() >= 2]
    no_decay = [p for p in params.values() if p.requires_grad and p.dim() < 2]
    groups = [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    fused = all(p.device.type in ("cpu", "cuda") and p.is_floating_point()
                for p in params.values())
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused or None)


def grad_norm(model: nn.Module) -> float:
    """Global L2 norm of all gradients: ``sqrt(sum_p ||g_p||^2)``."""
    norms = [p.grad.detach().norm() for p in model.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    x: Tensor,
    y: Tensor,
    grad_clip: float | None = 1.0,
) -> tuple[float, float]:
    """One optimisation step on a batch ``x, y`` ``(B, T)``.

    Gradients are left in ``.grad`` afterwards (clipped), so they can be inspected.

    Returns:
        ``(loss, grad_norm)`` with the gradient norm measured *before* clipping.
    """
    optimizer.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    if grad_clip:
        # g <- g * min(1, c / ||g||); returns ||g|| before clipping
        norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))
    else:
        norm = grad_norm(model)
    optimizer.step()
    return float(loss.detach()), norm


@torch.no_grad()
def estimate_loss(
    model: nn.Module, data: Tensor, batch_size: int, block_size: int, n_batches: int, seed: int = 0
) -> float:
    """Mean loss over ``n_batches`` windows drawn with a fixed seed (same windows every call)."""
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    losses = []
    for _ in range(n_batches):
        x, y = get_batch(data, batch_size, block_size, generator)
        losses.append(float(model(x.to(device), y.to(device))[1]))
    model.train(was_training)
    return sum(losses) / len(losses)


@dataclass
class TrainHistory:
    """What :func:`train` records: per step, and per evaluation."""

    step: list[int] = field(default_factory=list)
    train_loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)
    val_step: list[int] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    tokens_seen: int = 0
    elapsed_s: float = 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_seen / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "tokens_per_s": self.tokens_per_s}


def train(
    model: nn.Module,
    train_data: Tensor,
    val_data: Tensor | None,
    cfg: TrainConfig,
    callback=None,
) -> TrainHistory:
    """Train ``model`` in place on next-token prediction.

    Args:
        model: a :class:`toolkit.models.GPT` (anything with ``model(x, y) -> (logits, loss)``).
        train_data, val_data: 1-D token streams (``val_data=None`` skips evaluation).
        cfg: a :class:`TrainConfig`.
        callback: called as ``callback(step, history)`` after every step (and after
            the evaluation of that step, if any), e.g. a live plot.

    Returns:
        The :class:`TrainHistory`. Validation runs every ``cfg.eval_every`` steps and
        after the last step.
    """
    if not isinstance(cfg, TrainConfig):
        raise ValueError(f"cfg must be a TrainConfig, got {type(cfg).__name__}")
    device = torch.device(cfg.device)
    model.to(device)
    model.train()
    torch.manual_seed(cfg.seed)  # dropout masks
    generator = torch.Generator().manual_seed(cfg.seed)  # batch positions
    optimizer = configure_optimizer(model, cfg.max_lr, cfg.weight_decay, cfg.betas)
    history = TrainHistory()
    start = time.perf_counter()
    bar = tqdm(range(cfg.max_steps), disable=not cfg.progress, desc="train", leave=False)
    for step in bar:
        lr = lr_schedule(step, cfg.warmup_steps, cfg.max_steps, cfg.max_lr, cfg.min_lr)
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = get_batch(train_data, cfg.batch_size, cfg.block_size, generator)
        loss, norm = train_step(model, optimizer, x.to(device), y.to(device), cfg.grad_clip)
        history.step.append(step)
        history.train_loss.append(loss)
        history.lr.append(lr)
        history.grad_norm.append(norm)
        history.tokens_seen += x.numel()
        last = step + 1 == cfg.max_steps
        if val_data is not None and ((step + 1) % cfg.eval_every == 0 or last):
            history.elapsed_s += time.perf_counter() - start  # evaluation is not training time
            val = estimate_loss(model, val_data, cfg.batch_size, cfg.block_size, cfg.eval_batches)
            start = time.perf_counter()
            history.val_step.append(step)
            history.val_loss.append(val)
            bar.set_postfix(loss=f"{loss:.3f}", val=f"{val:.3f}")
        else:
            bar.set_postfix(loss=f"{loss:.3f}")
        if callback is not None:
            callback(step, history)
    history.elapsed_s += time.perf_counter() - start
    model.eval()
    return history
