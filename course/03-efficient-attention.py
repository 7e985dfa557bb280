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
# 4. differential attention: not cheaper, but less noisy; trained against plain attention on
#    a recall task with distractors, and measured.

# %%
# %matplotlib inline
import math
import time

import matplotlib.pyplot as plt
import torch
from torch import nn

from toolkit.attention import MultiHeadAttention, attention_weights, scaled_dot_product_attention
from toolkit.differential import DifferentialAttention, lambda_init_fn
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
    differential_explorer,
    gallery_masks,
    kv_cache_calculator,
    kv_cache_comparison,
    linear_attention_explorer,
    mask_gallery,
    mla_explorer,
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
# Equal cost is not equal answers: $\phi(q)^\top\phi(k)$ is another similarity, not an
# approximation of $\exp(q \cdot k)$. The explorer shows the state $S_t$ a causal decoder
# carries (its size fixed at $d \times d$ while the softmax's scores grow as $T^2$) and how
# far the outputs land from softmax attention's, for three feature maps, as $T$ grows.

# %%
linear_attention_explorer()

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
# Bytes are half of the story; the other half is what the smaller cache still knows. The
# explorer puts MLA's latent size on one axis (cache bytes per token) and how much of the
# full multi-head keys and values each scheme keeps on the other, beside GQA (a mean over
# each group of heads) and MQA, on one layer with a decaying spectrum.

# %%
mla_explorer()

# %% [markdown]
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
# **Does a learned $\lambda$ help? A measurement.** A hand-picked $\lambda$ that cancels
# the noise exactly would prove nothing: no trained model is handed the weight of its
# distractors. So we train two small models the same way and compare them.
#
# *The task* (associative recall with distractors): a sequence holds $n$ (key, value) pairs,
# then a query token that repeats one of the keys; the model must output that key's value.
# The other $n - 1$ pairs are distractors. Keys are random unit vectors in 8 dimensions,
# values random in 8. *The models*: an input projection to width 32, **one** attention
# layer, a linear read-out at the query's position. Plain: `MultiHeadAttention` (4 heads
# of 8). Differential: `DifferentialAttention` (2 heads, each two maps of width 8, values of
# 16), with $\lambda$ learned from $\lambda_\text{init} = 0.2$. *Training*: Adam, learning
# rate 3e-3, 400 steps of 64 sequences with $n = 16$, two seeds, on one CPU thread. *Test*: 512 new sequences
# with 16, 64 and 256 pairs (up to 16 times more distractors than in training); the score is
# the cosine between the output and the needle's value.

# %%
D_KEY = D_VALUE = 8


def recall_batch(n_pairs, batch, generator):
    """x (batch, n_pairs + 1, 17): pairs [key; value; 0], then the query [key; 0; 1].
    Returns x and the needle's value (batch, 8)."""
    keys = torch.nn.functional.normalize(torch.randn(batch, n_pairs, D_KEY, generator=generator), dim=-1)
    values = torch.randn(batch, n_pairs, D_VALUE, generator=generator)
    needle = torch.randint(0, n_pairs, (batch,), generator=generator)
    rows = torch.arange(batch)
    pairs = torch.cat([keys, values, torch.zeros(batch, n_pairs, 1)], dim=-1)
    query = torch.cat([keys[rows, needle], torch.zeros(batch, D_VALUE), torch.ones(batch, 1)], -1)
    return torch.cat([pairs, query[:, None]], dim=1), values[rows, needle]


class RecallModel(nn.Module):
    """Input projection, one attention layer (plain or differential), read-out at the query."""

    def __init__(self, differential: bool, d_model: int = 32):
        super().__init__()
        self.differential = differential
        self.embed = nn.Linear(D_KEY + D_VALUE + 1, d_model)
        self.attn = (DifferentialAttention(d_model, n_heads=2, layer=1) if differential
                     else MultiHeadAttention(d_model, n_heads=4, bias=False))
        self.read = nn.Linear(d_model, D_VALUE)

    def forward(self, x):
        h = self.embed(x)
        h = self.attn(h, causal=False) if self.differential else self.attn(h)  # no mask
        return self.read(h[:, -1])


def train_recall(differential, seed, steps=400, n_pairs=16):
    torch.manual_seed(seed)
    model = RecallModel(differential)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    g = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x, y = recall_batch(n_pairs, 64, g)
        loss = (model(x) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def recall_score(model, n_pairs):
    x, y = recall_batch(n_pairs, 512, torch.Generator().manual_seed(1000 + n_pairs))
    with torch.no_grad():
        return float(torch.cosine_similarity(model(x), y, dim=-1).mean())


threads = torch.get_num_threads()
torch.set_num_threads(1)  # tiny matrices: one thread is faster, and the runs are reproducible
cpu = time.process_time()
try:
    models = {(kind, seed): train_recall(kind == "differential", seed)
              for kind in ("plain", "differential") for seed in (0, 1)}
finally:
    torch.set_num_threads(threads)
cpu = time.process_time() - cpu
print(f"trained 4 models in {cpu:.1f} CPU seconds")
for kind in ("plain", "differential"):
    cells = []
    for n_pairs in (16, 64, 256):
        scores = [recall_score(models[kind, seed], n_pairs) for seed in (0, 1)]
        cells.append(f"n={n_pairs:>3}: {sum(scores) / 2:.2f} ({scores[0]:.2f}, {scores[1]:.2f})")
    print(f"{kind:>12}  cos(output, needle value)  " + "   ".join(cells))
print("learned lambda:", [round(float(models["differential", s].attn.lambda_full().detach()), 3)
                          for s in (0, 1)])

# %% [markdown]
# What this measured, and no more. On our machine (about 7 CPU seconds for the four
# runs) both seeds gave the differential layer the higher score at every length: 0.96
# against 0.86 at the training length, 0.87 against 0.69 with 64 pairs and 0.71 against
# 0.49 with 256 (means of the two seeds); both layers lose accuracy as the distractors multiply, the
# differential one less. The learned $\lambda$ ended between 0.15 and 0.4, nowhere near a
# value that would cancel the noise exactly. It is one layer and a few hundred
# steps, not the paper's language models (arXiv 2410.05258 reports its gains at 3B
# parameters and long contexts); the two models also differ in more than $\lambda$ (the
# per-head RMSNorm, half as many heads). Change the seeds, the steps or `n_pairs` and
# see how much of the gap survives.
#
# Below: the query's attention in the trained models on one test sequence with 64 pairs
# (the needle in red). Plain attention (mean over its heads) against the differential
# layer's two maps of head 0 and their difference with the learned $\lambda$.

# %%
x, _ = recall_batch(64, 1, torch.Generator().manual_seed(7))
needle = int(((x[0, :-1, :D_KEY] - x[0, -1, :D_KEY]).norm(dim=-1)).argmin())
with torch.no_grad():
    plain, diff = models["plain", 0], models["differential", 0]
    h = plain.embed(x)
    q = plain.attn.q_proj(h).view(1, -1, 4, 8).transpose(1, 2)
    k = plain.attn.k_proj(h).view(1, -1, 4, 8).transpose(1, 2)
    plain_map = attention_weights(q, k)[0, :, -1].mean(0)  # the query's row, mean over heads
    h = diff.embed(x)
    q = diff.attn.q_proj(h).view(1, -1, 2, 2, 8)  # (B, T, head, map, d)
    k = diff.attn.k_proj(h).view(1, -1, 2, 2, 8)
    a1 = attention_weights(q[:, :, 0, 0].unsqueeze(1), k[:, :, 0, 0].unsqueeze(1))[0, 0, -1]
    a2 = attention_weights(q[:, :, 0, 1].unsqueeze(1), k[:, :, 0, 1].unsqueeze(1))[0, 0, -1]
    lam = float(diff.attn.lambda_full())
colors = ["tab:red" if j == needle else "tab:grey" for j in range(65)]
fig, axes = plt.subplots(1, 4, figsize=(15, 2.8), sharey=False, layout="constrained")
for ax, (title, w) in zip(axes, [("plain attention (mean of 4 heads)", plain_map),
                                 ("differential: map 1", a1), ("differential: map 2", a2),
                                 (f"map 1 - {lam:.2f} map 2 (learned lambda)", a1 - lam * a2)]):
    ax.bar(range(65), w, color=colors)
    ax.set(title=title, xlabel="position (red: the needle, last: the query)")
plt.show()

# %% [markdown]
# The widget lets you move $\lambda$ yourself on a synthetic sequence with distractors:
# the two maps, their difference, and how much weight lands on the needle.

# %%
differential_explorer()

# %% [markdown]
# The rows of $A_1 - \lambda A_2$ sum to $1 - \lambda$ and may be negative,
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
# Now open **Assignment 03**: the sparse masks with their cell counts, global tokens,
# linear attention, the KV cache's size, GQA with a cache, MLA's latent cache, and
# differential attention.
