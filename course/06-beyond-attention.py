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
# # Lecture 06: Beyond dense attention
#
# *Ungraded. Read it beside Assignment 06, where you build the pieces.*
#
# A Transformer layer does two things: it **mixes tokens** (attention) and it
# **transforms each token** (the feed-forward network). This lecture is about the models
# that change one or both, and about the surprising fact that ties most of them together:
# recurrent "state-space" layers and softmax-free (linear) attention are two ways to
# compute the same kind of masked matrix product.
#
# 1. Sparse experts: more parameters at the same cost per token.
# 2. One recurrence, many models: linear attention, RetNet, S4, Mamba, RWKV.
# 3. Mamba-2's duality: a selective SSM *is* masked attention.
# 4. Training in parallel: the associative scan.
# 5. What a generated token costs, and why hybrids exist.
# 6. Recall at equal size: attention, Mamba and a hybrid, measured.

# %%
import math

import matplotlib

matplotlib.use("Agg")  # figures render to PNG; nothing needs a display

import torch  # noqa: E402

from toolkit.hybrid.experiment import (  # noqa: E402
    MQARConfig,
    measure,
    trained_models,
)
from toolkit.hybrid.experiment import cached_models as cached_recall_models  # noqa: E402
from toolkit.hybrid.experiment import results_table as recall_table  # noqa: E402
from toolkit.moe import (  # noqa: E402
    MIXTRAL_8X7B,
    GatedSharedExpert,
    SharedExpertMoE,
    expert_load,
    load_balancing_loss,
    moe_parameter_counts,
    router_z_loss,
    top_k_gating,
)
from toolkit.notebook import friendly_errors  # noqa: E402
from toolkit.rwkv import RwkvChannelMixing, RwkvTimeMixing, token_shift  # noqa: E402
from toolkit.ssm import (  # noqa: E402
    MambaCache,
    MambaMixer,
    associative_scan,
    discretize_simplified,
    discretize_zoh,
    selective_scan,
    selective_step,
    ssm_convolutional,
    ssm_kernel,
    ssd_recurrent,
    ssm_recurrent,
)
from toolkit.widgets.beyond import (  # noqa: E402
    decoding_cost_explorer,
    decoding_costs,
    mamba_selectivity_explorer,
    plot_recall,
    recall_explorer,
    router_load_explorer,
    rwkv_decay_explorer,
    ssm_kernel_explorer,
)

friendly_errors()  # one line, not a traceback, for a name that a failed cell did not make

torch.manual_seed(0)
torch.set_default_dtype(torch.float64)  # exact comparisons below

# %% [markdown]
# ## 1. Sparse experts
#
# The feed-forward network holds about two thirds of a dense model's parameters, and
# every token uses all of them. A mixture-of-experts layer keeps $E$ copies and lets a
# router send each token to $k$ of them, so **capacity** (parameters, knowledge) and
# **compute per token** come apart. Three design points to remember:
#
# * **Which gate.** Switch and GShard take a softmax over all experts and keep the top-$k$
#   probabilities (GShard then divides its two by their sum); Mixtral takes the top-$k$
#   logits and a softmax over those, which gives the same gates as GShard's renormalised
#   ones (and is how Hugging Face computes Mixtral's). Only top-$k$ *without*
#   renormalising (Switch, Qwen2-MoE by default) gives other numbers, so name the
#   convention whenever you compare numbers.
# * **Balance.** Without an auxiliary loss the router collapses onto a few experts;
#   Switch's $\alpha N \sum_i f_i P_i$ is the standard cure. A loss-free alternative
#   (arXiv 2408.15664, used in DeepSeek-V3) adds a per-expert bias to the scores only for
#   the top-$k$ choice, nudged up or down after each step depending on the expert's load.
# * **Granularity.** DeepSeekMoE (arXiv 2401.06066) splits experts into many small ones
#   (more combinations to choose from) and adds **shared experts** every token passes
#   through, so the routed ones need not all relearn common knowledge. Qwen2-MoE
#   (arXiv 2407.10671) gives its shared expert a gate of its own, one sigmoid per token:
#   $y = \text{routed}(x) + \sigma(x\, w_s)\, S(x)$ (shown below the widget).
#
# The widget trains a toy router with and without the balancing loss. It routes with the
# toolkit's `top_k_gating` and `load_balancing_loss`; in Assignment 06, once you have
# written yours, the same widget runs them:
# `router_load_explorer(fns={"top_k_gating": top_k_gating, "load_balancing_loss":
# load_balancing_loss})`.

# %%
router_load_explorer()

# %% [markdown]
# Two numbers to watch while an MoE trains: each expert's **load** (how many token slots
# it got) and the router's logits themselves. ST-MoE (arXiv 2202.08906) adds a small
# **z-loss**, the mean of $(\log \sum_i e^{l_i})^2$ over tokens: it keeps the logits small,
# because large ones make the softmax brittle in low precision. Below, the balance loss
# sits near $k$ (here 2, its value for uniform routing) while the load is even and grows
# when one expert is everyone's favourite; the z-loss follows the size of the logits, even
# at an even load:

# %%
router_logits = torch.randn(64, 8)  # 64 tokens, 8 experts
favourite = router_logits + 3.0 * (torch.arange(8) == 0)  # expert 0 scores higher for all
for name, logits in (("even", router_logits), ("favourite", favourite),
                     ("even, x10", 10 * router_logits)):
    _, chosen = top_k_gating(logits, 2)
    print(f"{name:9s} load {expert_load(chosen, 8).tolist()}  balance loss "
          f"{load_balancing_loss(logits, 2).item():.2f}  z-loss {router_z_loss(logits).item():7.2f}")

# %% [markdown]
# Qwen2-MoE's gated shared expert, on a few random tokens: each token takes its own share
# of the shared expert (the gate is a sigmoid of one logit, not part of the router's
# softmax, so it never competes with the routed experts' weights).

# %%
shared = GatedSharedExpert(d_model=16, d_ff=48)  # sigmoid(x w_s) * SwiGLU(x)
qwen_like = SharedExpertMoE(d_model=16, d_ff=12, n_experts=6, k=2, d_shared=48)
qwen_like.shared = shared  # the layer holds one GatedSharedExpert; use ours
tokens = torch.randn(1, 5, 16)
with torch.no_grad():
    y, _ = qwen_like(tokens)
    share = torch.sigmoid(shared.gate(tokens))  # (1, 5, 1): one number per token
    rebuilt = qwen_like.routed(tokens)[0] + share * shared.expert(tokens)
print("shared expert's share per token:", [round(s, 2) for s in share.flatten().tolist()])
print("y = routed(x) + share * S(x):", torch.allclose(y, rebuilt))

# %% [markdown]
# Only the FFNs are replicated, so the parameter count is far from "experts times the
# dense size". For Mixtral 8x7B:

# %%
counts = moe_parameter_counts(**MIXTRAL_8X7B)
dense = moe_parameter_counts(**{**MIXTRAL_8X7B, "n_experts": 1, "k": 1})["total"]
print(f"total {counts['total'] / 1e9:.1f}B, active {counts['active'] / 1e9:.1f}B per token, "
      f"one expert per layer (a dense model of the same shape) {dense / 1e9:.1f}B")

# %% [markdown]
# ## 2. One recurrence, many models
#
# Causal linear attention (Assignment 03) keeps a matrix state
# $S_t = S_{t-1} + \phi(k_t)^\top v_t$ and a normaliser $z_t = z_{t-1} + \phi(k_t)$, and
# reads them with the query, $o_t = \phi(q_t) S_t / (\phi(q_t) \cdot z_t)$. Drop the feature
# map and the normaliser, as RetNet and Mamba-2 do, and the core is
# $S_t = S_{t-1} + k_t^\top v_t$, $o_t = q_t S_t$. Almost every "efficient" token mixer in
# this lecture is a variation of that line:
#
# $$ S_t = a_t \odot S_{t-1} + b_t, \qquad o_t = \text{read}(S_t). $$
#
# | model | state update | what changes |
# |---|---|---|
# | linear attention | $S_t = S_{t-1} + k_t^\top v_t$ | no forgetting at all |
# | RetNet (arXiv 2307.08621) | $S_t = \gamma S_{t-1} + k_t^\top v_t$ | a fixed decay $\gamma < 1$ per head |
# | S4 / S4D | $h_t = \bar A h_{t-1} + \bar B u_t$ | a learned decay per state dimension, fixed over time |
# | Mamba | $h_t = e^{\Delta_t A} h_{t-1} + \Delta_t B_t u_t$ | decay and input map depend on the token |
# | RWKV-4 | $a_t = e^{-w} a_{t-1} + e^{k_t} v_t$ (and a denominator) | a learned decay per channel, normalised |
#
# The more the decay depends on the input, the more the model can *choose* what to keep,
# and the harder it is to train in parallel: a fixed decay gives a convolution, an
# input-dependent one needs a scan.
#
# ### RetNet's three forms
#
# RetNet's retention makes the point concrete. The recurrent form is the line above with
# $o_t = q_t S_t$. Unrolled, $o_t = \sum_{s \le t} \gamma^{t-s} (q_t \cdot k_s) v_s$: a
# **masked attention** without softmax, whose mask $D_{ts} = \gamma^{t-s}$ (zero above the
# diagonal) both hides the future and decays the past. RetNet trains with this parallel
# form, decodes with the recurrent one, and processes long inputs chunk by chunk (parallel
# inside a chunk, recurrent across chunks). The two forms agree:

# %%
T, d_k, d_v, gamma = 10, 4, 3, 0.8
q, k, v = torch.randn(T, d_k), torch.randn(T, d_k), torch.randn(T, d_v)

t = torch.arange(T)
D = (gamma ** (t[:, None] - t[None, :]).clamp_min(0)) * (t[:, None] >= t[None, :])
parallel = ((q @ k.T) * D) @ v  # (Q K^T ∘ D) V

S, recurrent = torch.zeros(d_k, d_v), []
for i in range(T):
    S = gamma * S + k[i, :, None] * v[i, None, :]  # S_t = γ S_{t-1} + k_t^T v_t
    recurrent.append(q[i] @ S)  # o_t = q_t S_t
print("max |parallel - recurrent| =", (parallel - torch.stack(recurrent)).abs().max().item())

# %% [markdown]
# ### S4: a decay fixed over time is a convolution
#
# A time-invariant SSM discretises once (S4 used the bilinear transform; S4D and Mamba use
# the zero-order hold, $\bar A = e^{\Delta A}$,
# $\bar B = (\Delta A)^{-1}(e^{\Delta A} - I)\,\Delta B$, which we use here), and then every
# step is the same: $h_t = \bar A h_{t-1} + \bar B u_t$, $y_t = C h_t + D u_t$. Unrolled, the
# output is a causal convolution of the input with the kernel
# $K = (C\bar B, C\bar A\bar B, C\bar A^2\bar B, \dots)$, which an FFT computes for the whole
# sequence at once: S4 trains as a convolution and generates as a recurrence. Mamba's
# paper writes the zero-order hold for both; its reference code keeps the exact $\bar A$
# but takes $\bar B = \Delta B$ (Euler), which its authors report makes no difference in
# practice.

# %%
H, N_state, L_lti = 2, 4, 32
A_diag = -(torch.rand(H, N_state) + 0.1)  # a stable, diagonal A
B_in, C_out, D_skip = torch.randn(H, N_state), torch.randn(H, N_state), torch.randn(H)
A_bar, B_bar = discretize_zoh(0.1, A_diag, B_in)
u_lti = torch.randn(1, L_lti, H)
y_recurrent = ssm_recurrent(A_bar, B_bar, C_out, D_skip, u_lti)
y_convolution = ssm_convolutional(A_bar, B_bar, C_out, D_skip, u_lti)
kernel = ssm_kernel(A_bar, B_bar, C_out, L_lti)  # (H, L): K_l = C A_bar^l B_bar
print("max |recurrence - convolution| =", (y_recurrent - y_convolution).abs().max().item())
print("kernel of channel 0, first taps:", [round(x, 3) for x in kernel[0, :5].tolist()])
_, B_euler = discretize_simplified(0.1, A_diag, B_in)
print(f"Mamba's B_bar = delta B differs from the ZOH's by at most "
      f"{(B_bar - B_euler).abs().max().item():.4f} at delta = 0.1")

# %% [markdown]
# ## 3. Mamba-2: a selective SSM is masked attention
#
# Mamba-2 (Dao and Gu, arXiv 2405.21060, "state space duality") restricts Mamba's $A$ to a
# **scalar** per head (the same decay for every channel of the head and every state
# dimension; here each head has one channel). Then one channel's scan unrolls to
#
# $$ y_t = \sum_{s \le t} \underbrace{C_t \cdot B_s}_{\text{"query" . "key"}}
#          \; \underbrace{\prod_{r = s+1}^{t} a_r}_{\text{decay mask } L_{ts}}
#          \; \Delta_s u_s, \qquad a_r = e^{\Delta_r A}, $$
#
# that is $y = (L \circ C B^\top)\,(\Delta \odot u)$: attention with $C$ as the queries,
# $B$ as the keys, no softmax, and a causal mask whose entries are products of decays. The
# mask $L$ is *1-semiseparable* (every submatrix on or below the diagonal has rank at most
# 1), which is what makes the linear-time recurrent form possible. The quadratic "attention" form is better
# for GPUs' matrix units on short chunks, the recurrent form for long sequences and
# generation; Mamba-2 uses the first inside chunks and the second across them, just like
# RetNet. (In Assignment 06 you write all of it: the mask `semiseparable_mask`, the
# attention form `ssd_attention` and the chunked form `ssd_chunked`, each checked against
# the recurrence `toolkit.ssm.ssd_recurrent`; and the parallel scan of section 4.)
#
# Check it with the toolkit's selective scan, giving every state dimension of a channel
# the same $A$:

# %%
L_seq, d_inner, N = 8, 3, 4
u = torch.randn(1, L_seq, d_inner)
delta = torch.rand(1, L_seq, d_inner) + 0.1
A_log = torch.randn(d_inner, 1).expand(d_inner, N).contiguous()  # scalar A per channel
B, C = torch.randn(1, L_seq, N), torch.randn(1, L_seq, N)
y_scan = selective_scan(u, delta, A_log, B, C)  # the recurrent (scan) form

A = -torch.exp(A_log[:, 0])  # (d_inner,)
log_a = delta[0] * A  # log a_t per channel: (L, d_inner)
cum = log_a.cumsum(0)  # sum_{r <= t} log a_r
y_attention = torch.zeros_like(u)
causal = torch.ones(L_seq, L_seq).tril().bool()
for c in range(d_inner):
    decay = torch.exp(cum[:, None, c] - cum[None, :, c]).masked_fill(~causal, 0.0)  # L_ts
    M = (C[0] @ B[0].T) * decay  # (L ∘ C B^T)
    y_attention[0, :, c] = M @ (delta[0, :, c] * u[0, :, c])
print("max |scan - masked attention| =", (y_scan - y_attention).abs().max().item())

# The toolkit's scalar-decay recurrence gives the same numbers (one head per channel, with
# a state of one row): h_t = a_t h_{t-1} + x_t B_t^T, y_t = h_t C_t, with x_t = delta_t u_t.
heads = (1, L_seq, d_inner, N)
y_recurrent = ssd_recurrent((delta * u)[..., None], log_a[None], B[:, :, None].expand(heads),
                            C[:, :, None].expand(heads))[..., 0]
print("max |recurrence - masked attention| =", (y_recurrent - y_attention).abs().max().item())

# The same scan, one token at a time (how Mamba generates): a fixed-size state in, one
# output and the next state out.
state = torch.zeros(1, d_inner, N)
for i in range(L_seq):
    y_i, state = selective_step(state, u[:, i], delta[:, i], A_log, B[:, i], C[:, i])
print("last output, token by token = scan:", torch.allclose(y_i, y_scan[:, -1]))

# %% [markdown]
# The explorer below shows one SSM channel's kernel: how much of the input $l$ steps back
# reaches the output, for a step $\Delta$ and decay $A$ of your choice, and how a
# selective model can wipe its memory at one token. In the assignment it discretises with
# your own zero-order hold: `ssm_kernel_explorer(fns={"discretize_zoh": discretize_zoh})`.

# %%
ssm_kernel_explorer()

# %% [markdown]
# What selectivity buys, token by token: Mamba computes the step from the token,
# $\Delta_t = \mathrm{softplus}(\text{bias} + \text{selectivity} \cdot g_t)$. A large step
# writes the current token into the state and forgets the past; a small one keeps the state
# and ignores the token. Below, one marked token among fillers: the selective scan keeps it,
# a scan with the same step for every token (an LTI model) blurs it away. In the assignment
# it runs your scan: `mamba_selectivity_explorer(fns={"selective_scan": selective_scan})`.

# %%
mamba_selectivity_explorer()

# %% [markdown]
# ## 4. Training in parallel: the associative scan
#
# With input-dependent decays there is no fixed kernel, so S4's FFT convolution is gone.
# What remains is associativity. Each step is the affine map $h \mapsto a_t h + b_t$, and
# two steps compose into one of the same form,
#
# $$ (a_1, b_1) \text{ then } (a_2, b_2) = (a_2 a_1,\; a_2 b_1 + b_2), $$
#
# so all prefixes can be computed like a prefix sum: in round $r$ every position combines
# with the one $2^r$ steps back, and after $\lceil \log_2 L \rceil$ rounds each holds the
# composition of everything before it. Mamba's kernel does this in the GPU's fast memory
# and never writes the $(L, d_\text{inner}, N)$ states to main memory.

# %%
L_long = 1000
a, b = torch.rand(L_long, 2), torch.randn(L_long, 2)
h, loop = torch.zeros(2), []
for i in range(L_long):
    h = a[i] * h + b[i]
    loop.append(h)
scanned = associative_scan(a, b, dim=0)
print(f"{L_long} steps in {math.ceil(math.log2(L_long))} rounds; max difference from the loop:",
      (scanned - torch.stack(loop)).abs().max().item())

# %% [markdown]
# RWKV-4 sits between the two worlds: its decay $e^{-w}$ is learned per channel but fixed
# over time (like S4; later RWKV versions make it input-dependent), and its output is normalised by a running denominator (like
# attention's softmax). The widget shows how long each channel holds one marked token; in
# the assignment it runs your recurrence, `rwkv_decay_explorer(fns={"wkv_recurrent":
# wkv_recurrent})`.

# %%
rwkv_decay_explorer()

# %% [markdown]
# A whole RWKV layer wraps that recurrence in two blocks, both fed by **token shift**
# (each position also sees the previous token, mixed in per channel): *time mixing*
# (receptance, key, value, the WKV recurrence, a sigmoid gate) and *channel mixing* (an
# FFN with a squared ReLU). The state they carry is the WKV state plus the last token, so
# a layer continues from it exactly, and no output depends on a later token:

# %%
time_mixing, channel_mixing = RwkvTimeMixing(d_model=8), RwkvChannelMixing(d_model=8)
x_rwkv, next_token = torch.randn(1, 6, 8), torch.randn(1, 1, 8)
print("token shift puts x_{t-1} at position t:",
      torch.equal(token_shift(x_rwkv)[:, 1:], x_rwkv[:, :-1]))
with torch.no_grad():
    mixed, carried = time_mixing(x_rwkv)
    later = x_rwkv.clone()
    later[:, -1] += 1.0  # change only the last token
    print("changing the last token leaves earlier outputs alone:",
          torch.allclose(time_mixing(later)[0][:, :-1], mixed[:, :-1]))
    whole, _ = time_mixing(torch.cat([x_rwkv, next_token], dim=1))
    step, _ = time_mixing(next_token, carried)  # continue from the carried state
    print("one more token from the state = the whole sequence again:",
          torch.allclose(step, whole[:, -1:]))
    out_rwkv, _ = channel_mixing(mixed)
print("channel mixing keeps the shape:", tuple(out_rwkv.shape))

# %% [markdown]
# ## 5. What a generated token costs, and why hybrids exist
#
# At generation time attention with a KV cache keeps $2\, n_\text{kv heads}\, d_\text{head}$
# numbers per token and layer and reads all of them for every new token. A recurrent
# layer keeps a fixed state. For a 24-layer, $d_\text{model} = 1024$ model in fp16,
# counting only the token-mixing layers (the feed-forward layers cost the same in all
# three; RWKV's state here is its time-mixing state):

# %%
costs = decoding_costs([4096, 131072], d_model=1024, n_layers=24, n_heads=16)
for kind, c in costs.items():
    print(f"{kind:22s} state at 4k: {c['bytes'][0] / 2**20:8.1f} MiB   at 128k: "
          f"{c['bytes'][1] / 2**20:8.1f} MiB   MFLOPs/token at 128k: {c['flops'][1] / 1e6:7.0f}")

# %%
decoding_cost_explorer()

# %% [markdown]
# The recurrent rows are more than arithmetic: a Mamba layer (`MambaMixer`: input
# projection into two branches, a short causal convolution, SiLU, the selective SSM, the
# SiLU gate of the second branch, output projection) really generates from a cache of the
# last few convolution inputs and the SSM state, the same size after 10 tokens as after
# 10,000, and its steps reproduce the whole-sequence output:

# %%
mixer = MambaMixer(d_model=16)
x_mamba = torch.randn(1, 12, 16)
with torch.no_grad():
    whole = mixer(x_mamba)
    cache: MambaCache = mixer.empty_cache(batch=1)  # conv inputs and SSM state, zeros
    steps = []
    for i in range(x_mamba.size(1)):
        y_i, cache = mixer.step(x_mamba[:, i], cache)
        steps.append(y_i)
print("max |whole sequence - step by step| =", (whole - torch.stack(steps, 1)).abs().max().item())
print(f"cache: {cache.nbytes():,} bytes, whatever the length")

# %% [markdown]
# So why not replace attention everywhere? Because a fixed-size state must forget.
# Tasks that need one exact token from far back (copy this identifier, answer from this
# paragraph, recall the value bound to this key) are exactly where pure SSMs and linear
# recurrences fall behind Transformers of the same size, while attention, which keeps
# every token, handles them well.
#
# **Hybrids** keep most layers recurrent and a few attention layers for retrieval:
#
# * **Jamba** (arXiv 2403.19887) interleaves one attention layer per seven Mamba layers
#   and uses MoE in every other layer (16 experts, top-2): 52B parameters, 12B active,
#   and a KV cache small enough for 256K-token contexts.
# * **Griffin / RecurrentGemma** (arXiv 2402.19427) mixes a gated linear recurrence
#   (RG-LRU) with local (sliding-window) attention.
# * **Samba** (arXiv 2406.07522) alternates Mamba layers with sliding-window attention.
# * **Zamba** (arXiv 2405.16712) shares one attention block across a stack of Mamba
#   layers.
#
# The pattern: the recurrent layers carry the long, compressed summary cheaply; the few
# attention layers (global, or local with a window) provide exact lookup where it
# matters. How many attention layers are enough, and where they go, is still an active
# question; the cost model above tells you what each one adds to the serving bill.

# %% [markdown]
# ## 6. Recall at equal size: attention, Mamba and a hybrid, measured
#
# Zoology (arXiv 2312.04927) made the forgetting measurable with **multi-query
# associative recall** (MQAR): a sequence lists key-value pairs `k_1 v_1 ... k_n v_n`,
# then asks some of the keys again, `q_1 a_1 q_2 a_2 ...`, and the model is scored only
# where it is asked: at each query key its guess must be that key's value
# (`toolkit.hybrid.mqar_batch`, `recall_accuracy`; Assignment 06 has you write both).
# `toolkit.hybrid.HybridLM` builds a model from a pattern, one letter per layer: `"A"`
# causal attention, `"M"` a Mamba layer with `expand=1`, which has about as many parameters
# as an attention layer of the same width. So `"AA"`, `"MM"` and `"MA"` are the same size
# and differ only in how their two layers mix tokens.
#
# A small version first: width 32, a Mamba state of 8 numbers per channel, 600 steps on
# 2, 4 and 8 pairs (half a CPU minute on one thread; trained once, then cached):

# %%
torch.set_default_dtype(torch.float32)  # the models train in float32 (the lecture's float64 aside)
threads = torch.get_num_threads()
torch.set_num_threads(1)  # models this small step fastest on one thread
SMALL_RECALL = MQARConfig(vocab_size=32, train_pairs=(2, 4, 8), steps=600, max_lr=1e-2,
                          d_model=32, d_state=8, max_seq_len=32)
small_recall = measure(trained_models(SMALL_RECALL, progress=False), SMALL_RECALL,
                       eval_pairs=(2, 4, 8))
torch.set_num_threads(threads)
print(recall_table(small_recall))
display(recall_explorer(small_recall))

# %% [markdown]
# The course's run of this cell gave pure attention 100%, 99.9% and 100% at 2, 4 and 8
# pairs, pure Mamba 78%, 57% and 39%, and the hybrid 100%, 99.5% and 99.3% (chance is
# 2/32 = 6%). The three models have the same size (11,360, 11,552 and 11,456
# parameters), so the difference is how they mix tokens: the pure Mamba model must fold
# every pair into its state of 8 numbers per channel, and the more pairs, the less of
# each it keeps; one attention layer looks the key up among the cached tokens instead.
# In the hybrid the Mamba layer below can do the rest of the work: its short convolution
# lets each value's position see the key before it, which is what attention then matches.
#
# The larger run (`python -m toolkit.hybrid`: width 64, state 16, 600 steps on 4, 8 and
# 16 pairs; the course's numbers are in `benchmarks/README.md`) measured:
#
# | model | params | 4 pairs | 8 pairs | 16 pairs | state @ 64 tokens |
# |---|---|---|---|---|---|
# | AA (attention) | 45,248 | 99.5% | 97.8% | 59.4% | 16,384 |
# | MM (Mamba) | 45,120 | 30.5% | 17.1% | 11.1% | 2,560 |
# | MA (hybrid) | 45,184 | 94.5% | 89.4% | 73.4% | 9,472 |
#
# The same picture at twice the width and twice the pairs: pure Mamba far behind and
# falling, the hybrid close to attention (ahead at 16 pairs, where both were still
# learning after 600 steps).
#
# The last column is what each model must keep per sequence to go on generating after the
# longest sequence: the attention layer's cache grows with every token, the Mamba layer's
# state does not. The hybrid pays for one attention layer's cache and, in return, recalls
# like attention. If the models are prepared on this machine, the next cell prints the
# same table from them.

# %%
full_recall_models = cached_recall_models(MQARConfig())
if full_recall_models is None:
    print("The three models are not prepared on this machine: run `python -m toolkit.hybrid` "
          "once (CPU minutes), then this cell again.")
else:
    full_recall = measure(full_recall_models, MQARConfig())
    print(recall_table(full_recall))
    display(plot_recall(full_recall, seq_len=131072))
torch.set_default_dtype(torch.float64)

# %% [markdown]
# ## Further reading
#
# * Gu, Goel, Ré: S4, arXiv 2111.00396; Gu et al.: S4D, arXiv 2206.11893.
# * Gu and Dao: Mamba, arXiv 2312.00752; Dao and Gu: Mamba-2, arXiv 2405.21060.
# * Peng et al.: RWKV, arXiv 2305.13048. Sun et al.: RetNet, arXiv 2307.08621.
# * Hua et al.: the gated attention unit (FLASH), arXiv 2202.10447.
# * Arora et al.: Zoology, multi-query associative recall, arXiv 2312.04927. Lieber et al.:
#   Jamba, arXiv 2403.19887; Ren et al.: Samba, arXiv 2406.07522; Glorioso et al.: Zamba,
#   arXiv 2405.16712.
# * Fedus et al.: Switch, arXiv 2101.03961; Jiang et al.: Mixtral, arXiv 2401.04088;
#   Dai et al.: DeepSeekMoE, arXiv 2401.06066; Zoph et al.: ST-MoE, arXiv 2202.08906.
