"""The capstone: a small decoder-only language model, in two recipes.

No framework: a GPT is a token embedding, a stack of identical blocks writing into a
residual stream, a final norm and an output head that turns each position's vector
into logits over the next token.

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

Read in this order:

* :mod:`toolkit.models.config`: :class:`GPTConfig`, the hyper-parameters and recipes;
* :mod:`toolkit.models.kv_cache`: :class:`StaticKVCache`, keys and values kept for decoding;
* :mod:`toolkit.models.attention`: :class:`CausalSelfAttention` (RoPE, GQA, the cache);
* :mod:`toolkit.models.gpt`: :class:`Block` and :class:`GPT` (weight tying, init);
* :mod:`toolkit.models.parameters`: :func:`count_parameters` and
  :func:`parameter_matched_configs`;
* then, for speed, :mod:`toolkit.models.fast_gpt`: :class:`FastGPT`, the same model with
  the same state dict on fused kernels, built from :mod:`toolkit.models.fused` (norms and
  activations), :mod:`toolkit.models.fast_attention` (:class:`FastCausalSelfAttention`)
  and :mod:`toolkit.models.backends` (``GPTConfig.attention_backend``: the teaching
  attention, PyTorch's SDPA, the blocked attention of
  :mod:`toolkit.models.blocked_attention` or the course's Triton kernels).

Shapes: ``idx`` ``(B, T)`` token ids; logits ``(B, T, vocab_size)``; attention
tensors ``(B, heads, T, d_head)``. Every public name is importable from this
package: ``from toolkit.models import GPT, FastGPT, GPTConfig``.
"""

from toolkit.models.attention import CausalSelfAttention
from toolkit.models.backends import ATTENTION_BACKENDS, causal_attention, resolve_backend
from toolkit.models.config import RECIPES, GPTConfig
from toolkit.models.fast_attention import FastCausalSelfAttention
from toolkit.models.fast_gpt import FastGPT
from toolkit.models.gpt import GPT, Block
from toolkit.models.kv_cache import StaticKVCache
from toolkit.models.parameters import count_parameters, parameter_matched_configs

__all__ = [
    "ATTENTION_BACKENDS",
    "GPT",
    "RECIPES",
    "Block",
    "CausalSelfAttention",
    "FastCausalSelfAttention",
    "FastGPT",
    "GPTConfig",
    "StaticKVCache",
    "causal_attention",
    "count_parameters",
    "parameter_matched_configs",
    "resolve_backend",
]
