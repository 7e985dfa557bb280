"""The hyper-parameters of a T5-style encoder-decoder (arXiv 1910.10683).

Names follow the course (``d_model``, ``n_heads``, ``d_head``, ``d_ff``); Hugging Face's
``T5Config`` calls them ``d_model``, ``num_heads``, ``d_kv``, ``d_ff``, and
``relative_attention_num_buckets`` / ``relative_attention_max_distance`` for the buckets.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from toolkit.arguments import check_int


@dataclass(frozen=True)
class EncDecConfig:
    """A T5-style encoder-decoder: one shared embedding, two stacks, a tied head.

    Attributes:
        vocab_size: tokens, ids ``0 .. vocab_size - 1``.
        d_model: width of the residual stream.
        n_heads: attention heads of every attention layer.
        d_head: width of one head (default ``d_model // n_heads``); T5 allows
            ``n_heads * d_head != d_model``.
        d_ff: hidden width of the ReLU feed-forward layer (T5 1.0).
        n_encoder_layers, n_decoder_layers: depth of each stack.
        num_buckets, max_distance: T5's relative position buckets (32 and 128 in T5).
        eps: the RMS norms' epsilon.
        pad_id: padding, and the decoder's start token (T5: 0).
        eos_id: end of sequence (T5: 1).
    """

    vocab_size: int
    d_model: int = 64
    n_heads: int = 4
    d_head: int | None = None
    d_ff: int = 256
    n_encoder_layers: int = 2
    n_decoder_layers: int = 2
    num_buckets: int = 32
    max_distance: int = 128
    eps: float = 1e-6
    pad_id: int = 0
    eos_id: int = 1

    def __post_init__(self):
        for name in ("vocab_size", "d_model", "n_heads", "d_ff", "n_encoder_layers",
                     "n_decoder_layers", "num_buckets", "max_distance"):
            check_int(name, getattr(self, name))
        if self.d_head is None:
            if self.d_model % self.n_heads:
                raise ValueError(f"d_model={self.d_model} is not a multiple of "
                                 f"n_heads={self.n_heads}: give d_head")
            object.__setattr__(self, "d_head", self.d_model // self.n_heads)
        check_int("d_head", self.d_head)
        for name in ("pad_id", "eos_id"):
            value = getattr(self, name)
            if not 0 <= value < self.vocab_size:
                raise ValueError(f"{name}={value} is not a token id below {self.vocab_size}")

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> EncDecConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in values.items() if k in known})
