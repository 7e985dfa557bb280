"""Checkpoints: weights and config in one safetensors file.

safetensors stores no pickle, so loading runs no code. The config goes into the
file's string metadata as JSON. safetensors refuses tensors that share memory, so a
tied ``lm_head.weight`` (the same tensor as ``wte.weight``) is stored once and
re-tied on load by building the model.
"""

from __future__ import annotations

import json
from pathlib import Path

from safetensors import safe_open
from safetensors.torch import save_file

from toolkit.models import GPT, FastGPT, GPTConfig


def save_checkpoint(model: GPT, config: GPTConfig, path: str | Path) -> None:
    """Save weights and config to a safetensors file.

    A tied ``lm_head.weight`` is left out (it is ``wte.weight``); the metadata
    records ``tied_lm_head`` so :func:`load_checkpoint` knows.
    """
    if not isinstance(config, GPTConfig):
        raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
    tied = model.lm_head.weight is model.wte.weight
    state = {
        name: t.detach().contiguous().cpu()
        for name, t in model.state_dict().items()
        if not (tied and name == "lm_head.weight")
    }
    metadata = {
        "format": "pt",
        "gpt_config": json.dumps(config.to_dict()),
        "tied_lm_head": str(tied),
    }
    save_file(state, str(path), metadata=metadata)


def load_checkpoint(
    path: str | Path, device: str = "cpu", model_class: type[GPT] = FastGPT
) -> GPT:
    """Rebuild the model of :func:`save_checkpoint`'s file (in eval mode) as
    ``model_class``: by default :class:`toolkit.models.FastGPT`, the capstone :class:`GPT`
    on fused kernels; ``GPT`` for the teaching model. The two have one state dict, so a
    checkpoint of either loads into both.

    Building the model from the stored config re-ties ``lm_head.weight`` to
    ``wte.weight``; loading ``wte.weight`` then fills both.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"path: no checkpoint at {path}")
    with safe_open(str(path), framework="pt", device=device) as f:
        metadata = f.metadata() or {}
        if "gpt_config" not in metadata:
            raise ValueError(f"path: {path} has no 'gpt_config' metadata; not a toolkit checkpoint")
        state = {name: f.get_tensor(name) for name in f.keys()}
    config = GPTConfig.from_dict(json.loads(metadata["gpt_config"]))
    model = model_class(config).to(device)
    missing, unexpected = model.load_state_dict(state, strict=False)
    allowed_missing = {"lm_head.weight"} if config.tie_weights else set()
    if unexpected or set(missing) - allowed_missing:
        raise ValueError(f"path: checkpoint does not match its config (missing {missing}, "
                         f"unexpected {unexpected})")
    return model.eval()
