# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Lecture 01: Attention, step by step
#
# This lecture comes before Assignment 01. Nothing here is graded: run every cell, move
# the sliders, change the numbers. When you open the assignment you will write the same
# operations yourself; here the course toolkit (`toolkit/`, the reference
# implementation) does the work so you can watch what happens.
#
# **Try it** cells ask you a question first. Predict the answer, then run the cell: the
# toolkit computes it. If your prediction was wrong, that is the most useful moment of
# the lecture; reread the paragraph above the cell.
#
# What you will see:
#
# 1. attention as a soft lookup, and why the scores are divided by $\sqrt{d_k}$;
# 2. masks, and the two conventions for them that you will meet in other code;
# 3. why attention alone cannot tell word order;
# 4. many heads, and what attention costs in time and memory;
# 5. the three families (encoder-only, decoder-only, encoder-decoder) run side by side;
# 6. reading: how the families came to be, and in-context learning.

# %%
# %matplotlib inline
import math

import matplotlib.pyplot as plt
import torch

from toolkit.attention import MultiHeadAttention, attention_weights, scaled_dot_product_attention
from toolkit.masks import causal_mask, mask_to_additive, padding_mask, padding_mask_from_attention_mask
from toolkit.notebook import friendly_errors
from toolkit.transformer import (
    DecoderOnlyBlock,
    DecoderOnlyModel,
    EncoderBlock,
    EncoderDecoderModel,
    EncoderOnlyModel,
    EncoderOutput,
    TokenPositionEmbedding,
    attention_mask_to_bool,
    family_attention_patterns,
)
from toolkit.widgets.attention import (
    MASK_KINDS,
    attention_explorer,
    example_attention,
    families_explorer,
    permutation_demo,
    permutation_outputs,
    plot_attention_example,
    plot_attention_heatmap,
    plot_family_patterns,
    plot_permutation,
)

friendly_errors()
torch.manual_seed(0)

# %% [markdown]
# ## 1. A soft lookup
#
# A Python dictionary answers a query with the value of the one key that matches it
# exactly. Attention answers with a *blend* of all values, weighted by how well each key
# matches:
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\left(\frac{QK^\top}{\sqrt{d_k}}\right)V .$$
#
# Row $i$ of $QK^\top$ holds the scores of query $i$ against every key (dot products: large
# when the two vectors point the same way). The softmax turns each row into weights that
# are positive and sum to 1, and the output of query $i$ is the weighted average of the
# value rows. Below, three keys point in three directions and the query points mostly
# along the second one.

# %%
keys = torch.tensor([[1.0, 0.0, 0.0, 0.0],   # "cat"
                     [0.0, 1.0, 0.0, 0.0],   # "sat"
                     [0.0, 0.0, 1.0, 0.0]])  # "mat"
values = torch.tensor([[10.0], [20.0], [60.0]])
query = torch.tensor([[0.3, 2.0, 0.1, 0.0]])
weights = attention_weights(query, keys)  # softmax(q k^T / sqrt(d_k)), shape (1, 3)
print("weights:", weights.numpy().round(3), " output:", (weights @ values).item())
plot_attention_heatmap(weights, ["cat", "sat", "mat"], "one query, three keys",
                       query_tokens=["q"])

# %% [markdown]
# **Try it.** Multiply the query by 10: does the output move towards 20 (the value of
# "sat") or towards 30 (the average of all three values)? And if you multiply it by 0?
# Predict, then run.

# %%
for factor in (0.0, 1.0, 10.0):
    out = scaled_dot_product_attention(factor * query, keys, values)
    print(f"query x {factor:>4}: output {out.item():6.2f}")

# %% [markdown]
# A zero query scores every key alike: uniform weights, the plain average (30). A long
# query makes the softmax nearly one-hot: the output is the best key's value (20, since
# "sat" wins). The *scale* of the scores decides how sharp the lookup is.
#
# ### Why divide by $\sqrt{d_k}$
#
# If the entries of $q$ and $k$ are independent with mean 0 and variance 1, then
# $q\cdot k = \sum_{i=1}^{d_k} q_i k_i$ is a sum of $d_k$ terms of variance 1: its variance is
# $d_k$. With $d_k = 64$ scores are typically $\pm 8$ and each row of the softmax is
# dominated by one or two keys; where a row saturates, its gradients almost vanish and
# training stalls. Dividing by
# $\sqrt{d_k}$ brings the variance back to 1 (arXiv 1706.03762, section 3.2.1).
#
# **Try it.** How large is the standard deviation of the raw scores for $d_k = 64$? And
# how sharp (the largest weight of a row, on average) are the rows with and without the
# division? Predict, then run.

# %%
d_k = 64
q, k = torch.randn(256, d_k), torch.randn(256, d_k)
raw = q @ k.T  # (256, 256)
print(f"std of q.k: {raw.std():.2f} (sqrt(d_k) = {math.sqrt(d_k):.0f})")
for label, scale in (("divided by sqrt(d_k)", None), ("not divided", 1.0)):
    top = attention_weights(q, k, scale=scale).amax(dim=-1).mean()
    print(f"{label:>22}: the largest weight of a row is {top:.2f} on average")

# %% [markdown]
# The widget below is the same computation on a six-token sentence. The *temperature*
# $\tau$ divides the scores once more: $\tau < 1$ sharpens, $\tau > 1$ flattens. Forgetting
# the $1/\sqrt{d_k}$ is the same as a temperature of $1/\sqrt{d_k}$, far too sharp. Pick a
# mask too (one of the widget's `MASK_KINDS`); section 2 explains them.

# %%
print("masks:", ", ".join(MASK_KINDS))
attention_explorer()

# %% [markdown]
# ## 2. Masks: who may see whom
#
# A mask removes some (query, key) pairs *before* the softmax, so the remaining weights of
# each row still sum to 1. The course's masks are boolean with **`True` = may attend**,
# the convention of `torch.nn.functional.scaled_dot_product_attention`:
#
# * **causal**: query $i$ may see keys $j \le i$. A model that predicts the next token
#   must not peek at it;
# * **key padding**: sequences of a batch have different lengths and are padded to the
#   longest; no query may attend to a padding key.
#
# Internally a boolean mask becomes an *additive* one: 0 where allowed, $-\infty$ where
# blocked, added to the scores; $e^{-\infty} = 0$ then removes the key from the softmax.
#
# **Try it.** The additive form and the boolean form must give identical weights. Check
# it on the causal example of the widget; then look at the matrix: which row sees only
# one key?

# %%
tokens = ["the", "cat", "sat", "on", "the", "mat"]
weights_causal, mask = example_attention(tokens, mask_kind="causal")
scores = torch.randn(6, 6)
via_bool = torch.softmax(scores.masked_fill(~mask, float("-inf")), dim=-1)
via_additive = torch.softmax(scores + mask_to_additive(mask), dim=-1)
print("same weights:", torch.allclose(via_bool, via_additive))
print(mask_to_additive(causal_mask(4)))
plot_attention_example(tokens, mask_kind="combined", n_real=4)

# %% [markdown]
# Row 0 sees only itself. In the figure above (`combined`: causal **and** padding, with
# the last two tokens padding) the padded columns are empty for every row.
#
# **More keys than queries.** With a KV cache the new queries come after $P$ cached
# tokens, so there are more keys than queries. The course's `causal_mask(T_q, T_k,
# offset=P)` keeps one rule, query $i$ sees keys $j \le i + P$; with `offset=0` a
# non-square mask is aligned top-left, and FlashAttention's and Hugging Face's
# bottom-right alignment is `offset = T_k - T_q`:

# %%
print("top-left (offset 0):\n", causal_mask(3, 5).int())
print("bottom-right (offset = T_k - T_q = 2):\n", causal_mask(3, 5, offset=2).int())

# %% [markdown]
# ### Two conventions, one trap
#
# Hugging Face models take an `attention_mask` of shape `(batch, seq)` with **1 = real
# token, 0 = padding**. `torch.nn.MultiheadAttention`'s `key_padding_mask` uses the
# opposite sense: **True = ignore this key**. Passing one where the other is expected
# attends *only* to the padding. The toolkit converts explicitly, and puts the mask in the
# shape `(batch, 1, 1, seq)` that broadcasts over heads and queries.

# %%
hf_attention_mask = torch.tensor([[1, 1, 1, 0, 0],
                                  [1, 1, 1, 1, 1]])
keep = padding_mask_from_attention_mask(hf_attention_mask)  # (2, 1, 1, 5), True = attend
print(keep.shape, keep[0, 0, 0].tolist())
print("same as from lengths:", torch.equal(keep, padding_mask(torch.tensor([3, 5]))))
print("what nn.MultiheadAttention wants instead:", (~keep[0, 0, 0]).tolist())

# %% [markdown]
# ## 3. Attention does not know the order of its inputs
#
# Shuffle the rows of $X$ and self-attention returns its outputs shuffled the same way,
# otherwise unchanged: $f(PX) = P f(X)$ for every permutation $P$ (*permutation
# equivariance*). Each output is a weighted sum over a *set* of keys, and a sum does not
# care about order. "dog bites man" and "man bites dog" would look the same; this is why
# every Transformer adds position information (Lecture 02).
#
# **Try it.** Swap the first two tokens. How far is $f(PX)$ from $P f(X)$ without
# positions, and with sinusoidal position vectors added to the input? Predict, then run.

# %%
swap = [1, 0, 2, 3, 4, 5]
for with_positions in (False, True):
    result = permutation_outputs(swap, with_positions=with_positions)
    print(f"with positions = {with_positions!s:>5}: max |f(PX) - P f(X)| = {result['gap']:.2e}")
plot_permutation(swap, with_positions=True, tokens=tokens)

# %% [markdown]
# Without positions the gap is zero (up to rounding); with them it is not. Try other
# permutations in the widget:

# %%
permutation_demo(tokens)

# %% [markdown]
# ## 4. Many heads, and what attention costs
#
# One attention computes one kind of weighting. **Multi-head attention** runs $h$ of them
# in parallel on slices of width $d_k = d_\text{model}/h$ of learned projections, then
# mixes the results with an output projection $W_o$. The total work is about that of one
# head of full width, and each head is free to learn a different pattern (one looks at the
# previous token, another at the subject of the sentence, ...).

# %%
mha = MultiHeadAttention(d_model=32, n_heads=4)
x = torch.randn(2, 7, 32)  # (batch, seq, d_model)
print("output:", tuple(mha(x, x).shape), "  parameters:", sum(p.numel() for p in mha.parameters()))

# %% [markdown]
# Every head builds a $T \times T$ score matrix: $O(T^2 d)$ time and $O(T^2)$ memory. At
# $T = 4096$ in 16-bit floats that is 33.5 MB per head, 1.07 GB for 32 heads of one layer.
# Lectures 03 and 04 are about paying less.
#
# ## 5. The three families, side by side
#
# The blocks are the same everywhere; what makes a *family* is which mask each attention
# uses, and whether there is cross-attention:
#
# | family | attention | examples |
# |---|---|---|
# | encoder-only | bidirectional self-attention | BERT (arXiv 1810.04805), RoBERTa (1907.11692) |
# | decoder-only | causal self-attention | GPT-3 (2005.14165), LLaMA (2302.13971) |
# | encoder-decoder | bidirectional encoder; causal decoder with cross-attention | T5 (1910.10683), BART (1910.13461), Whisper (2212.04356) |
#
# The widget draws the three patterns; move the padding slider to hide source tokens.

# %%
families_explorer()

# %% [markdown]
# Patterns are a claim; let us test it on real (tiny, untrained) models. We build one model
# of each family, change one input token at a time, and record which outputs move. If the
# encoder is bidirectional, every output depends on every input; if the decoder is causal,
# output $i$ depends on inputs $j \le i$ only; cross-attention lets every target position
# read every source token.

# %%
def dependence(run, ids, n_out):
    """(n_out, T) bool: True where changing input token j changes output position i."""
    with torch.no_grad():
        base = run(ids)
        moved = torch.zeros(n_out, ids.size(1), dtype=torch.bool)
        for j in range(ids.size(1)):
            changed = ids.clone()
            changed[0, j] = (changed[0, j] + 1) % 50
            moved[:, j] = (run(changed) - base)[0].abs().amax(dim=-1) > 1e-6
    return moved


torch.manual_seed(0)
encoder = EncoderOnlyModel(vocab_size=50, d_model=32, n_heads=4, n_layers=2).eval()
decoder = DecoderOnlyModel(vocab_size=50, d_model=32, n_heads=4, n_layers=2).eval()
seq2seq = EncoderDecoderModel(vocab_size=50, d_model=32, n_heads=4).eval()
src, tgt = torch.randint(0, 50, (1, 6)), torch.randint(0, 50, (1, 4))

out = encoder(src)
assert isinstance(out, EncoderOutput)  # (hidden_states, MLM logits)
measured = {
    "encoder_self": dependence(lambda ids: encoder(ids).hidden_states, src, 6),
    "decoder_self": dependence(decoder, tgt, 4),
    "cross": dependence(lambda ids: seq2seq(ids, tgt), src, 4),
}
expected = family_attention_patterns(T_src=6, T_tgt=4)
for name in expected:
    print(f"{name:>12}: measured dependence == mask pattern: "
          f"{torch.equal(measured[name], expected[name])}")

fig, axes = plt.subplots(1, 3, figsize=(10, 3.2), layout="constrained")
for ax, (name, moved) in zip(axes, measured.items()):
    plot_attention_heatmap(moved.float(), title=f"{name}: measured", annotate=False, ax=ax)
    ax.set(xlabel="input token j that changed", ylabel="output position i")

# %% [markdown]
# With two layers the dependence could in principle spread further than one mask, yet it
# matches: a causal layer stacked on a causal layer is still causal, and bidirectional
# stays bidirectional. The same figure, drawn straight from the masks, for any lengths:

# %%
plot_family_patterns(T_src=6, T_tgt=4, src_length=5)

# %% [markdown]
# **Try it.** A decoder-only block *is* an encoder block with a causal mask (GPT's block is
# BERT's block with one more mask). Copy the weights of one into the other: are the outputs
# equal when the encoder block is given `causal_mask(T)`? And without it? Predict, then run.

# %%
torch.manual_seed(1)
gpt_block = DecoderOnlyBlock(d_model=32, n_heads=4, d_ff=64).eval()
bert_block = EncoderBlock(d_model=32, n_heads=4, d_ff=64).eval()
bert_block.load_state_dict(gpt_block.state_dict())
x = torch.randn(1, 5, 32)
with torch.no_grad():
    print("with the causal mask:   ", torch.allclose(gpt_block(x), bert_block(x, causal_mask(5))))
    print("without it:             ", torch.allclose(gpt_block(x), bert_block(x)))

# %% [markdown]
# ### The input layer, and a limit it sets
#
# The tiny models add a learned position vector to each token embedding
# (`TokenPositionEmbedding`, as BERT and GPT-2 do). A learned table has one row per
# position, so it has nothing for a sequence longer than the table: the toolkit refuses
# clearly instead of indexing out of range. The padding mask reaches the blocks through
# `attention_mask_to_bool`, the Hugging Face convention turned into ours.

# %%
embed = TokenPositionEmbedding(vocab_size=50, d_model=8, max_seq_len=4, dropout=0.0)
print(tuple(embed(torch.tensor([[1, 2, 3]])).shape))
try:
    embed(torch.tensor([[1, 2, 3, 4, 5]]))
except ValueError as error:
    print("ValueError:", error)
print(attention_mask_to_bool(hf_attention_mask, hf_attention_mask, "attention_mask").shape)

# %% [markdown]
# ## 6. Reading: where the families came from, and in-context learning
#
# Attention began as a helper inside recurrent translation models (Bahdanau, Cho and
# Bengio, arXiv 1409.0473): the decoder looked back at every encoder state instead of a
# single summary vector. The Transformer (arXiv 1706.03762) kept only the attention, an
# encoder-decoder for translation, and trained far faster because no step waits for the
# previous one.
#
# Within two years the two halves went their own ways. **BERT** (arXiv 1810.04805) kept the
# encoder and pre-trained it by hiding 15% of the input tokens and predicting them from
# both sides, then fine-tuned it per task: it set the state of the art on understanding
# benchmarks and became the default way to classify and tag text. **GPT** kept the decoder
# and trained it on nothing but next-token prediction; GPT-2 (2019) showed that a large
# enough decoder performs tasks it was never fine-tuned for when they are phrased as text
# to continue. **T5** (arXiv 1910.10683) went the other way round and cast every task,
# classification included, as text in and text out of one encoder-decoder, after
# comparing it with decoder-only models (with and without a bidirectional prefix) under
# the same budget.
#
# **GPT-3** (arXiv 2005.14165) made the decoder-only case: at 175B parameters a model
# given a few solved examples in its prompt solves the next one, with no gradient step.
# This is **in-context learning**: the "learning" happens in the forward pass, through
# attention over the examples. Part of the mechanism has been traced to *induction heads*
# (arXiv 2209.11895), pairs of heads that find an earlier occurrence of the current token
# and copy what followed it; small Transformers trained on purpose can even learn linear
# regression in context (arXiv 2208.01066). Because one decoder-only model serves every
# task through its prompt, and its training signal (every next token of every text) costs
# no labels, it became the recipe of most large models since. Encoders remain the
# efficient choice for embeddings and classification; encoder-decoders for inputs of
# another kind than the output (speech in Whisper, translation).
#
# ## Summary
#
# * Attention is a soft lookup, $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$; the $\sqrt{d_k}$
#   keeps the scores' variance at 1 so the softmax neither saturates nor flattens.
# * Masks act before the softmax; ours say `True` = may attend. Hugging Face's 1/0
#   `attention_mask` and PyTorch's `key_padding_mask` (True = ignore) differ: convert.
# * Without positions, self-attention is permutation-equivariant.
# * The families differ only in masks and cross-attention, and a measured dependence
#   matrix shows exactly those patterns.
#
# Now open **Assignment 01**, where you write attention, the masks, multi-head attention and
# a decoder block yourself.
