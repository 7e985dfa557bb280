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
# # Lecture 03: Paying less for attention
#
# Full attention compares every token with every other: $T^2$ scores per head and layer.
# At 4096 tokens that is 16.8 million scores; at 128k, 17 billion. And when a model
# generates text it must keep the keys and values of every token it has seen: the **KV
# cache**, which for a large model and a long context outgrows the weights. This lecture,
# before Assignment 03, looks at both costs and at what each remedy gives up:
#
# 1. sparse patterns (windows, global tokens, BigBird) and how far information travels
#    through a stack of windows;
# 2. linear attention, in one paragraph (the assignment goes deeper);
# 3. the KV cache, and sharing keys and values between heads (MQA, GQA) or compressing
#    them (MLA);
# 4. differential attention: not cheaper, but less noisy, shown on a toy retrieval.

# %%
# %matplotlib inline
import math

import matplotlib.pyplot as plt
import torch

from toolkit.attention import attention_weights, scaled_dot_product_attention
from toolkit.differential import DifferentialAttention, differential_attention, lambda_init_fn
from toolkit.gqa import grouped_attention, kv_cache_bytes, kv_head_for_query_head, repeat_kv
from toolkit.linear_attention import linear_attention, linear_attention_quadratic
from toolkit.masks import (
    band_mask,
    bigbird_mask,
    causal_mask,
    global_token_mask,
    mask_cell_count,
    random_block_mask,
    receptive_field,
    sliding_window_mask,
)
from toolkit.mla import deepseek_v2_cache_reduction, mla_cache_bytes
from toolkit.notebook import friendly_errors
from toolkit.widgets.efficient import (
    DTYPE_BYTES,
    GIB,
    MODEL_PRESETS,
    gallery_masks,
    kv_cache_calculator,
    kv_cache_comparison,
    mask_gallery,
    plot_kv_cache,
    plot_mask_gallery,
)

friendly_errors()
torch.manual_seed(0)

# %% [markdown]
# ## 1. Sparse patterns: compute only some scores
#
# Most of a token's attention goes to a few places: its neighbours, a few special tokens,
# the occasional far reference. Sparse patterns keep those cells of the $T \times T$ matrix
# and drop the rest:
#
# * a **sliding window** (Longformer, arXiv 2004.05150; Mistral, arXiv 2310.06825): query
#   $i$ sees keys $i - w < j \le i$, about $T w$ cells instead of $T^2$;
# * a **band**, its bidirectional twin, $|i - j| \le r$;
# * a **dilated** window, with gaps between the keys, covering a wider span for the same
#   price (Longformer; compare the Sparse Transformer's strided pattern, arXiv 1904.10509);
# * **global tokens**, which see every token and are seen by every token (a `[CLS]`
#   token, the question in a question-answering input);
# * **BigBird** (arXiv 2007.14062): window + global + a few **random** blocks per row,
#   in blocks of tokens so that GPUs can compute them as dense tiles.
#
# Every panel is titled with its exact number of cells. Move the sliders.

# %%
mask_gallery()

# %% [markdown]
# **Try it.** How many cells does the band $|i - j| \le 1$ keep for $n = 8$: $3n = 24$?
# How many does *one* global token add to it? Predict, then run.

# %%
band = band_mask(8, 1)
with_global = global_token_mask(8, [0], base=band)
print("band |i-j| <= 1, n = 8:", mask_cell_count(band), "cells")
print("plus token 0 as global:", mask_cell_count(with_global), "cells")
print(with_global.int())

# %% [markdown]
# The first and last rows lose a neighbour (22, not 24). A global token fills its row and
# its column, $2n - 1 = 15$ cells; the band already had 3 of them, so it adds 12.
#
# BigBird combines all three at block granularity; each ingredient on its own:

# %%
n, block = 32, 4
window_part = band_mask(n, block)  # roughly a 3-block window
parts = {
    "window (band)": window_part,
    "+ global block": global_token_mask(n, range(block), base=window_part),
    "random blocks alone": random_block_mask(n, block, n_random_blocks=1, seed=0),
    "BigBird": bigbird_mask(n, block, window_blocks=3, global_blocks=1, random_blocks=1),
}
fig, axes = plt.subplots(1, 4, figsize=(12, 3.2), layout="constrained")
for ax, (title, mask) in zip(axes, parts.items()):
    ax.imshow(mask, cmap="Blues", interpolation="nearest")
    ax.set_title(f"{title}\n{mask_cell_count(mask)} cells of {n * n}", fontsize=9)
    ax.set_xticks([])
    ax.set_yticks([])
plt.show()

# %% [markdown]
# ### How far does information travel through a stack of windows?
#
# One window layer lets token $i$ read $w$ positions back (itself included). The next layer
# reads the outputs of the first, each of which already summarises its own window, so after
# $L$ layers information can have travelled about $L \times w$ tokens. Mistral 7B uses a
# window of 4096 in each of its 32 layers: a **receptive field** of $32 \times 4096 =
# 131{,}072$ tokens. Counted exactly, with the query inside its own window, each hop moves
# $w - 1$ positions, so $L(w - 1) + 1$ positions reach the last token.
#
# We can measure it: which inputs reach which outputs after $L$ layers is the boolean
# *matrix power* $M^L$ of the mask (a path of $L$ hops, one per layer).

# %%
n, window = 40, 4
hop = sliding_window_mask(n, window).float()
reach = torch.eye(n)
rows = []
for layers in range(1, 9):
    reach = ((hop @ reach) > 0).float()  # one more layer
    rows.append(reach[-1])  # which positions reach the last token
    measured = int(reach[-1].sum())
    if layers in (1, 4, 8):
        print(f"{layers} layer(s): {measured} positions reach the last token; "
              f"receptive_field(exact=True) = {receptive_field(layers, window, exact=True)}")
fig, ax = plt.subplots(figsize=(8, 2.6))
ax.imshow(torch.stack(rows), cmap="Blues", aspect="auto", interpolation="nearest")
ax.set(xlabel="input position j", ylabel="layers stacked", yticks=range(8),
       yticklabels=range(1, 9), title=f"what reaches the last token (window {window})")
plt.show()
print(f"Mistral 7B: {receptive_field(32, 4096):,} tokens "
      f"({receptive_field(32, 4096, exact=True):,} counted exactly)")

# %% [markdown]
# **Try it.** Add one global token (position 0) to a *band* of radius 1 on 40 tokens. How
# many layers until every token can reach every other? (Without the global token it takes
# 39.) Predict, then run.

# %%
hop = global_token_mask(40, [0], base=band_mask(40, 1)).float()
reach, layers = torch.eye(40), 0
while not bool((reach > 0).all()):
    reach, layers = ((hop @ reach) > 0).float(), layers + 1
print(f"with one global token: {layers} layers")

# %% [markdown]
# Two: any token reaches the global one, which reaches everybody. This is the argument
# behind BigBird's global tokens (and its proof that sparse attention stays as expressive as
# full attention): short paths between any two tokens, at linear cost.
#
# ## 2. Linear attention, in one paragraph
#
# Softmax attention needs all $T^2$ scores because $\exp(q\cdot k)$ does not factorise.
# Replace it by a product of feature maps, $\phi(q)^\top\phi(k)$ with $\phi(x) =
# \mathrm{elu}(x) + 1$ (arXiv 2006.16236), and the sum over keys can be done *first*:
# $\phi(q_i)^\top \sum_j \phi(k_j) v_j^\top$, a $d \times d$ matrix shared by all queries.
# Cost $O(T d^2)$ instead of $O(T^2 d)$, and the causal version is an RNN with a fixed-size
# state, the idea behind many recent "attention-free" models (Lecture 06). You write both
# forms in Assignment 03; here is the promise, checked:

# %%
q, k, v = torch.randn(3, 1, 2, 50, 8).unbind(0)  # (batch, heads, T, d)
print("linear form == quadratic form:",
      torch.allclose(linear_attention(q, k, v), linear_attention_quadratic(q, k, v), atol=1e-5))

# %% [markdown]
# ## 3. The KV cache, and sharing it
#
# When a decoder generates, each new token attends to the keys and values of all previous
# tokens. Recomputing them would cost $O(T)$ projections for every new token, $O(T^2)$ over
# the sequence, so they are stored:
#
# $$\text{KV bytes} = 2 \times n_\text{layers} \times n_\text{kv heads} \times d_\text{head}
# \times \text{tokens} \times \text{batch} \times \text{bytes per number}.$$
#
# **Multi-query attention** (MQA, arXiv 1911.02150) lets all query heads share one key/value
# head; **grouped-query attention** (GQA, arXiv 2305.13245) shares one per group of query
# heads. LLaMA-2 70B has 64 query heads and 8 KV heads: its cache is 8 times smaller than
# with 64.

# %%
kv_cache_calculator()

# %% [markdown]
# **Try it.** How many GiB does LLaMA-2 70B's cache take for one 4096-token sequence in
# 16-bit floats, with its 8 KV heads? And with 64 (plain multi-head)? Predict, then run.

# %%
preset = MODEL_PRESETS["LLaMA-2 70B"]
print("preset:", preset)
for row in kv_cache_comparison("LLaMA-2 70B", n_tokens=4096, bytes_per_element=DTYPE_BYTES["fp16 / bf16"]):
    print(f"{row['name']:>26}: {row['bytes'] / GIB:6.2f} GiB   ({row['formula']} x tokens x 2 bytes)")
print("the same by hand, GQA:", kv_cache_bytes(80, 8, 128, 4096) / GIB, "GiB")
plot_kv_cache("Mistral 7B", n_tokens=32_768, batch=4)

# %% [markdown]
# ### Which KV head does query head $h$ read?
#
# With $H$ query heads and $H_{kv}$ KV heads, consecutive query heads form a group:
# head $h$ reads KV head $h \,/\!/\, (H / H_{kv})$. Writing `h % n_kv_heads` instead also
# gives a valid-looking index, but pairs the heads differently from every checkpoint.
#
# **Try it.** For 8 query heads and 2 KV heads, write down the KV head of each query head,
# then run.

# %%
print("integer division:", [kv_head_for_query_head(h, 8, 2) for h in range(8)])
print("modulo (wrong):  ", [h % 2 for h in range(8)])
q = torch.randn(1, 8, 5, 16)
k, v = torch.randn(2, 1, 2, 5, 16).unbind(0)  # 2 KV heads
copied = scaled_dot_product_attention(q, repeat_kv(k, 4), repeat_kv(v, 4), causal_mask(5))
print("grouped without copying == copied KV:",
      torch.allclose(grouped_attention(q, k, v, causal_mask(5)), copied, atol=1e-6))

# %% [markdown]
# ### Multi-head latent attention: cache a compression
#
# DeepSeek-V2 (arXiv 2405.04434) caches, per token and layer, one latent vector $c$ of
# $d_c = 512$ numbers plus a small RoPE key of $d_R = 64$, and rebuilds all heads' keys and
# values from $c$ with up-projections. At inference the key up-projection can even be
# absorbed into the query projection, so attention runs on the latents directly. The paper
# reports a cache "reduced by 93.3%" without the arithmetic; the toolkit reconstructs it
# from the published configurations.

# %%
reduction = deepseek_v2_cache_reduction()
for key, value in reduction.items():
    print(f"{key:>36}: {value:,.4f}" if isinstance(value, float) else f"{key:>36}: {value:,}")
print("MLA, per token and layer, 16-bit:", mla_cache_bytes(1, 512, 64, 1), "bytes")

# %% [markdown]
# The 93.3% comes out to the digit if DeepSeek-V2's cache is counted at 6 bits (the paper
# quantises its KV cache for serving) and DeepSeek 67B's (a different, dense model) at 16
# bits: a real saving, but not a like-for-like one. Against
# the same model with plain multi-head attention it is 98%. Always ask what a percentage is
# relative to.
#
# ## 4. Differential attention: cancelling attention noise
#
# A softmax never gives a key exactly zero weight. With thousands of keys, the small weights
# of many irrelevant tokens add up and drown the one that matters ("attention noise").
# The Differential Transformer (arXiv 2410.05258) computes **two** attention maps from two
# halves of the query and key projections and subtracts one from the other:
#
# $$\mathrm{DiffAttn}(X) = \big(\mathrm{softmax}(Q_1K_1^\top/\sqrt d) - \lambda\,
# \mathrm{softmax}(Q_2K_2^\top/\sqrt d)\big)V,$$
#
# like a differential amplifier that cancels the noise common to its two inputs. Weight
# that both maps give a key cancels; what only the first map sees survives.
#
# **A toy retrieval.** One *needle* among $n$ keys holds the answer. The first query looks
# for the needle's feature, but also, like every real query, matches the other keys by
# chance (a random direction `w`). The second query is that chance direction alone: the
# noise without the signal. In a trained model both are learned; here we set them by hand
# to see the mechanism.

# %%
d = 32


def toy_retrieval(n, noise=1.5, signal=4.0, seed=0):
    """Queries (1, 1, 1, d) of both maps, keys (1, 1, n, d), values (1, 1, n, d); key 0 is the needle."""
    g = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, d, generator=g)
    keys[:, 0] = 0.0
    keys[0, 0] = 1.0  # only the needle has feature 0
    chance = torch.randn(d, generator=g)
    chance[0] = 0.0
    chance = chance / chance.norm() * noise * math.sqrt(d)  # matches the keys at random
    needle_feature = torch.zeros(d)
    needle_feature[0] = signal * math.sqrt(d)
    q1, q2 = chance + needle_feature, chance  # signal + noise, noise alone
    values = torch.randn(n, d, generator=g)
    as_heads = lambda t: t.reshape(1, 1, -1, d)  # (batch, heads, seq, d)
    return as_heads(q1), as_heads(q2), as_heads(keys), as_heads(values)


q1, q2, keys, values = toy_retrieval(64)
a1 = attention_weights(q1, keys)[0, 0, 0]
a2 = attention_weights(q2, keys)[0, 0, 0]
lam = float(a1[1] / a2[1])  # the lambda at which the common noise cancels exactly
fig, axes = plt.subplots(1, 3, figsize=(12, 2.8), sharey=True, layout="constrained")
for ax, (title, w) in zip(axes, [("map 1: softmax(q1 k)", a1), ("map 2: softmax(q2 k)", a2),
                                 (f"map 1 - {lam:.2f} map 2", a1 - lam * a2)]):
    ax.bar(range(64), w, color=["tab:red"] + ["tab:grey"] * 63)
    ax.set(title=title, xlabel="key (red: the needle)")
plt.show()

# %% [markdown]
# Every distractor has the same score in both maps, so their weights differ only by the
# ratio of the two normalisers: one $\lambda$ cancels all of them at once. Does it help the
# *output*? We measure how close the output is to the needle's value (cosine similarity,
# averaged over 20 random toys) as the number of distractors grows, for ordinary attention
# ($\lambda = 0$), the fixed $\lambda = 0.8$ that deep layers start from, and the
# cancelling $\lambda$.

# %%
for n in (16, 64, 256, 1024):
    scores = {"softmax": 0.0, "lambda 0.8": 0.0, "cancelling": 0.0}
    for seed in range(20):
        q1, q2, keys, values = toy_retrieval(n, seed=seed)
        a1, a2 = attention_weights(q1, keys), attention_weights(q2, keys)
        lams = {"softmax": 0.0, "lambda 0.8": 0.8, "cancelling": float(a1[..., 1] / a2[..., 1])}
        for label, lam in lams.items():
            out = differential_attention(q1, keys, q2, keys, values, lam)[0, 0, 0]
            scores[label] += float(torch.cosine_similarity(out, values[0, 0, 0], dim=0)) / 20
    print(f"n = {n:>4}: cos(output, needle value): "
          + ", ".join(f"{label} {value:.2f}" for label, value in scores.items()))

# %% [markdown]
# Ordinary attention loses the needle as distractors pile up; subtracting the common part
# recovers it. The rows of $A_1 - \lambda A_2$ sum to $1 - \lambda$ and may be negative,
# which is why the real layer normalises each head's output (an RMSNorm per head) and
# multiplies it by $1 - \lambda_\text{init}$.
#
# In the layer, $\lambda$ is learned through a re-parameterisation, $\lambda =
# e^{\lambda_{q1}\cdot\lambda_{k1}} - e^{\lambda_{q2}\cdot\lambda_{k2}} + \lambda_\text{init}$,
# starting from $\lambda_\text{init} = 0.8 - 0.6\,e^{-0.3(l - 1)}$ in layer $l$.
#
# **Try it.** What is $\lambda_\text{init}$ in the first layer, and in layer 12? Does the
# layer keep the shape of its input? Predict, then run.

# %%
print("lambda_init:", {layer: round(lambda_init_fn(layer), 3) for layer in (1, 2, 4, 12, 32)})
diff_layer = DifferentialAttention(d_model=64, n_heads=4, layer=12)
x = torch.randn(2, 10, 64)
with torch.no_grad():
    print("output:", tuple(diff_layer(x).shape), "  lambda now:", round(diff_layer.lambda_full().item(), 3))

# %% [markdown]
# For reference, the gallery's patterns at another size, as a static figure, and the mask
# tensors behind it:

# %%
print({title: mask_cell_count(mask) for title, mask in gallery_masks(n=16, window=3).items()})
plot_mask_gallery(n=16, window=3)

# %% [markdown]
# ## Summary
#
# * Sparse patterns keep $O(Tw)$ cells; count them exactly. $L$ stacked windows of size $w$
#   reach about $L w$ tokens back ($L(w - 1) + 1$ exactly); a global token makes any two
#   tokens two hops apart.
# * Linear attention reorders the sums: $O(T)$ cost, an RNN when causal.
# * The KV cache costs $2\,L\,n_\text{kv}\,d_\text{head}$ numbers per token; GQA and MQA
#   share KV heads (query head $h$ reads head $h \,/\!/\, g$ with $g = H / H_\text{kv}$),
#   MLA caches a latent.
# * Differential attention subtracts a second softmax map to cancel the weight that both
#   maps spread over irrelevant tokens.
#
# Now open **Assignment 03**: the sparse masks with their cell counts, linear attention,
# the KV cache's size, GQA with a cache, and MLA's latent cache.
