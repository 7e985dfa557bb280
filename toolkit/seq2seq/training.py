"""Training an encoder-decoder on the number task, measuring it, saving it.

:func:`train_numbers` is AdamW with linear warm-up and cosine decay
(:func:`toolkit.train.lr_schedule`), gradient clipping at 1, on fresh batches of training
numbers every step (the task is a generator, so there are no epochs).
:func:`exact_match` decodes held-out inputs greedily and counts the outputs equal to the
target, word for word. :func:`save_encdec` and :func:`load_encdec` keep a trained model
in a safetensors file with its config.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import torch
from torch import nn

from toolkit.seq2seq.config import EncDecConfig
from toolkit.seq2seq.numbers import NumberTokenizer, encode_batch, number_examples
from toolkit.train import lr_schedule


def train_numbers(
    model: nn.Module,
    steps: int,
    batch_size: int = 64,
    max_lr: float = 3e-3,
    seed: int = 0,
    callback: Callable[[int, float], None] | None = None,
) -> list[float]:
    """Train ``model`` (``model(src, labels) -> (logits, loss)``) in place; returns the
    training losses. ``callback(step, loss)`` runs after every step."""
    tokenizer = NumberTokenizer()
    pairs = number_examples(steps * batch_size, held_out=False, seed=seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr, weight_decay=0.01)
    device = next(model.parameters()).device
    model.train()
    losses = []
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = lr_schedule(step, steps // 10, steps, max_lr, max_lr / 10)
        src, labels = encode_batch(pairs[step * batch_size : (step + 1) * batch_size], tokenizer)
        _, loss = model(src.to(device), labels.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        if not math.isfinite(losses[-1]):
            raise FloatingPointError(f"the loss became {losses[-1]} at step {step}")
        if callback is not None:
            callback(step, losses[-1])
    model.eval()
    return losses


@torch.no_grad()
def exact_match(
    decode: Callable, pairs: list[tuple[str, str]], tokenizer: NumberTokenizer,
    max_new_tokens: int = 16, batch_size: int = 256,
) -> float:
    """Share of ``pairs`` whose decoded output equals the target exactly.

    Args:
        decode: ``decode(src (B, S), max_new_tokens) -> (B, n)`` token ids, e.g.
            ``lambda src, n: greedy_decode(model, src, n)``.
        pairs: ``(source, target)`` texts.
        tokenizer: a :class:`NumberTokenizer`.
    """
    hits = 0
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        src, _ = encode_batch(chunk, tokenizer)
        out = decode(src, max_new_tokens)
        hits += sum(tokenizer.decode(row) == target for row, (_, target) in zip(out, chunk))
    return hits / len(pairs)


def save_encdec(model: nn.Module, path: str) -> None:
    """Save ``model``'s weights and config (metadata ``encdec_config``) as safetensors.

    The tied head is stored once, as ``embed.weight``; :func:`load_encdec` ties it again.
    """
    from safetensors.torch import save_file

    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()
             if k != "lm_head.weight"}
    save_file(state, path, metadata={"encdec_config": json.dumps(model.config.to_dict())})


def load_encdec(path: str, model_class: type | None = None) -> nn.Module:
    """Build ``model_class`` (default :class:`EncoderDecoder`) from a :func:`save_encdec`
    file, in eval mode."""
    from safetensors import safe_open

    from toolkit.seq2seq.model import EncoderDecoder

    with safe_open(path, framework="pt", device="cpu") as f:
        config = EncDecConfig.from_dict(json.loads(f.metadata()["encdec_config"]))
        state = {name: f.get_tensor(name) for name in f.keys()}
    model = (model_class or EncoderDecoder)(config)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected or set(missing) - {"lm_head.weight"}:
        raise ValueError(f"{path}: missing {sorted(missing)}, unexpected {sorted(unexpected)}")
    return model.eval()
