"""Why a deep Post-LN stack needs a learning-rate warm-up and Pre-LN does not.

Xiong et al. (arXiv 2002.04745) looked at the gradients of a Transformer at
initialisation. In a **Post-LN** stack (``x = LN(x + F(x))``) the gradient of the loss
with respect to the parameters of the *last* layers is large and does not shrink with
depth; Adam's first updates, at full learning rate, then move those layers far, and
training can stall or diverge. A warm-up (the learning rate ramps up linearly over the
first steps) keeps the early steps small until Adam's statistics settle. In a **Pre-LN**
stack (``x = x + F(LN(x))``) the identity path carries the gradient to every layer
unchanged, the per-layer gradients are of similar size and shrink with depth, and the
same learning rate works from step one.

Two measurements make it visible on a stack small enough for a CPU:

* :func:`layer_scales`: at initialisation, the size of each block's output (the
  residual stream's scale, RMS per position) and the norm of the gradient reaching
  each block's parameters, for one batch of the task below.
* :func:`train_deep_stack` / :func:`warmup_experiment`: train the deep stack (12 blocks
  by default) with Adam at a high learning rate, with and without a linear warm-up,
  on a toy task that needs attention: **sorting** a sequence of digits (every output
  position must find the right input token). The loss of a model that has learnt
  nothing is ``ln(vocab_size)``.

Both take the block classes and the final norm's class as arguments, so a notebook runs
them with its own :class:`~toolkit.residual.PreLNBlock`, ``PostLNBlock`` and ``LayerNorm``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.arguments import check_int
from toolkit.norm import LayerNorm
from toolkit.residual import PostLNBlock, PreLNBlock

#: The toy task's defaults: sequences of 16 digits from a vocabulary of 16.
SEQ_LEN, VOCAB_SIZE = 16, 16


def sorting_batch(
    batch_size: int, generator: torch.Generator, seq_len: int = SEQ_LEN,
    vocab_size: int = VOCAB_SIZE,
) -> tuple[Tensor, Tensor]:
    """``x`` ``(B, T)`` random digits and ``y`` ``(B, T)`` the same digits sorted."""
    x = torch.randint(0, vocab_size, (batch_size, seq_len), generator=generator)
    return x, x.sort(dim=1).values


class DeepStack(nn.Module):
    """Token + learned position embeddings, ``n_layers`` blocks, a linear head.

    Args:
        block: the block class, called as ``block(d_model, n_heads)``.
        n_layers, d_model, n_heads: the stack's size.
        final_norm: the norm class after the last block, called as ``final_norm(d_model)``
            (Pre-LN needs one), or ``None`` for none.
        vocab_size, seq_len: of the toy task.

    Shapes: ``(B, T)`` token ids -> ``(B, T, vocab_size)`` logits.
    """

    def __init__(
        self, block: type, n_layers: int, d_model: int, n_heads: int, final_norm: type | None,
        vocab_size: int = VOCAB_SIZE, seq_len: int = SEQ_LEN,
    ):
        super().__init__()
        check_int("n_layers", n_layers)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.position = nn.Embedding(seq_len, d_model)
        self.layers = nn.ModuleList(block(d_model, n_heads) for _ in range(n_layers))
        self.final_norm = final_norm(d_model) if final_norm is not None else nn.Identity()
        self.head = nn.Linear(d_model, vocab_size)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids) + self.position(torch.arange(ids.size(1), device=ids.device))
        for layer in self.layers:
            x = layer(x)
        return self.head(self.final_norm(x))


def _stack(layout: str, n_layers: int, d_model: int, n_heads: int, seed: int, *,
           pre_ln_block: type, post_ln_block: type, norm: type) -> DeepStack:
    """A seeded stack of ``layout``'s blocks; Pre-LN ends with a ``norm``."""
    if layout not in ("post", "pre"):
        raise ValueError(f"layout must be 'post' or 'pre', got {layout!r}")
    rng = torch.random.get_rng_state()
    torch.manual_seed(seed)  # the same initial weights for every run with this seed
    pre = layout == "pre"
    try:
        return DeepStack(pre_ln_block if pre else post_ln_block, n_layers, d_model, n_heads,
                         final_norm=norm if pre else None)
    finally:
        torch.random.set_rng_state(rng)  # leave the caller's random stream alone


def layer_scales(
    layout: str, n_layers: int = 12, d_model: int = 64, n_heads: int = 4, *,
    pre_ln_block: type = PreLNBlock, post_ln_block: type = PostLNBlock, norm: type = LayerNorm,
    batch_size: int = 32, seed: int = 0,
) -> dict[str, Tensor]:
    """Per-block activation and gradient scale of a freshly initialised stack.

    Args:
        layout: ``"post"`` (Post-LN blocks, no final norm) or ``"pre"`` (Pre-LN + final norm).
        n_layers, d_model, n_heads: the stack.
        pre_ln_block, post_ln_block: the block classes, called as ``block(d_model, n_heads)``.
        norm: the class of the Pre-LN stack's final norm, called as ``norm(d_model)``.

    Returns:
        ``{"activation": (n_layers,), "gradient": (n_layers,)}``: the RMS of block
        ``l``'s output, ``sqrt(mean(x^2))`` over positions and features, and the norm
        of the gradient of the task's loss with respect to block ``l``'s parameters.
    """
    model = _stack(layout, n_layers, d_model, n_heads, seed, pre_ln_block=pre_ln_block,
                   post_ln_block=post_ln_block, norm=norm)
    outputs: list[Tensor] = []
    hooks = [layer.register_forward_hook(lambda _m, _i, out: outputs.append(out.detach()))
             for layer in model.layers]
    x, y = sorting_batch(batch_size, torch.Generator().manual_seed(seed))
    loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
    loss.backward()
    for hook in hooks:
        hook.remove()
    activation = torch.stack([out.pow(2).mean().sqrt() for out in outputs])  # RMS of x_l
    gradient = torch.stack([
        torch.sqrt(sum(p.grad.pow(2).sum() for p in layer.parameters()))  # ||dL/d theta_l||
        for layer in model.layers
    ])
    return {"activation": activation, "gradient": gradient}


def train_deep_stack(
    layout: str, warmup_steps: int, *, steps: int = 300, lr: float = 1e-2, n_layers: int = 12,
    d_model: int = 32, n_heads: int = 4, batch_size: int = 32, seed: int = 0,
    pre_ln_block: type = PreLNBlock, post_ln_block: type = PostLNBlock, norm: type = LayerNorm,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train a deep stack on the sorting task with Adam; returns the loss of every step.

    The learning rate rises linearly from ``lr / warmup_steps`` to ``lr`` over the first
    ``warmup_steps`` steps (``0``: full ``lr`` from the first step), then stays constant;
    Adam's betas are the Transformer paper's ``(0.9, 0.98)``. The same seed gives the
    same initial weights and batches for every layout and warm-up. The classes are those
    of :func:`layer_scales`.
    """
    check_int("warmup_steps", warmup_steps, minimum=0)
    check_int("steps", steps)
    model = _stack(layout, n_layers, d_model, n_heads, seed, pre_ln_block=pre_ln_block,
                   post_ln_block=post_ln_block, norm=norm)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98))
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for step in range(steps):
        scale = min(1.0, (step + 1) / warmup_steps) if warmup_steps else 1.0  # linear ramp
        for group in optimizer.param_groups:
            group["lr"] = lr * scale
        x, y = sorting_batch(batch_size, generator)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item() if math.isfinite(loss.item()) else float("nan"))
        if callback is not None:
            callback(step, losses[-1])
    return losses


def warmup_experiment(
    warmup_steps: int = 100, *, pre_ln_block: type = PreLNBlock,
    post_ln_block: type = PostLNBlock, norm: type = LayerNorm, **kwargs
) -> dict[str, list[float]]:
    """The four runs: Post-LN and Pre-LN, each without and with ``warmup_steps`` of warm-up.

    The classes are those of :func:`layer_scales`; other keyword arguments go to
    :func:`train_deep_stack`. Returns ``{label: losses}`` with labels
    ``"Post-LN, no warm-up"``, ``"Post-LN, warm-up"``, ``"Pre-LN, no warm-up"``,
    ``"Pre-LN, warm-up"``.
    """
    blocks = dict(pre_ln_block=pre_ln_block, post_ln_block=post_ln_block, norm=norm)
    # Blocks that cannot run yet fail here, before minutes of training.
    for layout in ("pre", "post"):
        _stack(layout, 1, 8, 2, seed=0, **blocks)(sorting_batch(1, torch.Generator())[0])
    runs = {}
    for layout, name in (("post", "Post-LN"), ("pre", "Pre-LN")):
        for warm, tag in ((0, "no warm-up"), (warmup_steps, "warm-up")):
            runs[f"{name}, {tag}"] = train_deep_stack(layout, warm, **blocks, **kwargs)
    return runs


def final_loss(losses: list[float], window: int = 25) -> float:
    """Mean loss over the last ``window`` steps (``nan`` if any of them is not finite)."""
    tail = losses[-window:]
    return sum(tail) / len(tail) if tail else float("nan")
