"""The capstone: a small decoder-only language model, in two recipes.

One file, no framework: a GPT is a token embedding, a stack of identical
blocks writing into a residual stream, a final norm and an output head that
turns each position's vector into logits over the next token.

    x_0 = E[idx] (+ P[pos])                            (B, T, d)
    x_l = x_(l-1) + Attn(Norm(x_(l-1)))                 pre-norm residual blocks
    x_l = x_l     + MLP(Norm(x_l))
    logits = Norm_f(x_L) @ W_U                          (B, T, V)

Two recipes, the same skeleton (:class:`GPTConfig`):

================  ==============================  =========================================
component         classic (GPT-2, 2019)           modern (LLaMA / Mistral style)
================  ==============================  =========================================
positions         learned table ``wpe`` added     RoPE on q and k (arXiv 2104.09864)
                  to the embeddings
normalisation     LayerNorm (gamma, beta)         RMSNorm (arXiv 1910.07467)
feed-forward      GELU (tanh) MLP, hidden 4d      SwiGLU, hidden ~8d/3, no bias
                                                  (arXiv 2002.05202)
attention         multi-head (MHA)                grouped-query (GQA, arXiv 2305.13245)
linear biases     yes                             no
================  ==============================  =========================================

Both use pre-norm blocks with a final norm (arXiv 2002.04745; ``norm_placement=
"post"`` gives the original Post-LN block for comparison) and tied embeddings.

Weight tying (arXiv 1608.05859, 1611.01462). The embedding ``E`` is ``(V, d)``:
row ``v`` is token ``v``'s vector. The unembedding ``W_U`` maps ``d -> V``, so it
is ``(d, V)``, and tying sets ``W_U = E^T``: ``logits = h @ E^T``, i.e. the logit
of token ``v`` is the dot product of ``h`` with ``v``'s own embedding.
``nn.Linear(d, V)`` stores its weight as ``(V, d)`` and computes ``h @ weight^T``,
so tying is ``lm_head.weight = wte.weight``: the *same* Parameter object, not a
copy and not a transpose. GPT-2 small saves 50257 x 768 = 38.6M parameters.

Grouped-query attention. ``n_head`` query heads share ``n_kv_head`` key/value
heads; query head ``h`` reads KV head ``h // (n_head / n_kv_head)`` (integer
division: consecutive query heads form a group). ``n_kv_head = n_head`` is MHA,
``n_kv_head = 1`` is multi-query attention (arXiv 1911.02150). The KV cache
shrinks by the factor ``n_head / n_kv_head``.

KV cache. At decoding step ``t`` only the new token's query is needed, but it
attends to the keys and values of *all* earlier tokens, which do not change.
:class:`KVCache` keeps them per layer, so a step costs ``O(t d)`` for attention
plus ``O(d^2)`` for the projections of one token, instead of re-running the whole
prefix (``O(t^2 d)`` attention plus ``O(t d^2)`` projections).
Cached keys keep the rotation they got at their own position; the new token's
q and k are rotated at its absolute position ``start_pos``. Cached decoding equals
the full forward pass up to float rounding (tested).

Shapes: ``idx`` ``(B, T)`` token ids; logits ``(B, T, vocab_size)``; attention
tensors ``(B, heads, T, head_dim)``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from toolkit.attention import scaled_dot_product_attention
from toolkit.ffn import FeedForward, SwiGLU, swiglu_hidden_dim
from toolkit.gqa import repeat_kv
from toolkit.masks import causal_mask
from toolkit.norm import LayerNorm, RMSNorm
from toolkit.position import apply_rope

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
}


@dataclass
class GPTConfig:
    """Hyper-parameters of :class:`GPT`.

    Component fields left as ``None`` (``position``, ``norm``, ``mlp``, ``bias``,
    ``n_kv_head``, ``d_ff``) take the recipe's choice; set one to run an ablation
    (e.g. the modern recipe with learned positions). Use :meth:`classic` and
    :meth:`modern` to build the two recipes.

    Attributes:
        vocab_size: ``V``.
        n_layer: number of blocks ``L``.
        n_head: query heads; ``d_model`` must be divisible by it.
        n_kv_head: key/value heads (GQA); must divide ``n_head``. Default ``n_head``.
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
    """

    vocab_size: int = 256
    n_layer: int = 4
    n_head: int = 4
    n_kv_head: int | None = None
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

    def __post_init__(self):
        if self.recipe not in RECIPES:
            raise ValueError(f"recipe must be one of {sorted(RECIPES)}, got {self.recipe!r}")
        positive = ("vocab_size", "n_layer", "n_head", "d_model", "max_seq_len", "ffn_multiple_of")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head != 0:
            raise ValueError(
                f"d_model={self.d_model} must be divisible by n_head={self.n_head}"
            )
        if self.n_kv_head is not None and (
            self.n_kv_head <= 0 or self.n_head % self.n_kv_head != 0
        ):
            raise ValueError(
                f"n_kv_head={self.n_kv_head} must be a positive divisor of n_head={self.n_head}"
            )
        if self.d_ff is not None and self.d_ff <= 0:
            raise ValueError(f"d_ff must be a positive int, got {self.d_ff}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")
        for name in ("position", "norm", "mlp"):
            value = getattr(self, name)
            if value is not None and value not in _CHOICES[name]:
                raise ValueError(f"{name} must be one of {_CHOICES[name]} or None, got {value!r}")
        for name in ("norm_placement", "rope_layout"):
            if getattr(self, name) not in _CHOICES[name]:
                raise ValueError(
                    f"{name} must be one of {_CHOICES[name]}, got {getattr(self, name)!r}"
                )
        if self.position_type == "rope" and self.head_dim % 2 != 0:
            raise ValueError(f"RoPE needs an even head_dim = d_model / n_head, got {self.head_dim}")

    # ---- the two recipes -------------------------------------------------------
    @classmethod
    def classic(cls, **kwargs) -> GPTConfig:
        """GPT-2: learned positions, LayerNorm, GELU (tanh) MLP, MHA, biases."""
        return cls(recipe="classic", **kwargs)

    @classmethod
    def modern(cls, **kwargs) -> GPTConfig:
        """LLaMA-style: RoPE, RMSNorm, SwiGLU, GQA, no biases.

        ``n_kv_head`` defaults to ``n_head // 2`` when ``n_head`` is even (two query
        heads per KV head), else ``n_head``.
        """
        if kwargs.get("n_kv_head") is None:
            n_head = kwargs.get("n_head", cls.n_head)
            kwargs["n_kv_head"] = n_head // 2 if n_head % 2 == 0 else n_head
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
        return self.n_head if self.n_kv_head is None else self.n_kv_head

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

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
            raise ValueError(f"d has unknown GPTConfig fields {sorted(unknown)}")
        return cls(**d)


def _make_norm(config: GPTConfig) -> nn.Module:
    if config.norm_type == "layernorm":
        return LayerNorm(config.d_model, eps=config.norm_eps, bias=config.use_bias)
    return RMSNorm(config.d_model, eps=config.norm_eps)


class KVCache:
    """Keys and values of every layer for the positions processed so far.

    Buffers of shape ``(B, n_kv_head, max_seq_len, head_dim)`` per layer are
    allocated on first use (batch size, dtype and device taken from the first
    keys written). ``length`` is the number of positions filled.

    Args:
        n_layer: number of layers.
        max_seq_len: capacity in positions.
    """

    def __init__(self, n_layer: int, max_seq_len: int):
        self.n_layer, self.max_seq_len = n_layer, max_seq_len
        self.keys: list[Tensor | None] = [None] * n_layer
        self.values: list[Tensor | None] = [None] * n_layer
        self.length = 0

    @property
    def batch_size(self) -> int | None:
        return None if self.keys[0] is None else self.keys[0].size(0)

    def update(self, layer: int, k: Tensor, v: Tensor, start_pos: int) -> tuple[Tensor, Tensor]:
        """Write ``k, v`` ``(B, H_kv, T, D)`` at positions ``start_pos .. start_pos+T-1``.

        Returns:
            All keys and values of positions ``0 .. start_pos+T-1``:
            two tensors ``(B, H_kv, start_pos + T, D)``.
        """
        B, H, T, D = k.shape
        if self.keys[layer] is None:
            shape = (B, H, self.max_seq_len, D)
            self.keys[layer] = torch.zeros(shape, dtype=k.dtype, device=k.device)
            self.values[layer] = torch.zeros(shape, dtype=v.dtype, device=v.device)
        elif self.keys[layer].size(0) != B:
            raise ValueError(
                f"cache: holds a batch of {self.keys[layer].size(0)}, got {B}; use a new cache"
            )
        end = start_pos + T
        self.keys[layer][:, :, start_pos:end] = k
        self.values[layer][:, :, start_pos:end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def reorder(self, index: Tensor) -> None:
        """Select batch rows (beam search: row ``i`` becomes old row ``index[i]``)."""
        for layer in range(self.n_layer):
            if self.keys[layer] is not None:
                self.keys[layer] = self.keys[layer].index_select(0, index)
                self.values[layer] = self.values[layer].index_select(0, index)

    def reset(self) -> None:
        self.keys = [None] * self.n_layer
        self.values = [None] * self.n_layer
        self.length = 0

    def nbytes(self) -> int:
        """Bytes held: ``2 x layers x B x n_kv_head x max_seq_len x head_dim x bytes``."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values if t is not None)


class CausalSelfAttention(nn.Module):
    """Causal self-attention with optional RoPE, grouped KV heads and a KV cache.

    Projections (Hugging Face LLaMA names): ``q_proj: d -> n_head * D``,
    ``k_proj, v_proj: d -> n_kv_head * D``, ``o_proj: n_head * D -> d`` with
    ``D = head_dim``.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.config, self.layer_idx = config, layer_idx
        self.n_head, self.n_kv_head, self.head_dim = config.n_head, config.kv_heads, config.head_dim
        self.n_rep = self.n_head // self.n_kv_head  # query heads per KV head
        d, D, bias = config.d_model, self.head_dim, config.use_bias
        self.q_proj = nn.Linear(d, self.n_head * D, bias=bias)
        self.k_proj = nn.Linear(d, self.n_kv_head * D, bias=bias)
        self.v_proj = nn.Linear(d, self.n_kv_head * D, bias=bias)
        self.o_proj = nn.Linear(self.n_head * D, d, bias=bias)

    def forward(
        self, x: Tensor, positions: Tensor, cache: KVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        B, T, _ = x.shape
        H, H_kv, D = self.n_head, self.n_kv_head, self.head_dim
        q = self.q_proj(x).view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = self.k_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        v = self.v_proj(x).view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        if self.config.position_type == "rope":
            # Rotate q and k by their *absolute* positions; cached keys keep theirs.
            rope = {"base": self.config.rope_base, "layout": self.config.rope_layout}
            q = apply_rope(q, positions, **rope)
            k = apply_rope(k, positions, **rope)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v, start_pos)  # (B, H_kv, start_pos + T, D)
        # GQA: query head h reads KV head h // n_rep (integer division, not modulo).
        k, v = repeat_kv(k, self.n_rep), repeat_kv(v, self.n_rep)  # (B, H, T_k, D)
        T_k = k.size(2)
        # Query i sits at absolute position (T_k - T) + i and sees keys j <= that position.
        mask = causal_mask(T, T_k, offset=T_k - T, device=x.device)  # (T, T_k)
        out = scaled_dot_product_attention(q, k, v, mask)  # softmax(q k^T / sqrt(D) + mask) v
        out = out.transpose(1, 2).reshape(B, T, H * D)  # concat heads
        return self.o_proj(out)


class Block(nn.Module):
    """One Transformer block: attention then MLP, each in a residual connection.

    Pre-norm: ``x = x + Attn(ln_1(x)); x = x + MLP(ln_2(x))``.
    Post-norm: ``x = ln_1(x + Attn(x)); x = ln_2(x + MLP(x))``.
    Module names follow GPT-2 (``ln_1``, ``attn``, ``ln_2``, ``mlp``).
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.ln_1 = _make_norm(config)
        self.attn = CausalSelfAttention(config, layer_idx)
        self.ln_2 = _make_norm(config)
        if config.mlp_type == "swiglu":
            self.mlp: nn.Module = SwiGLU(config.d_model, config.ffn_hidden, bias=config.use_bias)
        else:
            self.mlp = FeedForward(
                config.d_model, config.ffn_hidden, activation=config.mlp_type, bias=config.use_bias
            )
        self.drop = nn.Dropout(config.dropout)

    def forward(
        self, x: Tensor, positions: Tensor, cache: KVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        if self.pre_norm:
            x = x + self.drop(self.attn(self.ln_1(x), positions, cache, start_pos))  # x + F(LN(x))
            x = x + self.drop(self.mlp(self.ln_2(x)))
        else:
            x = self.ln_1(x + self.drop(self.attn(x, positions, cache, start_pos)))  # LN(x + F(x))
            x = self.ln_2(x + self.drop(self.mlp(x)))
        return x


class GPT(nn.Module):
    """Decoder-only language model; see the module docstring for the two recipes.

    Module names: ``wte`` (token embedding ``E``, ``(V, d)``), ``wpe`` (learned
    positions, classic only), ``blocks``, ``ln_f`` (final norm), ``lm_head``.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise ValueError(f"config must be a GPTConfig, got {type(config).__name__}")
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)  # E: (V, d)
        self.wpe = (
            nn.Embedding(config.max_seq_len, config.d_model)
            if config.position_type == "learned"
            else None
        )
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config, i) for i in range(config.n_layer))
        # Pre-norm leaves the stream un-normalised, so one final norm before the head.
        self.ln_f = _make_norm(config) if config.norm_placement == "pre" else nn.Identity()
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)  # weight (V, d)
        if config.tie_weights:
            # W_U = E^T: nn.Linear computes h @ weight^T, so weight must be E itself.
            self.lm_head.weight = self.wte.weight
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 initialisation: N(0, 0.02) for matrices, zeros for biases, ones for
        norm gains, and N(0, 0.02 / sqrt(2L)) for the projections that write into
        the residual stream (``o_proj``, ``fc2`` / ``down_proj``), so the stream's
        variance does not grow with depth (2 residual writes per block)."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, mean=0.0, std=std)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, (LayerNorm, RMSNorm)):
                nn.init.ones_(module.weight)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        residual_std = std / math.sqrt(2 * self.config.n_layer)
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "fc2.weight", "down_proj.weight")):
                nn.init.normal_(p, mean=0.0, std=residual_std)

    def new_cache(self) -> KVCache:
        """An empty :class:`KVCache` sized for this model."""
        return KVCache(self.config.n_layer, self.config.max_seq_len)

    def unembed(self, h: Tensor) -> Tensor:
        """``(B, T, d)`` -> ``(B, T, V)`` logits: ``h @ W_U``, ``W_U = E^T`` when tied."""
        return self.lm_head(h)  # h @ lm_head.weight^T = h @ E^T

    def forward(
        self,
        idx: Tensor,
        targets: Tensor | None = None,
        cache: KVCache | None = None,
        start_pos: int = 0,
    ) -> tuple[Tensor, Tensor | None]:
        """
        Args:
            idx: ``(B, T)`` token ids at absolute positions ``start_pos .. start_pos+T-1``.
            targets: ``(B, T)`` next-token ids (``-100`` = ignored), or ``None``.
            cache: a :class:`KVCache` from :meth:`new_cache`; the keys and values of
                these positions are written into it and the queries attend to
                everything it holds before ``start_pos``.
            start_pos: absolute position of ``idx[:, 0]``. With a cache it must be
                ``<= cache.length`` (equal to append; smaller rewinds).

        Returns:
            ``(logits (B, T, V), loss)``; ``loss`` is the mean cross-entropy over
            non-ignored targets, or ``None`` without targets.
        """
        if idx.dim() != 2:
            raise ValueError(f"idx must have shape (B, T), got {tuple(idx.shape)}")
        B, T = idx.shape
        if start_pos < 0:
            raise ValueError(f"start_pos must be >= 0, got {start_pos}")
        if start_pos + T > self.config.max_seq_len:
            raise ValueError(
                f"idx: positions up to {start_pos + T} exceed max_seq_len="
                f"{self.config.max_seq_len}; shorten the input or raise max_seq_len"
            )
        if cache is not None and start_pos > cache.length:
            raise ValueError(
                f"start_pos={start_pos} leaves a gap: the cache holds {cache.length} positions"
            )
        positions = torch.arange(start_pos, start_pos + T, device=idx.device)  # (T,)
        x = self.wte(idx)  # (B, T, d): rows of E
        if self.wpe is not None:
            x = x + self.wpe(positions)  # + P[pos], broadcast over the batch
        x = self.drop(x)
        for block in self.blocks:
            x = block(x, positions, cache, start_pos)
        h = self.ln_f(x)
        logits = self.unembed(h)  # (B, T, V)
        if cache is not None:
            cache.length = start_pos + T
        loss = None
        if targets is not None:
            if targets.shape != idx.shape:
                raise ValueError(
                    f"targets must have shape {tuple(idx.shape)}, got {tuple(targets.shape)}"
                )
            # mean over positions of -log softmax(logits)[target]
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)
        return logits, loss


def count_parameters(model: nn.Module) -> int:
    """Number of distinct parameter scalars; a tied tensor is counted once."""
    seen: set[int] = set()
    total = 0
    for _, p in model.named_parameters(remove_duplicate=False):
        if id(p) not in seen:  # lm_head.weight is wte.weight when tied
            seen.add(id(p))
            total += p.numel()
    return total


def _count_config(config: GPTConfig) -> int:
    with torch.device("meta"):  # builds the modules without allocating memory
        return count_parameters(GPT(config))


def parameter_matched_configs(
    vocab_size: int = 256,
    d_model: int = 128,
    n_layer: int = 4,
    n_head: int = 4,
    n_kv_head: int | None = None,
    max_seq_len: int = 256,
    multiple_of: int = 8,
    **common,
) -> tuple[GPTConfig, GPTConfig]:
    """A classic and a modern config of about the same parameter count.

    Both share width, depth, heads and vocabulary. The modern recipe saves
    parameters (no position table, no biases, RMSNorm, fewer KV heads), and the
    difference is given back to its SwiGLU hidden size: its parameter count is
    ``P_0 + 3 d d_ff L``, linear in ``d_ff``, so ``d_ff`` is solved for and
    rounded to a multiple of ``multiple_of``.

    Returns:
        ``(classic, modern)``; ``count_parameters`` of the two models differ by less
        than ``3 d L multiple_of / 2``.
    """
    shared = dict(
        vocab_size=vocab_size, d_model=d_model, n_layer=n_layer, n_head=n_head,
        max_seq_len=max_seq_len, **common,
    )
    classic = GPTConfig.classic(**shared)
    modern = GPTConfig.modern(n_kv_head=n_kv_head, d_ff=multiple_of, **shared)
    target, base = _count_config(classic), _count_config(modern)
    # Parameters per extra hidden unit: 3 d L (gate, up, down each gain d weights).
    per_unit = (_count_config(replace(modern, d_ff=2 * multiple_of)) - base) / multiple_of
    d_ff = multiple_of + (target - base) / per_unit
    d_ff = max(multiple_of, multiple_of * round(d_ff / multiple_of))
    return classic, replace(modern, d_ff=int(d_ff))
