"""A trained :class:`toolkit.hybrid.model.HybridLM` saved to one file, and loaded back.

A :class:`HybridLM` is built from plain arguments (``vocab_size, pattern, d_model, n_heads,
d_state, max_seq_len``), not from a config object, so :func:`save_hybrid` writes them next to
the weights, as JSON in the safetensors metadata entry :data:`METADATA_KEY`. Whoever loads
the file builds the model of those arguments with their own class (a student's
``HybridLM``, with their own selective scan) and loads the weights into it:
:func:`load_hybrid`. Assignment 06 hands in such a file, ``hybrid.safetensors``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields

from torch import nn

#: The safetensors metadata entry holding the model's arguments as JSON.
METADATA_KEY = "hybrid_config"


@dataclass(frozen=True)
class HybridArguments:
    """The arguments of :class:`HybridLM` a checkpoint records (``scan`` is code, not data):
    ``HybridLM(**arguments.to_dict(), scan=...)`` rebuilds the model."""

    vocab_size: int
    pattern: str
    d_model: int
    n_heads: int
    d_state: int
    max_seq_len: int

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> HybridArguments:
        return cls(**values)


#: Their names, in order.
ARGUMENTS = tuple(f.name for f in fields(HybridArguments))


def save_hybrid(model: nn.Module, path: str, **arguments) -> None:
    """Save ``model``'s weights and the arguments it was built with.

    ``arguments`` are exactly :data:`ARGUMENTS`, e.g. ``save_hybrid(model, "hybrid.safetensors",
    vocab_size=32, pattern="MA", d_model=32, n_heads=4, d_state=8, max_seq_len=32)``;
    a missing or unknown one raises ``ValueError``, so the file always rebuilds its model.
    """
    from safetensors.torch import save_file

    if set(arguments) != set(ARGUMENTS):
        missing, unknown = set(ARGUMENTS) - set(arguments), set(arguments) - set(ARGUMENTS)
        raise ValueError(f"save_hybrid needs the model's arguments {list(ARGUMENTS)}"
                         + (f"; missing {sorted(missing)}" if missing else "")
                         + (f"; unknown {sorted(unknown)}" if unknown else ""))
    state = {k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}
    save_file(state, path, metadata={METADATA_KEY: json.dumps(arguments)})


def load_hybrid(path: str, model_class: type | None = None, scan: Callable | None = None
                ) -> nn.Module:
    """Build ``model_class(**arguments, scan=scan)`` (default :class:`HybridLM`) from a
    :func:`save_hybrid` file, load its weights (strictly), and return it in eval mode."""
    from safetensors import safe_open

    from toolkit.hybrid.model import HybridLM

    with safe_open(path, framework="pt", device="cpu") as f:
        metadata = f.metadata() or {}
        if METADATA_KEY not in metadata:
            raise ValueError(f"{path} has no {METADATA_KEY} metadata: save it with "
                             "toolkit.hybrid.save_hybrid(model, path, **arguments)")
        arguments = HybridArguments.from_dict(json.loads(metadata[METADATA_KEY]))
        state = {name: f.get_tensor(name) for name in f.keys()}
    model = (model_class or HybridLM)(**arguments.to_dict(), scan=scan)
    model.load_state_dict(state)
    return model.eval()
