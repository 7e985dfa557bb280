"""Positional encoding: telling attention *where* each token is.

Attention on its own treats its input as a set. Permute the tokens and the
outputs are permuted the same way (it is permutation-equivariant), so "dog bites
man" and "man bites dog" look alike. Every scheme below breaks that symmetry; they
differ in *where* the position enters and in *what* the model can read from it.

One module per family, read in this order:

* :mod:`toolkit.position.absolute`: added to the token embeddings once, at the bottom:
  the fixed **sinusoidal** table (arXiv 1706.03762) and a **learned** table (BERT, GPT-2).
* :mod:`toolkit.position.rope`: **RoPE** (arXiv 2104.09864) rotates query/key feature
  pairs inside every attention layer, so scores see only the offset ``n - m``.
* :mod:`toolkit.position.rope_scaling`: **context extension** for RoPE models trained
  on ``L_train`` tokens and run on ``L_new = s * L_train``: position interpolation,
  NTK-aware and dynamic NTK base changes, YaRN, LongRoPE.
* :mod:`toolkit.position.biases`: no embedding at all, a bias on the scores: **ALiBi**
  (arXiv 2108.12409) and the **T5 relative bias** (arXiv 1910.10683).
* **NoPE** (reading): a causal decoder with no encoding at all can still infer
  positions, because the causal mask itself reveals how many tokens came before.

Conventions: attention tensors are ``(batch, heads, seq, d_head)``; positions are
absolute integers ``0, 1, ...``; with a KV cache holding ``P`` tokens the new tokens
have positions ``P, P+1, ...``. Where Hugging Face transformers has a counterpart,
the functions here match it to float tolerance (the tests check this), and any
difference in convention is named in the docstring.

Every public name is importable from this package: ``from toolkit.position import
apply_rope``.
"""

from toolkit.position.absolute import (
    LearnedPositionalEmbedding,
    sinusoid_frequencies,
    sinusoidal_encoding,
    sinusoidal_shift_matrix,
)
from toolkit.position.biases import (
    T5RelativePositionBias,
    alibi_bias,
    alibi_bias_key_only,
    alibi_slopes,
    geometric_slopes,
    t5_relative_position_bucket,
)
from toolkit.position.rope import (
    apply_rope,
    interleaved_to_half_permutation,
    rope_cos_sin,
    rope_inv_freq,
    rotate_half,
    rotate_interleaved,
)
from toolkit.position.rope_scaling import (
    longrope_attention_factor,
    longrope_inv_freq,
    longrope_inv_freq_and_attention_factor,
    ntk_base,
    rope_inv_freq_dynamic_ntk,
    rope_inv_freq_linear,
    rope_inv_freq_ntk,
    yarn_band_ratios,
    yarn_inv_freq_and_temperature,
)

__all__ = [
    "sinusoid_frequencies",
    "sinusoidal_encoding",
    "sinusoidal_shift_matrix",
    "LearnedPositionalEmbedding",
    "rope_inv_freq",
    "rope_cos_sin",
    "rotate_half",
    "rotate_interleaved",
    "apply_rope",
    "interleaved_to_half_permutation",
    "rope_inv_freq_linear",
    "ntk_base",
    "rope_inv_freq_ntk",
    "rope_inv_freq_dynamic_ntk",
    "yarn_band_ratios",
    "yarn_inv_freq_and_temperature",
    "longrope_inv_freq",
    "longrope_attention_factor",
    "longrope_inv_freq_and_attention_factor",
    "geometric_slopes",
    "alibi_slopes",
    "alibi_bias",
    "alibi_bias_key_only",
    "t5_relative_position_bucket",
    "T5RelativePositionBias",
]
