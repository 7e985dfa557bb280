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
# # Lecture 05: the block around attention, and BERT's family
#
# Companion reading for assignment 05 (not graded). The assignment has you write the
# norms, the gated feed-forward network, the Pre-LN block, BERT's masking and the
# distillation loss; this notebook covers what surrounds them: why Transformers do not use
# BatchNorm, what the residual stream is, the GELU and its approximation, BERT's input and
# its two pre-training tasks, what RoBERTa changed, and two successors, ELECTRA and
# DeBERTa. Every cell runs in a few seconds on a CPU.

# %%
import torch
import torch.nn.functional as F
from IPython.display import Image, display
from matplotlib.figure import Figure
from torch import nn

from toolkit.bert import BertClassifier, BertConfig, ClassificationHead, NSPHead, TinyBert
from toolkit.ffn import FeedForward, SwiGLU, gelu_exact, gelu_tanh, swiglu_hidden_dim
from toolkit.mlm import WordVocab, pair_inputs, sample_nsp_pairs
from toolkit.norm import LayerNorm
from toolkit.notebook import friendly_errors
from toolkit.residual import EncoderStack
from toolkit.widgets.blocks import (
    glu_gate_explorer,
    layer_scale_explorer,
    mlm_masking_playground,
    temperature_explorer,
)
from toolkit.widgets.display import figure_to_png

friendly_errors()  # one short line instead of a long traceback for the usual slips

_ = torch.manual_seed(0)

# %% [markdown]
# ## 1. Why not BatchNorm?
#
# Convolutional networks normalise each feature over the **batch** (BatchNorm, arXiv
# 1502.03167). For sequences that is a poor fit:
#
# * a token's output depends on the *other* sequences in its batch, and on how much padding
#   they carry: the same sentence gets different vectors in different batches;
# * at inference, with one sequence, there is no batch to average over, so the network
#   keeps running averages from training and behaves differently at test time;
# * small batches (long sequences on one GPU) make the statistics noisy.
#
# LayerNorm and RMSNorm use one token's own features only. The cell below runs the same
# sentence through BatchNorm and LayerNorm, once alone and once in a batch with a very
# different sequence.

# %%
d = 8
sentence = torch.randn(1, 5, d)  # (B, T, d)
other = 10 + 5 * torch.randn(1, 5, d)  # another sequence, on another scale
batch = torch.cat([sentence, other])

batch_norm = nn.BatchNorm1d(d)  # expects (N, d): every token of every sequence is a sample
layer_norm = LayerNorm(d)
with torch.no_grad():
    bn_alone = batch_norm(sentence.reshape(-1, d)).reshape(1, 5, d)
    bn_batch = batch_norm(batch.reshape(-1, d)).reshape(2, 5, d)[:1]
    ln_alone, ln_batch = layer_norm(sentence), layer_norm(batch)[:1]
print(f"BatchNorm: largest change caused by the batch companion {(bn_alone - bn_batch).abs().max():.3f}")
print(f"LayerNorm: largest change caused by the batch companion {(ln_alone - ln_batch).abs().max():.1e}")

# %% [markdown]
# ## 2. The residual stream
#
# A block writes into the stream instead of replacing it: $x \leftarrow x + F(\cdot)$. After
# $L$ Pre-LN blocks the final vector is literally a sum,
#
# $$
# x_L = x_0 + \sum_{\ell=1}^{L} \big(\text{attention write}_\ell + \text{FFN write}_\ell\big),
# $$
#
# so every layer can read what any earlier layer wrote and add its own contribution: a
# shared workspace of width $d$. Interpretability work (for example arXiv 2211.00593)
# reads circuits off exactly these writes. The cell checks the identity on a small random
# Pre-LN stack by recording each sub-layer's write.

# %%
stack = EncoderStack(n_layers=3, d_model=16, n_heads=4).eval()
x0 = torch.randn(1, 6, 16)
writes, x = [], x0
with torch.no_grad():
    for block in stack.layers:
        attn_write = block.self_attn(block.norm1(x))
        x = x + attn_write
        ffn_write = block.ffn(block.norm2(x))
        x = x + ffn_write
        writes += [attn_write, ffn_write]
    summed = x0 + sum(writes)
    print("stream == embeddings + sum of the writes:", torch.allclose(summed, x, atol=1e-6))
    print("size of each write:", [f"{w.norm():.2f}" for w in writes], f"stream {x.norm():.2f}")
    print("the stack's output is the final norm of that sum:",
          torch.allclose(stack(x0), stack.final_norm(summed), atol=1e-5))

# %% [markdown]
# Because the Pre-LN stream is never renormalised inside the stack it grows with depth,
# hence the one **final norm** before the output head. Post-LN renormalises after every
# block instead, and pays for it at initialisation: its gradients are larger than
# Pre-LN's, the more so the deeper the stack, and Xiong et al.'s analysis puts the
# largest near the output (arXiv 2002.04745), which is why deep Post-LN models need a
# learning-rate warm-up. The explorer shows both at initialisation; the assignment trains
# them.

# %%
layer_scale_explorer()

# %% [markdown]
# ## 3. The feed-forward network: GELU and the GLU family
#
# BERT and GPT-2 use GELU, $x\,\Phi(x)$, the input weighted by the probability that a
# standard normal variable is below it (arXiv 1606.08415). GPT-2 was trained with a tanh
# approximation (`gelu_new` in Hugging Face), `torch.nn.GELU()` is exact; the two differ by
# less than $10^{-3}$ everywhere, but a checkpoint should be run with the one it was
# trained with.

# %%
z = torch.linspace(-4, 4, 401)
fig = Figure(figsize=(8, 3), layout="constrained")
ax_f, ax_d = fig.subplots(1, 2)
ax_f.plot(z, gelu_exact(z), label="GELU (exact)")
ax_f.plot(z, F.relu(z), ":", label="ReLU")
ax_f.plot(z, F.silu(z), "--", label="SiLU (Swish)")
ax_f.legend(fontsize=8)
ax_f.set_title("activations")
ax_d.plot(z, gelu_exact(z) - gelu_tanh(z))
ax_d.set_title("exact GELU minus its tanh approximation")
display(Image(figure_to_png(fig)))

# %% [markdown]
# Gated variants (arXiv 2002.05202) multiply an activated *gate* by a linear *value*.
# Three matrices instead of two: the hidden size drops to $8d/3$ to keep the parameter
# count, and LLaMA rounds it up to a multiple of 256. (At a small width that rounding
# overshoots: the last line shows a SwiGLU of width 64 with 1.5 times the parameters of
# the 4d MLP. At LLaMA's widths the overshoot is about 1%.)

# %%
for d_model in (768, 4096, 5120):
    classic = 2 * (4 * d_model) * d_model  # W1: d -> 4d, W2: 4d -> d (no biases)
    gated = 3 * d_model * swiglu_hidden_dim(d_model)  # gate, up: d -> h; down: h -> d
    print(f"d = {d_model}: 4d MLP {classic / 1e6:.1f}M parameters, SwiGLU hidden "
          f"{swiglu_hidden_dim(d_model)} -> {gated / 1e6:.1f}M")
small = SwiGLU(64)
print("SwiGLU(64): hidden size", small.d_ff, "(8d/3 = 170, rounded up to 256);",
      sum(p.numel() for p in small.parameters()), "parameters; the 4d MLP of d = 64 has",
      sum(p.numel() for p in FeedForward(64, bias=False).parameters()))

# %%
glu_gate_explorer()

# %% [markdown]
# ## 4. BERT's input and its two pre-training tasks
#
# BERT (arXiv 1810.04805) is an encoder: bidirectional self-attention, Post-LN blocks,
# GELU feed-forward networks. Its input is `[CLS] A [SEP] B [SEP]`; every position adds a
# learned word, position and segment embedding. The course's vocabulary is word-level (BERT
# uses about 30,000 WordPiece sub-words: 30,522 in its uncased checkpoints), and its `TinyBert` uses Pre-LN blocks by default
# (`BertConfig(norm_first=False)` gives BERT's Post-LN), because a short CPU run trains
# them without a careful warm-up.

# %%
vocab = WordVocab.from_text("the cat sat on the mat . the dog sat on the log . " * 3, 1)
encoded = pair_inputs(vocab.encode("the cat sat on the mat ."), vocab.encode("the dog sat"), 16)
print(vocab.decode(encoded["input_ids"]))
for key, row in encoded.items():
    print(f"{key:15s}", row.tolist())

# %% [markdown]
# **Masked language modelling.** 15% of the ordinary tokens are selected; of those 80%
# become `[MASK]`, 10% a random word and 10% stay; the loss is computed on the selected
# tokens only (label $-100$ elsewhere). The playground shows one draw and the shares over
# 2,000 draws.

# %%
mlm_masking_playground()

# %% [markdown]
# **Next-sentence prediction.** Half of the pairs keep the true next segment (label 0,
# IsNext), half get a random one (label 1, NotNext), and a small head on `[CLS]`
# (`NSPHead`: dense, tanh, a linear layer to two logits) learns to tell them apart.

# %%
segments = [[i] for i in range(10)]
pairs, labels = sample_nsp_pairs(segments, torch.Generator().manual_seed(0))
for (a, b), label in list(zip(pairs, labels.tolist()))[:5]:
    print(f"A = segment {a[0]}, B = segment {b[0]}: {'IsNext' if label == 0 else 'NotNext'}")

# %% [markdown]
# BERT's pairs come from a corpus of **documents**, and a NotNext B is taken from *another*
# document (`document_nsp_pairs`, Assignment 05's Exercise 8a). Our documents are the
# corpus's standard-library modules, cut into segments of 30 words; the last three are
# held out, so a classifier is measured on modules it never trained on:

# %%
from toolkit.data import load_text  # noqa: E402
from toolkit.finetune import nsp_documents, pair_tensors  # noqa: E402
from toolkit.mlm import document_nsp_pairs  # noqa: E402

module_vocab = WordVocab.from_text(" ".join(load_text().split()[:20000]))
train_documents, val_documents = nsp_documents(module_vocab)
print("segments per training module:", [len(d) for d in train_documents])
print("segments per held-out module:", [len(d) for d in val_documents])
doc_pairs, doc_labels = document_nsp_pairs(val_documents, torch.Generator().manual_seed(0))
tensors = pair_tensors(doc_pairs[:8], doc_labels[:8], seq_len=63)
print("input_ids", tuple(tensors["input_ids"].shape), "segment ids of the first pair:",
      tensors["token_type_ids"][0].tolist())
print(f"{len(doc_pairs)} held-out pairs, {doc_labels.float().mean().item():.2f} of them NotNext")

# %% [markdown]
# **Fine-tuning.** For a sentence task the pre-trained encoder gets a new head on the
# final `[CLS]` vector (`ClassificationHead`: dense, tanh, dropout, a linear layer to the
# labels) and the whole model is trained a little further on labelled examples. In
# Assignment 05 you write that head (`BertClassifier`), build the pairs' input rows
# (`encode_pairs`), and fine-tune your own pre-trained encoder on a task built from the
# corpus, "which module does this pair of 15-word pieces come from?" (five modules, 32
# held-out examples each), against the same model fine-tuned from a fresh encoder.

# %%
bert = TinyBert(BertConfig(vocab_size=vocab.vocab_size, d_model=32, n_layers=2, n_heads=4,
                           max_seq_len=16))
head = ClassificationHead(32, n_labels=3)
nsp_head = NSPHead(32)  # the pre-training head it replaces, on the same [CLS] vector
with torch.no_grad():
    hidden = bert(encoded["input_ids"][None], encoded["token_type_ids"][None],
                  encoded["attention_mask"][None])
    print("hidden states", tuple(hidden.shape), "-> class logits", tuple(head(hidden).shape),
          "(NSP logits:", tuple(nsp_head(hidden).shape), "= IsNext, NotNext)")

# %% [markdown]
# Here is that comparison at lecture size: a 1-block encoder pre-trained by masked-LM for
# 150 steps, and a fresh one, each fine-tuned for 60 steps on the module task. The widget
# shows the accuracy against the step (solid: the held-out split, dashed: training) and,
# for one held-out example of each module, the attention of the `[CLS]` query in every
# layer and head: the positions whose vectors the classifier's input is built from.
# Masked-LM never trains `[CLS]` (it is never masked), so at this size do not expect the
# pre-trained run to win: the module shows in the words themselves, which a fresh encoder
# learns from 640 labelled examples. BERT's NSP objective is what gave its `[CLS]` a job
# during pre-training.

# %%
from toolkit.finetune import TASK_MODULES, finetuning_curve, module_task  # noqa: E402
from toolkit.pretrain import load_mlm_corpus, pretrain  # noqa: E402
from toolkit.widgets.blocks import finetuning_explorer, finetuning_results  # noqa: E402

course_corpus = load_mlm_corpus()
task_train, task_val = module_task(course_corpus.vocab)
small = BertConfig(vocab_size=course_corpus.vocab.vocab_size, d_model=32, n_layers=1,
                   n_heads=4, max_seq_len=64)
torch.manual_seed(0)
pretrained = TinyBert(small)
pretrain(pretrained, course_corpus, 150)
classifiers, curves = {}, {}
for name, encoder in (("pre-trained", pretrained), ("from scratch", TinyBert(small))):
    torch.manual_seed(0)
    classifiers[name] = BertClassifier(encoder, len(TASK_MODULES))
    curves[name] = finetuning_curve(classifiers[name], task_train, task_val, 60, lr=2e-3)
    print(f"{name:13s} held-out accuracy {curves[name]['val'][-1]:.2f}")
finetuning_explorer(finetuning_results(classifiers, curves, task_val, range(0, 160, 32),
                                       course_corpus.vocab, TASK_MODULES))

# %% [markdown]
# ## 5. RoBERTa: the same model, trained better
#
# RoBERTa (arXiv 1907.11692) kept BERT's architecture and changed the training recipe:
#
# * **dynamic masking**: a new mask every time a sequence is seen, instead of masks fixed
#   once during preprocessing (BERT duplicated its data ten times with different masks);
# * **no next-sentence prediction**: inputs are packed with full sentences up to 512 tokens,
#   and NSP turned out not to help;
# * **larger batches** (8,000 sequences), **more data** (160 GB of text instead of 16) and
#   longer training;
# * a **byte-level BPE** vocabulary of 50,000 units, so no input is ever `[UNK]`.
#
# It beat BERT on GLUE, SQuAD and RACE without touching the model: a reminder that the
# recipe matters as much as the architecture.
#
# ## 6. ELECTRA: learn from every token
#
# MLM learns from the 15% of positions it masks. ELECTRA (arXiv 2003.10555) trains a small
# MLM *generator* to fill the masks, and the main model, the *discriminator*, to tell for
# **every** position whether the token is original or was replaced by the generator
# ("replaced token detection"). Every position gives a training signal, and the
# discriminator never sees `[MASK]`, so pre-training and fine-tuning inputs look alike.
# At equal compute ELECTRA clearly beats BERT; ELECTRA-small, trained on one GPU for four
# days, outperforms GPT on GLUE.
#
# ## 7. DeBERTa: content and position, kept apart
#
# BERT adds the position embedding to the word embedding once, at the input. DeBERTa
# (arXiv 2006.03654) keeps two vectors per token, one for content and one for *relative*
# position, and computes the attention score as a sum of content-to-content,
# content-to-position and position-to-content terms ("disentangled attention"). Absolute
# positions, which some predictions need (the subject usually comes first), enter only
# near the output, in an "enhanced mask decoder". Its 1.5B model scored above the
# SuperGLUE human baseline (89.9 against 89.8, macro-average), one of the first to do so.
#
# ## 8. Distillation and the temperature
#
# DistilBERT (arXiv 1910.01108) trains a half-depth student on the teacher's soft
# targets, $T^2\,\mathrm{KL}(\mathrm{softmax}(z_t/T)\,\|\,\mathrm{softmax}(z_s/T))$, plus the
# true labels and a cosine loss between hidden states; it keeps 97% of BERT's GLUE score
# while being 40% smaller and 60% faster. The temperature reveals the teacher's ranking of the wrong answers;
# the $T^2$ keeps the gradients of the soft term at one scale for any $T$ (see the
# docstring of `toolkit.distill`).

# %%
temperature_explorer()
