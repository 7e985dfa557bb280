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
# # Lecture 08: The third family, an encoder-decoder that reads then writes
#
# BERT reads, GPT writes, T5 reads then writes. Lectures 05 and 07 built the first two
# families end to end; this one builds the third, T5 (arXiv 1910.10683), before
# Assignment 08 asks you to write it:
#
# 1. the three families side by side on the same data: what each reads, what each can be
#    asked;
# 2. T5's relative position buckets and the bias they index, shared by a stack's layers;
# 3. the model: cross-attention, T5's norm and its tied, rescaled head, teacher forcing;
# 4. a small model trained live on a text-to-text task with T5-style prefixes;
# 5. decoding with two caches, greedy and beam search with a length penalty;
# 6. reading: BART, span corruption, mT5, Flan-T5, UL2, and why the decoder-only family won
#    the chat era.
#
# (If your course installs the student toolkit, the model and its decoders are
# Assignment 08's exercises, left out of it until that assignment is unlocked: the cells
# that need them say so in one line, and the rest still runs.)

# %%
# %matplotlib inline
import matplotlib.pyplot as plt
import torch

from toolkit.notebook import friendly_errors
from toolkit.position import T5RelativePositionBias, t5_relative_position_bucket
from toolkit.seq2seq import (
    EncDecCache,
    EncDecConfig,
    EncoderDecoder,
    NumberTokenizer,
    beam_decode,
    beam_search_one,
    encode_batch,
    exact_match,
    greedy_decode,
    is_held_out,
    number_examples,
    number_to_words,
    shift_right,
    train_numbers,
)
from toolkit.transformer.families import family_attention_patterns
from toolkit.widgets.seq2seq import beam_explorer, cross_attention_explorer

friendly_errors()
torch.manual_seed(0)

# %% [markdown]
# ## 1. Three families, one task
#
# Take one piece of data: numbers written as digits and as words. Each family can be
# asked something different about it, because each *reads* differently:
#
# | family | attention | reads | can be asked | example |
# |---|---|---|---|---|
# | encoder-only | bidirectional | the whole input at once | a label per input or per token: "is this the word form of 4213?", "which word is wrong?" | BERT (05) |
# | decoder-only | causal | a prefix, left to right | the next token, so any continuation: "`4213 =` ..." | GPT (07) |
# | encoder-decoder | bidirectional encoder, causal decoder, cross-attention | the input in full, then its own output so far | an output sequence *about* the input: "`words: 4213`" → "`four thousand two hundred thirteen`" | T5 (08) |
#
# The encoder-only model has no way to produce a sequence longer than its input; the
# decoder-only one can, but it reads the question with the same causal mask as the
# answer, so the first words of the question never see the last. The encoder-decoder
# reads the question bidirectionally, once, and writes the answer causally.
#
# The attention patterns make that concrete (`True` = may attend; the last source
# position is padding):

# %%
patterns = family_attention_patterns(T_src=6, T_tgt=4, src_length=5)
fig, axes = plt.subplots(1, len(patterns), figsize=(3 * len(patterns), 3), layout="constrained")
for ax, (name, mask) in zip(axes, patterns.items()):
    ax.imshow(mask.float().numpy(), cmap="Blues", vmin=0, vmax=1)
    ax.set_title(name, fontsize=9)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
plt.show()

# %% [markdown]
# The task of the assignment casts both directions as text to text, told apart by a
# **prefix**, as T5 does with "translate English to German:" or "summarize:". About one
# number in ten is held out from training, so that exact-match accuracy measures whether
# the model learned the rules.

# %%
tokenizer = NumberTokenizer()
for source, target in number_examples(6, seed=0):
    print(f"{source!r:55} -> {target!r}")
print("held out:", [n for n in range(60) if is_held_out(n)], "...")
print(number_to_words(9019), "|", number_to_words(110))

# %% [markdown]
# **Try it.** Which of the two directions do you expect a small model to learn first,
# and why? (Hint: look at how many output tokens each needs, and where each output token's
# information sits in the input.)
#
# ## 2. Where is each token? T5's relative buckets
#
# T5 adds no position vectors. Each self-attention score $q_i \cdot k_j$ gets a learned
# scalar $b_h(\text{bucket}(j - i))$ per head. Close offsets get a bucket each; far ones
# share logarithmically wider buckets up to `max_distance`. The encoder's buckets are
# **bidirectional** (half for keys to the left, half for keys to the right); the
# decoder's are **one-sided** (the future is masked anyway).

# %%
offsets = torch.arange(-20, 21)
print("offset        :", offsets[::4].tolist())
print("bidirectional :", t5_relative_position_bucket(offsets, True, 16, 32)[::4].tolist())
print("one-sided     :", t5_relative_position_bucket(offsets, False, 16, 32)[::4].tolist())
bias = T5RelativePositionBias(n_heads=4, num_buckets=16, max_distance=32, bidirectional=True)
print("bias for 5 queries and 7 keys:", tuple(bias(5, 7).shape), "(1, H, T_q, T_k)")

# %% [markdown]
# The bias is computed **once per stack** and added in every layer: the same learned
# table for all layers of the encoder, another for the decoder. Cross-attention gets
# none: a target position and a source position live on different axes, so their
# difference means nothing. With a cache of `P` tokens, the decoder's queries sit at
# positions `P, P+1, ...` (`query_offset=P`).
#
# ## 3. The model
#
# $$\text{memory} = \text{Enc}(E[\text{src}]),\qquad
# h = \text{Dec}(E[\text{shift\_right}(y)],\ \text{memory}),\qquad
# \text{logits} = (h\, d^{-1/2})\, E^\top .$$
#
# * T5's norm is RMS norm with no mean and no bias, before each sub-layer; each stack ends
#   with one more.
# * T5's attention has no $1/\sqrt{d_\text{head}}$ (the scale is folded into the query
#   projection's initialisation).
# * One embedding $E$ serves the encoder input, the decoder input and the output head, and
#   the decoder's output is scaled by $d^{-1/2}$ before the tied head.
# * **Teacher forcing**: to predict $y_0 \dots y_{T-1}$ the decoder reads
#   $[\text{start}, y_0, \dots, y_{T-2}]$; T5's start token is the pad id 0.
#
# The toolkit's `EncoderDecoder` equals Hugging Face's `T5ForConditionalGeneration` on the
# same weights, logits and loss (its tests build the HF model from a tiny config).

# %%
torch.manual_seed(0)
config = EncDecConfig(vocab_size=tokenizer.vocab_size, d_model=64, n_heads=4, d_ff=128,
                      num_buckets=32, max_distance=64)
model = EncoderDecoder(config)
src, labels = encode_batch(number_examples(2, seed=4), tokenizer)
print("labels        :", labels.tolist())
print("decoder input :", shift_right(labels).tolist())
logits, loss = model(src, labels)
print(f"untrained loss {loss.item():.2f} (ln V = {torch.log(torch.tensor(45.0)):.2f}); "
      f"{sum(p.numel() for p in model.parameters()):,} parameters")

# %% [markdown]
# ## 4. Training, live
#
# A few hundred steps of AdamW on fresh batches of training numbers. (The assignment's
# default trains twice as long and converts most held-out numbers exactly.)

# %%
losses = train_numbers(model, steps=300, batch_size=64, max_lr=3e-3)
held_out = number_examples(200, held_out=True, seed=7)
accuracy = exact_match(lambda s, n: greedy_decode(model, s, n), held_out, tokenizer)
plt.figure(figsize=(5, 2.5))
plt.plot(losses)
plt.yscale("log")
plt.xlabel("step")
plt.ylabel("training loss")
plt.show()
print(f"exact match on 200 held-out numbers after 300 steps: {accuracy:.0%}")
for source, target in held_out[:6]:
    out = greedy_decode(model, encode_batch([(source, target)], tokenizer)[0], 16)
    print(f"{source!r:50} -> {tokenizer.decode(out[0])!r}  (target {target!r})")

# %% [markdown]
# ## 5. Decoding with two caches
#
# The input is encoded **once**. Each decoding step runs the decoder on the newest token
# only: the self-attention cache holds the keys and values of the earlier target tokens,
# and the cross-attention cache holds the encoder output's keys and values, projected on
# the first step and read on every later one (they depend on the input alone). Decoding
# without any cache gives the same tokens.

# %%
src, _ = encode_batch(held_out[:8], tokenizer)
fast = greedy_decode(model, src, 16)
slow = greedy_decode(model, src, 16, use_cache=False)
print("cached == recomputed:", torch.equal(fast, slow))
cache = EncDecCache(config.n_decoder_layers)
memory, src_mask = model.encode(src)
tgt = src.new_zeros((8, 1))
for step in range(3):
    logits = model.decode(tgt[:, -1:], memory, src_mask, cache, start_pos=step)
    tgt = torch.cat([tgt, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
print("self-attention cache:", tuple(cache.self_keys[0].shape), "(B, H, t, d_head), grows")
print("cross-attention cache:", tuple(cache.cross_keys[0].shape), "(B, H, S, d_head), fixed")

# %% [markdown]
# **Cross-attention, per output token.** Which input tokens did each decoder head read
# while writing each output token? Change the input; move the layer and head.

# %%
cross_attention_explorer(model, tokenizer, "words: 4213")

# %% [markdown]
# **Beam search** keeps the `W` best partial outputs by summed log-probability. A finished
# hypothesis is ranked by $\sum \log p / \text{len}^{\alpha}$ (Hugging Face's
# `length_penalty`): without it ($\alpha = 0$) the sum of negative numbers always favours
# stopping early. Width 1 is greedy decoding.

# %%
for width, alpha in ((1, 1.0), (4, 0.0), (4, 1.0), (4, 2.0)):
    tokens, scores = beam_decode(model, src[:1], width, 16, alpha,
                                 num_return_sequences=min(width, 3))
    shown = "; ".join(f"{tokenizer.decode(t)!r} {s:.3f}" for t, s in zip(tokens[0], scores[0]))
    print(f"W={width}, alpha={alpha}: {shown}")
hyps = beam_search_one(model, src[:1], 4, 16, 1.0)
print(len(hyps), "finished hypotheses, best first")

# %%
beam_explorer(model, tokenizer, "digits: seven thousand twelve")

# %% [markdown]
# ## 6. Reading
#
# * **T5** (arXiv 1910.10683) compared architectures and objectives at scale: an
#   encoder-decoder trained on **span corruption** (drop random spans of the input, replace
#   each by a sentinel token, and ask the decoder to write the dropped spans) was the
#   strongest. The assignment's task uses T5's prefixes, not its pre-training.
# * **BART** (arXiv 1910.13461): the same architecture with GPT-2's learned positions and
#   LayerNorm, pre-trained as a denoising autoencoder (shuffled sentences, masked spans).
# * **mT5** (arXiv 2010.11934) and **ByT5** (arXiv 2105.13626): T5 for 101 languages, and
#   on raw bytes. **Flan-T5** (arXiv 2210.11416): instruction tuning on many tasks.
# * **UL2** (arXiv 2205.05131) mixes denoising objectives and showed one model can be run as
#   encoder-decoder or as decoder-only.
# * Why the decoder-only family won the chat era: one stack, one objective over all text,
#   a cache for the whole conversation; encoder-decoders stay strong where an input is
#   transformed into an output, such as translation and speech recognition (Whisper,
#   arXiv 2212.04356).
