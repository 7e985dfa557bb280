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
# # Lecture 07: A mini-GPT, from bytes to text
#
# The capstone puts everything together: a decoder-only language model in the modern recipe,
# trained on text that ships with Python, and the code that turns its predictions into
# text. This lecture, before Assignment 07, runs the whole pipeline with the toolkit's
# reference model so you know what each piece should do before you write it:
#
# 1. the data: a corpus, two tokenizers, next-token windows;
# 2. two recipes of the same model, classic (GPT-2) and modern (LLaMA-like, with tied
#    embeddings);
# 3. the training loop: the learning-rate schedule, which weights decay, clipping;
# 4. decoding: greedy, sampling, and beam search with a length penalty;
# 5. reading: scaling laws, and where the modern recipe comes from.
#
# Training happens for real, on a toy corpus small enough to learn in seconds on a CPU.
# (If your course installs the student toolkit, the model, its training step and sampling
# are Assignment 07's exercises, left out of it until that assignment is unlocked: the
# cells that need them say so in one line, and the rest still runs.)

# %%
# %matplotlib inline
import copy
import math
import random
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import torch
from IPython.display import display

from toolkit.data import (
    ByteTokenizer,
    CharTokenizer,
    Corpus,
    get_batch,
    load_corpus,
    load_text,
    split_train_val,
    stdlib_corpus_text,
    stdlib_dir,
)
from toolkit.ffn import swiglu_hidden_dim
from toolkit.generate import beam_search, generate, greedy
from toolkit.models import (
    GPT,
    RECIPES,
    FastGPT,
    GPTConfig,
    count_parameters,
    parameter_matched_configs,
)
from toolkit.notebook import friendly_errors
from toolkit.train import (
    TrainConfig,
    configure_optimizer,
    estimate_loss,
    load_checkpoint,
    lr_schedule,
    save_checkpoint,
    train,
)
from toolkit.widgets.generation import (
    LiveLossPlot,
    compare_generations,
    next_token_distribution,
    plot_loss_curves,
    plot_next_token_distribution,
    plot_side_by_side,
    sampling_playground,
    side_by_side_generation,
)

friendly_errors()
torch.manual_seed(0)

# %% [markdown]
# ## 1. The data
#
# The assignment trains on source files of Python's own standard library: every machine
# that runs the course has them, nothing is downloaded, and code is a text with plenty of
# structure to learn. Its tokenizer is the simplest there is: one token per **byte** of
# UTF-8 (256 tokens). A **character** tokenizer (one token per distinct character of the
# text) is just as simple and has a smaller vocabulary; real models use subword tokenizers
# (BPE) with tens of thousands of tokens.

# %%
print("standard library:", stdlib_dir())
text = stdlib_corpus_text()
assert text == load_text()  # the default corpus
corpus = load_corpus()  # bytes, split 90% / 10%
assert isinstance(corpus, Corpus)
print(f"{len(text):,} characters; {len(corpus.train):,} training and {len(corpus.val):,} "
      f"validation tokens; vocabulary {corpus.vocab_size}")
chars = CharTokenizer(text)
print(f"bytes: {ByteTokenizer().encode('é')} for 'é';  characters: vocabulary {chars.vocab_size}, "
      f"'é' is {chars.encode('é') if 'é' in text else 'not in this text'}")

# %% [markdown]
# A language model learns to predict each next token. One training example is a window
# `x` of `block_size` tokens and the same window shifted by one, `y`: at every position
# the model sees `x[:t+1]` and is scored on `y[t] = x[t+1]`, so one window trains
# `block_size` predictions at once (the causal mask makes that honest).
#
# **Try it.** What does `y[0]` hold, compared with `x[0]`? Predict, then run.

# %%
x, y = get_batch(corpus.train, batch_size=2, block_size=24, generator=torch.Generator().manual_seed(0))
print("x[0]:", repr(corpus.tokenizer.decode(x[0])))
print("y[0]:", repr(corpus.tokenizer.decode(y[0])))

# %% [markdown]
# For the demonstrations below we want a model that learns in seconds, so we make a toy
# corpus of our own: short sentences from a tiny grammar, one per line. Every line ends with
# `.` and a newline, which will serve as the *end of sequence* token.

# %%
rng = random.Random(0)
subjects = ["the cat", "the dog", "a bird", "my friend", "the old man", "a child"]
verbs = ["sat", "ran", "slept", "sang", "waited", "smiled"]
endings = ["", "", " quietly", " on the mat", " in the garden", " by the river", " all day"]
toy_text = "".join(f"{rng.choice(subjects)} {rng.choice(verbs)}{rng.choice(endings)}.\n"
                   for _ in range(3000))
tokenizer = CharTokenizer(toy_text)
toy_train, toy_val = split_train_val(torch.tensor(tokenizer.encode(toy_text)), val_fraction=0.1)
EOS = tokenizer.encode("\n")[0]
print(toy_text[:120])
print(f"vocabulary: {tokenizer.vocab_size} characters; {len(toy_train):,} training tokens")

# %% [markdown]
# ## 2. Two recipes for one model
#
# Both recipes are the same skeleton: token embedding, a stack of pre-norm residual blocks
# (attention, then a feed-forward network), a final norm, an output head tied to the
# embedding. They differ in the components:
#
# | component | classic (GPT-2, 2019) | modern (LLaMA-like with tied embeddings, 2023) |
# |---|---|---|
# | positions | learned table added to the embeddings | RoPE in every attention (arXiv 2104.09864) |
# | norm | LayerNorm | RMSNorm (arXiv 1910.07467): no mean, no bias |
# | feed-forward | GELU MLP, hidden $4d$ | SwiGLU (arXiv 2002.05202), hidden $\approx 8d/3$ |
# | attention | multi-head | grouped-query (arXiv 2305.13245) |
# | biases | everywhere | none |
# | output head | tied to the embedding | tied to the embedding (LLaMA itself unties it) |
#
# The modern column is *LLaMA-like*, not LLaMA: LLaMA and LLaMA 2 keep a separate output
# matrix (`lm_head`, `tie_word_embeddings=False` in their Hugging Face configs). This
# course ties the head to the embedding in both recipes, as GPT-2 does, so the two differ
# only in the rows above and a small model does not spend a second `vocab x d` matrix.

# %%
for recipe, choices in RECIPES.items():
    print(f"{recipe:>8}: {choices}")
classic_cfg, modern_cfg = parameter_matched_configs(d_model=128, n_layers=4, n_heads=4)
for cfg in (classic_cfg, modern_cfg):
    print(f"{cfg.recipe:>8}: {count_parameters(GPT(cfg)):,} parameters, feed-forward hidden "
          f"{cfg.ffn_hidden}, KV heads {cfg.kv_heads}")

# %% [markdown]
# **Try it.** SwiGLU has three weight matrices instead of two, so for the same parameter
# count its hidden size is $\frac{2}{3}\cdot 4d = 8d/3$, rounded up to a multiple of some
# hardware-friendly number. What does LLaMA (d = 4096, multiple of 256) use? And how many
# parameters does tying save GPT-2 small ($V = 50257$, $d = 768$)? Predict, then run.

# %%
print("LLaMA-7B feed-forward hidden:", swiglu_hidden_dim(4096, multiple_of=256))
print(f"GPT-2 small, tying saves {50257 * 768 / 1e6:.1f}M parameters")

# %% [markdown]
# ## 3. The training loop
#
# The loop of GPT-style pre-training, at toy scale: sample windows, compute the mean
# cross-entropy, back-propagate, clip the gradient norm to 1, take an **AdamW** step
# (arXiv 1711.05101). Two details carry a lot of weight.
#
# **The learning-rate schedule.** A *warm-up* raises the learning rate linearly over the
# first steps, while Adam's statistics are still noise (large-batch training made it
# standard, arXiv 1706.02677); then a *cosine* decay brings it down to a tenth (arXiv
# 1608.03983), so the last steps refine rather than jump.

# %%
steps = 300
lrs = [lr_schedule(s, warmup=30, max_steps=steps, max_lr=3e-3, min_lr=3e-4) for s in range(steps)]
fig, ax = plt.subplots(figsize=(6, 2.5))
ax.plot(lrs)
ax.set(xlabel="step", ylabel="learning rate", title="warm-up, then cosine decay")
plt.show()

# %% [markdown]
# **Which weights decay.** AdamW's weight decay pulls every weight towards zero a little at
# each step. That regularises the matrices; but a norm's gain must stay near 1 and a bias
# wherever the data puts it, so they are left out. The toolkit builds two parameter
# groups: tensors with two or more dimensions (matrices, embeddings) decay, vectors do not.
#
# **Try it.** In the classic config above (biases and LayerNorm gains everywhere), what
# share of the parameters sits in vectors? Predict, then run.

# %%
classic_model = GPT(classic_cfg)
optimizer = configure_optimizer(classic_model, lr=3e-3, weight_decay=0.1)
for group in optimizer.param_groups:
    count = sum(p.numel() for p in group["params"])
    print(f"weight_decay {group['weight_decay']}: {len(group['params'])} tensors, {count:,} numbers "
          f"({count / count_parameters(classic_model):.1%})")

# %% [markdown]
# Now train. `train` runs the loop (with `lr_schedule`, `configure_optimizer` and
# clipping inside); `LiveLossPlot` redraws the training loss (line) and validation loss
# (dots) as it goes, against the dashed level $\ln V$ of a uniform guess. We keep a copy of
# the model after 20 steps to compare with later.
#
# We train `FastGPT`, not `GPT`: the same model (the same state dict, key for key, and
# the same outputs to float rounding) with every layer on a fused kernel: one matrix for
# q, k and v, RoPE from a precomputed table, the attention backend measured fastest for
# the shapes (PyTorch's fused attention at this length; lecture 04 shows the CPU's other
# one), one-kernel norms.
# `GPT` is the one to read; `FastGPT` the one to train, and a checkpoint of one loads into
# the other.

# %%
torch.manual_seed(0)
config = GPTConfig.modern(vocab_size=tokenizer.vocab_size, d_model=48, n_layers=2, n_heads=4,
                          max_seq_len=64)
model = FastGPT(config)  # GPT's weights and function, on fused kernels
snapshots = {}


def keep_early_copy(step, history):
    if step == 19:
        snapshots["after 20 steps"] = copy.deepcopy(model).eval()


live = LiveLossPlot(every=20, vocab_size=tokenizer.vocab_size, title="toy corpus, modern recipe")
display(live.widget)
settings = TrainConfig(max_steps=100, batch_size=32, block_size=32, max_lr=1e-2, eval_every=25,
                       eval_batches=4, progress=False)


def callback(step, history):
    keep_early_copy(step, history)
    live(step, history)


history = train(model, toy_train, toy_val, settings, callback=callback)
model.eval()
print(f"{count_parameters(model):,} parameters; validation loss "
      f"{estimate_loss(model, toy_val, 16, 32, 4):.3f} nats/char (uniform: "
      f"{math.log(tokenizer.vocab_size):.3f})")
plot_loss_curves({"modern": history}, uniform_loss=math.log(tokenizer.vocab_size))

# %% [markdown]
# The same loop runs from a terminal, on the byte corpus: `python -m toolkit.train --recipe
# modern --steps 200 --out model.safetensors` (`--help` lists the settings).
#
# A trained model is saved as a safetensors file that holds its weights and its config
# (`save_checkpoint`); that is also what you hand in for the assignment. `load_checkpoint`
# rebuilds the model from the file alone.

# %%
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "toy.safetensors"
    save_checkpoint(model, config, path)
    reloaded = load_checkpoint(path)
probe = toy_val[:32][None]
with torch.no_grad():
    print("reloaded model gives the same logits:", torch.allclose(model(probe)[0], reloaded(probe)[0]))

# %% [markdown]
# ## 4. From logits to text
#
# The model gives, at each step, logits over the next token. A *decoding strategy* picks
# one, appends it, and repeats:
#
# * **greedy** takes the most probable token every time: deterministic, and prone to loops;
# * **sampling** draws from $\mathrm{softmax}(z / t)$, reshaped by a temperature $t$ and
#   cut by top-k (arXiv 1805.04833) or top-p (nucleus, arXiv 1904.09751). You write these
#   in the assignment;
# * **beam search** keeps the $W$ most probable *partial sequences* at each step, not just
#   one token, and returns the best finished one.
#
# The playground shows one next-token distribution and what the filters keep (the bars
# they cut turn grey):

# %%
sampling_playground(model, tokenizer, prompt="the old man ")

# %% [markdown]
# **Try it.** After the prompt "the old man ", how many characters does top-p with
# $p = 0.5$ keep? And with $p = 0.95$? Predict, then run.

# %%
prompt = torch.tensor([tokenizer.encode("the old man ")])
with torch.no_grad():
    logits = model(prompt)[0][0, -1]
for p in (0.5, 0.95):
    kept = next_token_distribution(logits, top_p=p)["kept"]
    print(f"top-p {p}: keeps {int(kept.sum())}: "
          f"{[tokenizer.token_str(i) for i in kept.nonzero().flatten().tolist()]}")
plot_next_token_distribution(logits, temperature=0.8, top_p=0.95, labels=tokenizer.token_str,
                             n_show=12)

# %% [markdown]
# ### Beam search and its length penalty
#
# Beam search scores a hypothesis by its total log-probability, $\sum_t \log p(y_t \mid
# y_{<t})$. Every token adds a negative number, so the plain sum prefers **short**
# hypotheses: "the dog sat." beats "the dog sat by the river." even when both are good.
# The usual fix (Hugging Face's, from GNMT, arXiv 1609.08144, in a simpler form) divides by
# the length to a power $\alpha$:
#
# $$\text{score} = \frac{\sum_t \log p(y_t \mid y_{<t})}{|y|^{\alpha}}$$
#
# $\alpha = 0$ is the plain sum. Any $\alpha > 0$ weakens its pull towards short
# hypotheses: $\alpha = 1$ scores the average log-probability per token, and $\alpha > 1$
# goes further and rewards length itself. A hypothesis ends at the end-of-sequence token
# (here the newline).
#
# **Try it.** From "the dog", what will beam search with 5 beams return for $\alpha = 0$,
# 1 and 3? Which one will be longest? Predict, then run; then compare with greedy decoding
# and with three samples.

# %%
prompt = torch.tensor([tokenizer.encode("the dog")])
for alpha in (0.0, 1.0, 3.0):
    best = beam_search(model, prompt, beam_width=5, max_new_tokens=30, length_penalty=alpha,
                       eos_token=EOS)
    print(f"beam, alpha = {alpha}: {tokenizer.decode(best[0])!r}")
print(f"greedy:             {tokenizer.decode(greedy(model, prompt, 30, eos_token=EOS)[0])!r}")
for seed in range(3):
    sample = generate(model, prompt, 30, temperature=1.0, eos_token=EOS,
                      generator=torch.Generator().manual_seed(seed))
    print(f"sample (seed {seed}):    {tokenizer.decode(sample[0])!r}")

# %% [markdown]
# With $\alpha = 0$ beam search returns the shortest sentence it can find; a larger
# $\alpha$ buys length. Greedy decoding commits to one token at a time and cannot go back;
# samples differ from seed to seed (and, with a less trained model, wander off). For
# translation and summarisation, where one best answer exists,
# beam search with $\alpha$ around 0.6 to 1 is the classic choice. For open-ended text it
# finds sequences that are *too* probable: bland and repetitive, which is why chat models
# sample (with top-p) instead (arXiv 1904.09751).
#
# Finally, the same prompt and sampling settings for two models side by side: the copy
# kept after 20 steps, and the trained model.

# %%
models = {**snapshots, "after 100 steps": model}
texts = compare_generations(models, tokenizer, "the cat", max_new_tokens=60, temperature=0.8)
plot_side_by_side(texts, prompt="the cat", width=30)

# %%
side_by_side_generation(models, tokenizer, prompt="the cat", max_new_tokens=60)

# %% [markdown]
# ## 5. Reading: scaling laws, and where the modern recipe comes from
#
# **Scaling laws.** Kaplan et al. (arXiv 2001.08361) found that a language model's loss falls
# as a smooth power law of its parameter count $N$, its training tokens $D$ and its compute
# $C \approx 6ND$, over many orders of magnitude, so the result of a large run can be
# predicted from small ones. Hoffmann et al. (*Chinchilla*, arXiv 2203.15556) redid the
# fit and concluded that for a fixed compute budget $N$ and $D$ should grow together, about
# 20 training tokens per parameter: their 70B model trained on 1.4T tokens beat the 280B
# Gopher trained on 300B. Models since are often trained far *past* that point, because a
# smaller model is cheaper to run for every user afterwards.
#
# **Try it.** How many tokens would the Chinchilla rule suggest for the assignment's default
# model (about 0.8M parameters), and how many does its training loop see (600 steps of 16
# windows of 128 bytes)? Predict, then run.

# %%
n_params = count_parameters(GPT(GPTConfig.modern(d_model=128, n_layers=4, n_heads=4, max_seq_len=128)))
print(f"{n_params:,} parameters -> Chinchilla: {20 * n_params / 1e6:.1f}M tokens; "
      f"the assignment's run sees {600 * 16 * 128 / 1e6:.1f}M")

# %% [markdown]
# **The modern recipe**, one change at a time: pre-norm blocks train stably without a
# careful warm-up (Xiong et al., arXiv 2002.04745; GPT-2 already used them); RMSNorm drops
# LayerNorm's mean and bias for the same quality at less cost; SwiGLU's gate improved
# quality at equal parameters in Shazeer's comparison; RoPE gives relative positions
# without extra parameters; GQA cuts the KV cache with little loss. LLaMA (arXiv
# 2302.13971) combined pre-norm RMSNorm, SwiGLU and RoPE; LLaMA-2 (arXiv 2307.09288) added
# GQA to its largest models, and most open models since follow this recipe with small
# variations. (LLaMA does not tie its output head to the embedding; the course's modern
# recipe does, so call it LLaMA-like with tied embeddings.)
# None of these was decisive alone; together, at equal parameters and steps, they are
# reliably better (Assignment 07's optional section trains both recipes side by side).
#
# In-context learning, the reason decoder-only models took over, is in Lecture 01's
# reading.
#
# ## Summary
#
# * A window and the same window shifted by one give `block_size` next-token predictions.
# * Classic and modern recipes share a skeleton; the modern one swaps every component for a
#   cheaper or better one, and ties the head to the embedding in both.
# * Warm-up then cosine decay; AdamW decays matrices, not norms and biases; clip the
#   gradient norm.
# * Greedy, sampling (temperature, top-k, top-p) and beam search, whose length penalty
#   $|y|^\alpha$ decides how much length is worth.
#
# Now open **Assignment 07**: the KV cache, attention with RoPE and GQA, the GPT, the
# samplers, generation, a training step, and a checkpoint you train yourself.
