"""The capstone's attention layer on the fast backends: same weights, fewer kernels.

:class:`FastCausalSelfAttention` has the state dict of
:class:`toolkit.models.CausalSelfAttention` (``q_proj``, ``k_proj``, ``v_proj``,
``o_proj``; it moves between them unchanged) and computes the same function.
Three things change, none of them the mathematics:

1. **One stored projection.** ``[q, k, v] = x [W_q; W_k; W_v]^T``: one matrix product
   reads ``x`` once instead of three times. The three matrices (and biases) are stored
   as *one* layer, ``qkv_proj`` (``d -> (H + 2 H_kv) D``): joining three parameters at
   every step costs a copy forward, a split backward, and two more tensors for
   autograd, gradient clipping and AdamW to visit, about 0.5 % of a CPU training step
   of the small capstone model, 0.8 % with RoPE's reordering (measured). The state
   dict still has the teaching names and layout (``q_proj.weight``, ``k_proj.weight``,
   ...: hooks translate on saving and loading), so a checkpoint moves between
   :class:`toolkit.models.GPT` and :class:`toolkit.models.FastGPT` unchanged, and
   :class:`toolkit.models.FastGPT` builds this layer on the ``meta`` device and loads
   the teaching layer's initialised weights into it.
2. **RoPE as a complex product, from a table.** A feature pair ``(a, b)`` turned by the
   angle ``phi`` is ``(a + ib) e^(i phi)``: one complex multiplication per pair, where
   the real formula ``(a cos - b sin, b cos + a sin)`` takes a copy of the rotated
   vector and four passes. The pairs must sit side by side for that; the half layout
   pairs feature ``i`` with ``i + D/2``, so the rows of ``W_q`` and ``W_k`` are stored
   reordered inside each head (``[0, D/2, 1, D/2 + 1, ...]``; the state dict
   undoes it). The same order on q and k leaves
   every score ``q . k`` unchanged, and v is not reordered, so the layer's output is
   too. The factors ``e^(i p theta_j)`` depend only on the position: they are computed
   once per model shape, device and dtype for every position up to ``max_seq_len``
   (:func:`toolkit.position.apply_rope` recomputes them in every call of every layer).
   q and k sit next to each other in the joint projection, so one multiplication turns
   both.
   16-bit dtypes have no complex type: they get the real formula on the same pairs.
3. **The attention itself** runs on the configured backend
   (:func:`toolkit.models.backends.causal_attention`): PyTorch's fused kernel with
   native grouped-query attention, the blocked attention (the default for training on a
   CPU), or the course's Triton kernels; no K/V copies per query head.
"""

from __future__ import annotations

from functools import lru_cache

import torch
from torch import Tensor, nn

from toolkit.models.attention import CausalSelfAttention
from toolkit.models.backends import causal_attention
from toolkit.models.config import GPTConfig
from toolkit.models.kv_cache import StaticKVCache
from toolkit.position import (
    interleaved_to_half_permutation,
    rope_cos_sin,
    rope_inv_freq,
    rotate_interleaved,
)


@lru_cache(maxsize=32)
def rope_table(
    max_seq_len: int, d_head: int, base: float, device: torch.device, dtype: torch.dtype
) -> tuple[Tensor, Tensor]:
    """``(cos, sin)``, each ``(max_seq_len, d_head)``: RoPE's rotation for every position,
    the pairs side by side (features ``2j, 2j + 1`` turn by ``p theta_j``).

    Computed as :func:`toolkit.position.apply_rope` computes them (angles in float32,
    float64 for float64 models, then cast to ``dtype``), so a row equals what it would
    compute for that position. Ordinary tensors even under ``torch.inference_mode``,
    so that a table made while generating can serve a later training step.
    """
    with torch.inference_mode(False), torch.no_grad():
        angle_dtype = torch.float64 if dtype == torch.float64 else torch.float32
        inv_freq = rope_inv_freq(d_head, base, dtype=angle_dtype).to(device)
        positions = torch.arange(max_seq_len, device=device)
        cos, sin = rope_cos_sin(positions, inv_freq, "interleaved")  # (max_seq_len, d_head)
        return cos.to(dtype), sin.to(dtype)


@lru_cache(maxsize=32)
def rope_phasors(
    max_seq_len: int, d_head: int, base: float, device: torch.device, dtype: torch.dtype
) -> Tensor:
    """``e^(i p theta_j)``, ``(max_seq_len, d_head / 2)`` complex, from :func:`rope_table`."""
    cos, sin = rope_table(max_seq_len, d_head, base, device, dtype)
    with torch.inference_mode(False), torch.no_grad():
        return torch.complex(cos[:, 0::2], sin[:, 0::2])  # cos + i sin


@lru_cache(maxsize=8)
def pairs_side_by_side(d_head: int, device: torch.device) -> Tensor:
    """``[0, D/2, 1, D/2 + 1, ...]``: the half layout's pairs ``(i, i + D/2)`` made adjacent."""
    with torch.inference_mode(False):
        return interleaved_to_half_permutation(d_head).argsort().to(device)


def rotate_pairs(x: Tensor, start_pos: int, max_seq_len: int, base: float) -> Tensor:
    """RoPE on ``x`` ``(B, T, heads, D)`` at positions ``start_pos .. start_pos + T - 1``,
    its pairs being features ``(2j, 2j + 1)``. The positions are consecutive, so the
    rotations are a slice of the table, not a gather."""
    T, D = x.shape[1], x.shape[-1]
    rows = slice(start_pos, start_pos + T)
    if x.dtype in (torch.float32, torch.float64):
        phasors = rope_phasors(max_seq_len, D, base, x.device, x.dtype)[rows, None]  # (T, 1, D/2)
        pairs = torch.view_as_complex(x.unflatten(-1, (D // 2, 2)))  # a + ib: (B, T, heads, D/2)
        return torch.view_as_real(pairs * phasors).flatten(-2)  # (a + ib) e^(i p theta)
    cos, sin = rope_table(max_seq_len, D, base, x.device, x.dtype)
    cos, sin = cos[rows, None], sin[rows, None]  # (T, 1, D), the same for every head
    return x * cos + rotate_interleaved(x) * sin  # (a cos - b sin, b cos + a sin)


class FastCausalSelfAttention(CausalSelfAttention):
    """:class:`toolkit.models.CausalSelfAttention` with one stored QKV projection, a RoPE
    table and the attention backend of ``config.attention_backend``.

    Layers: ``qkv_proj: d -> (H + 2 H_kv) D``, whose output rows are those of ``W_q``,
    ``W_k``, ``W_v`` one after the other (those of ``W_q`` and ``W_k`` in RoPE's pair
    order, see the module docstring), and ``o_proj``. :meth:`state_dict` and
    :meth:`load_state_dict` speak the reference layer's names and layout
    (``q_proj.weight``, ``k_proj.weight``, ``v_proj.weight``, their biases, ``o_proj``);
    :meth:`split_qkv` does the same for any tensor of ``qkv_proj``'s shapes, a gradient
    for instance.

    Shapes: ``x`` ``(B, T, d)`` -> ``(B, T, d)``.
    """

    def __init__(self, config: GPTConfig, layer_idx: int):
        # The reference layer's four nn.Linear first: building them takes the same
        # random draws, so a model with either layer continues from the same RNG state.
        super().__init__(config, layer_idx)
        q, k, v, o = self.q_proj, self.k_proj, self.v_proj, self.o_proj
        # on the meta device: no random draws of its own, then filled with W_q, W_k, W_v
        qkv = nn.Linear(config.d_model, sum(self._qkv_rows), bias=config.use_bias,
                        device="meta", dtype=q.weight.dtype).to_empty(device=q.weight.device)
        with torch.no_grad():
            qkv.weight.copy_(self.join_qkv(q.weight, k.weight, v.weight))
            if qkv.bias is not None:
                qkv.bias.copy_(self.join_qkv(q.bias, k.bias, v.bias))
        del self.q_proj, self.k_proj, self.v_proj, self.o_proj
        self.qkv_proj = qkv  # registered before o_proj: GPT's initialisation draws q, k, v, o
        self.o_proj = o
        self.register_state_dict_post_hook(_save_reference_names)
        self.register_load_state_dict_pre_hook(_load_reference_names)
        self.register_load_state_dict_post_hook(_report_reference_names)

    def __getattr__(self, name: str):
        try:
            return super().__getattr__(name)  # parameters and sub-layers live here
        except AttributeError:
            if name not in _PROJECTIONS:
                raise
        # a reader of the teaching layer looks for these
        raise AttributeError(
            f"{type(self).__name__} has no {name}: it stores q_proj, k_proj and v_proj as "
            "one layer, qkv_proj. state_dict() has them by name, split_qkv(t) splits any "
            "tensor of its shapes (a gradient), and toolkit.models.GPT builds the teaching "
            "layer itself"
        )

    # ---------------------------------------------------- the stored layout
    @property
    def _qkv_rows(self) -> tuple[int, int, int]:
        """Rows of ``W_q``, ``W_k``, ``W_v``: ``H D, H_kv D, H_kv D``."""
        D = self.d_head
        return self.n_heads * D, self.n_kv_heads * D, self.n_kv_heads * D

    @property
    def _pairs_reordered(self) -> bool:
        """Half-layout RoPE: q and k rows are stored with each pair side by side."""
        return self.config.position_type == "rope" and self.config.rope_layout == "half"

    def _reorder_heads(self, rows: Tensor, order: Tensor) -> Tensor:
        """``rows`` ``(heads * D, ...)`` with the ``D`` rows of every head taken in ``order``."""
        return rows.unflatten(0, (-1, self.d_head))[:, order].flatten(0, 1)

    def join_qkv(self, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Reference layout -> stored: ``(H D, ...), (H_kv D, ...), (H_kv D, ...)`` ->
        ``((H + 2 H_kv) D, ...)``, for weights (``(rows, d)``) and biases (``(rows,)``)."""
        if self._pairs_reordered:
            order = pairs_side_by_side(self.d_head, q.device)
            q, k = self._reorder_heads(q, order), self._reorder_heads(k, order)
        return torch.cat((q, k, v))

    def split_qkv(self, joint: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Stored -> reference layout, the inverse of :meth:`join_qkv`: ``(q, k, v)``.
        Views of ``joint`` where no reordering is needed, new tensors where it is."""
        q, k, v = joint.split(self._qkv_rows)
        if self._pairs_reordered:
            # [0, 2, 4, ..., 1, 3, ...], the inverse of pairs_side_by_side
            order = interleaved_to_half_permutation(self.d_head).to(joint.device)
            q, k = self._reorder_heads(q, order), self._reorder_heads(k, order)
        return q, k, v

    # ---------------------------------------------------- the forward pass
    def _project_qkv(self, x: Tensor) -> Tensor:
        """``(B, T, d)`` -> ``(B, T, H + 2 H_kv, D)``: the heads of q, then k, then v.

        With half-layout RoPE the features of q and k come out pairs side by side.
        """
        qkv = self.qkv_proj(x)  # one product: x [W_q; W_k; W_v]^T
        return qkv.unflatten(-1, (self.n_heads + 2 * self.n_kv_heads, self.d_head))

    def forward(
        self, x: Tensor, positions: Tensor, cache: StaticKVCache | None = None, start_pos: int = 0
    ) -> Tensor:
        B, T, _ = x.shape
        H, H_kv, D = self.n_heads, self.n_kv_heads, self.d_head
        # split, not slicing: its gradient is one concatenation, where each slice's is a
        # zero tensor of the whole size with the slice copied in
        qkv = self._project_qkv(x)  # (B, T, H + 2 H_kv, D)
        if self.config.position_type == "rope":  # absolute positions; cached keys keep theirs
            # q and k side by side: one rotation for both. `positions` is always
            # start_pos + arange(T) (GPT.forward), so the table is sliced, not gathered.
            qk, v = qkv.split((H + H_kv, H_kv), dim=2)
            qk = rotate_pairs(qk, start_pos, self.config.max_seq_len, self.config.rope_base)
            q, k = qk.split((H, H_kv), dim=2)
        else:
            q, k, v = qkv.split((H, H_kv, H_kv), dim=2)  # (B, T, heads, D)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # (B, heads, T, D)
        if cache is not None:
            k, v = cache.update(self.layer_idx, k, v, start_pos)  # (B, H_kv, start_pos + T, D)
        out = causal_attention(q, k, v, self.config.attention_backend)  # (B, H, T, D)
        return self.o_proj(out.transpose(1, 2).reshape(B, T, H * D))  # concat heads, project


# -------------------------------------------------------- state-dict translation
_PROJECTIONS = ("q_proj", "k_proj", "v_proj")


def _save_reference_names(module: FastCausalSelfAttention, state_dict, prefix, local_metadata):
    """``qkv_proj.weight``/``.bias`` -> ``q_proj.weight``, ``k_proj.weight``, ... in the
    reference order. The layer's entries are the last ones written so far; they are taken
    out and put back translated (views of the parameter, as a state dict's tensors are,
    except where RoPE's row order is undone)."""
    own = [key for key in state_dict if key.startswith(prefix)]
    entries = {key[len(prefix):]: state_dict.pop(key) for key in own}
    for kind in ("weight", "bias"):
        joint = entries.pop(f"qkv_proj.{kind}", None)
        if joint is not None:
            for name, part in zip(_PROJECTIONS, module.split_qkv(joint)):
                entries[f"{name}.{kind}"] = part
    order = [f"{name}.{kind}" for name in (*_PROJECTIONS, "o_proj") for kind in ("weight", "bias")]
    for key in sorted(entries, key=lambda k: order.index(k) if k in order else len(order)):
        state_dict[prefix + key] = entries[key]


def _load_reference_names(module: FastCausalSelfAttention, state_dict, prefix, local_metadata,
                          strict, missing_keys, unexpected_keys, error_msgs):
    """``q_proj.weight``, ``k_proj.weight``, ``v_proj.weight`` (and biases) -> the joint
    ``qkv_proj.weight`` (``.bias``), before the module loads its parameters. The three
    load together or not at all; what is absent is remembered for the report."""
    absent_by_kind = {}
    for kind in ("weight", "bias"):
        keys = [f"{prefix}{name}.{kind}" for name in _PROJECTIONS]
        absent = [key for key in keys if key not in state_dict]
        if not absent:
            q, k, v = (state_dict.pop(key) for key in keys)
            state_dict[f"{prefix}qkv_proj.{kind}"] = module.join_qkv(q, k, v)
            continue
        absent_by_kind[kind] = absent
        if len(absent) < len(keys):  # some present: not loadable, and not "unexpected"
            for key in keys:
                state_dict.pop(key, None)
            layer = prefix.rstrip(".") or type(module).__name__
            error_msgs.append(
                f"{layer}: q_proj, k_proj and v_proj are stored as one layer here, so their "
                f"{kind} tensors load together; the state dict lacks {', '.join(absent)}"
            )
    module._qkv_absent = (prefix, absent_by_kind)


def _report_reference_names(module: FastCausalSelfAttention, incompatible_keys) -> None:
    """A missing ``qkv_proj.weight`` is reported as the reference names that were absent."""
    prefix, absent_by_kind = module.__dict__.pop("_qkv_absent", ("", {}))
    missing = incompatible_keys.missing_keys
    joint = [f"{prefix}qkv_proj.{kind}" for kind in absent_by_kind]
    joint = [key for key in joint if key in missing]
    if joint:
        at = missing.index(joint[0])
        for key in joint:
            missing.remove(key)
        absent = [key for kind in absent_by_kind for key in absent_by_kind[kind]]
        # in the reference layer's order: q_proj.weight, q_proj.bias, k_proj.weight, ...
        order = [f"{prefix}{name}.{kind}" for name in _PROJECTIONS for kind in ("weight", "bias")]
        missing[at:at] = sorted(absent, key=order.index)
