"""Hyper-parameters of the capstone GPT, and the two recipes it can be built from."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

from toolkit.ffn import swiglu_hidden_dim
from toolkit.models.backends import ATTENTION_BACKENDS

#: What each recipe chooses for the components that may be overridden one by one.
RECIPES: dict[str, dict[str, object]] = {
    "classic": {"position": "learned", "norm": "layernorm", "mlp": "gelu_tanh", "bias": True},
    "modern": {"position": "rope", "norm": "rmsnorm", "mlp": "swiglu", "bias": False},
}
_CHOICES = {
    "position": ("learned", "rope", "none"),
    "norm": ("layernorm", "rmsnorm"),
    "mlp": ("gelu", "gelu_tanh", "relu", "swiglu"),
    "norm_placement": ("pre", "post"),
    "rope_layout": ("half", "interleaved"),
    "attention_backend": ATTENTION_BACKENDS,
}


@dataclass
class GPTConfig:
    """Hyper-parameters of :class:`GPT`.

    Component fields left as ``None`` (``position``, ``norm``, ``mlp``, ``bias``,
    ``n_kv_heads``, ``d_ff``) take the recipe's choice; set one to run an ablation
    (e.g. the modern recipe with learned positions). Use :meth:`classic` and
    :meth:`modern` to build the two recipes.

    Attributes:
        vocab_size: ``V``.
        n_layers: number of blocks ``L``.
        n_heads: query heads; ``d_model`` must be divisible by it.
        n_kv_heads: key/value heads (GQA); must divide ``n_heads``. Default ``n_heads``.
        d_model: residual stream width ``d``.
        max_seq_len: longest sequence (size of ``wpe`` and of the KV cache).
        recipe: ``"classic"`` or ``"modern"``.
        rope_base: RoPE's ``base`` (``theta_i = base^(-2i/d_head)``).
        rope_layout: ``"half"`` (GPT-NeoX / HF LLaMA) or ``"interleaved"`` (GPT-J).
        dropout: on embeddings and on each sub-layer output.
        tie_weights: ``lm_head.weight`` is ``wte.weight``.
        d_ff: feed-forward hidden size; default ``4 d`` (GELU) or
            ``swiglu_hidden_dim(d, ffn_multiple_of)`` (SwiGLU).
        ffn_multiple_of: rounding of the default SwiGLU hidden size.
        norm_eps: epsilon of the norms.
        init_std: std of the normal initialisation (GPT-2: 0.02).
        position, norm, mlp, bias: per-component overrides of the recipe
            (``position="none"`` is NoPE: no explicit encoding; causal masking
            still lets a decoder infer order).
        norm_placement: ``"pre"`` (default, with a final norm) or ``"post"``.
        attention_backend: how :class:`toolkit.models.FastGPT` computes attention (not
            what): ``"reference"`` the teaching code (explicit mask, K/V copied per
            query head); ``"sdpa"`` PyTorch's fused attention with its native GQA;
            ``"blocked"`` score matrices by blocks of queries, only the keys each block
            sees, a KV head's query heads in one product
            (:mod:`toolkit.models.blocked_attention`); ``"triton"`` the course's
            FlashAttention kernels, forward and backward; ``"auto"`` (default) the
            fastest correct one for the tensors
            (:func:`toolkit.models.backends.resolve_backend`: ``"blocked"`` for a full
            causal pass of a few hundred positions on a CPU, ``"sdpa"`` otherwise, as
            measured).
            :class:`toolkit.models.GPT`, the teaching model, always computes attention
            the teaching way and ignores it. Same parameters and, to float rounding,
            same outputs and gradients whichever is chosen.
    """

    vocab_size: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None
    d_model: int = 128
    max_seq_len: int = 256
    recipe: str = "modern"
    rope_base: float = 10000.0
    rope_layout: str = "half"
    dropout: float = 0.0
    tie_weights: bool = True
    d_ff: int | None = None
    ffn_multiple_of: int = 32
    norm_eps: float = 1e-5
    init_std: float = 0.02
    position: str | None = None
    norm: str | None = None
    mlp: str | None = None
    bias: bool | None = None
    norm_placement: str = "pre"
    attention_backend: str = "auto"

    def __post_init__(self):
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {sorted(RECIPES)}, got {self.recipe!r}")
        positive = (
            "vocab_size", "n_layers", "n_heads", "d_model", "max_seq_len", "ffn_multiple_of"
        )
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if self.n_kv_heads is not None and (
            self.n_kv_heads <= 0 or self.n_heads % self.n_kv_heads != 0
        ):
            raise ValueError(
                f"n_kv_heads={self.n_kv_heads} must be a positive divisor of n_heads={self.n_heads}"
            )
        if self.d_ff is not None and self.d_ff <= 0:
            raise ValueError(f"d_ff must be a positive int, got {self.d_ff}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name in ("position", "norm", "mlp"):
            value = getattr(self, name)
            if value is not None and value not in _CHOICES[name]:
                raise ValueError(f"{name} must be one of {_CHOICES[name]} or None, got {value!r}")
        for name in ("norm_placement", "rope_layout", "attention_backend"):
            if getattr(self, name) not in _CHOICES[name]:
                raise ValueError(
                    f"{name} must be one of {_CHOICES[name]}, got {getattr(self, name)!r}"
                )
        if self.position_type == "rope" and self.d_head % 2 != 0:
            raise ValueError(f"RoPE needs an even d_head = d_model / n_heads, got {self.d_head}")

    # ---- the two recipes -------------------------------------------------------
    @classmethod
    def classic(cls, **kwargs) -> GPTConfig:
        """GPT-2: learned positions, LayerNorm, GELU (tanh) MLP, MHA, biases."""
        return cls(recipe="classic", **kwargs)

    @classmethod
    def modern(cls, **kwargs) -> GPTConfig:
        """LLaMA-style: RoPE, RMSNorm, SwiGLU, GQA, no biases.

        ``n_kv_heads`` defaults to ``n_heads // 2`` when ``n_heads`` is even (two query
        heads per KV head), else ``n_heads``.
        """
        if kwargs.get("n_kv_heads") is None:
            n_heads = kwargs.get("n_heads", cls.n_heads)
            kwargs["n_kv_heads"] = n_heads // 2 if n_heads % 2 == 0 else n_heads
        return cls(recipe="modern", **kwargs)

    # ---- resolved choices ------------------------------------------------------
    def _pick(self, name: str):
        value = getattr(self, name)
        return RECIPES[self.recipe][name] if value is None else value

    @property
    def position_type(self) -> str:
        return self._pick("position")

    @property
    def norm_type(self) -> str:
        return self._pick("norm")

    @property
    def mlp_type(self) -> str:
        return self._pick("mlp")

    @property
    def use_bias(self) -> bool:
        return self._pick("bias")

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def ffn_hidden(self) -> int:
        if self.d_ff is not None:
            return self.d_ff
        if self.mlp_type == "swiglu":
            return swiglu_hidden_dim(self.d_model, self.ffn_multiple_of)
        return 4 * self.d_model

    # ---- serialisation ---------------------------------------------------------
    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            renamed = {"n_layer": "n_layers", "n_head": "n_heads", "n_kv_head": "n_kv_heads"}
            hint = [f"{old} is now {new}" for old, new in renamed.items() if old in unknown]
            raise ValueError(
                f"d has unknown GPTConfig fields {sorted(unknown)}"
                + (f" ({'; '.join(hint)}: a config saved before the rename)" if hint else "")
            )
        return cls(**d)
