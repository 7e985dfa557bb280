"""toolkit.models: the capstone GPT in its classic and modern recipes."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from toolkit.models import (
    GPT,
    GPTConfig,
    StaticKVCache,
    count_parameters,
    parameter_matched_configs,
)

V, D, L, H, MAXLEN = 37, 32, 2, 4, 64  # V != D so a transposed head cannot even run


def tiny(recipe: str, **overrides) -> GPTConfig:
    kw = dict(vocab_size=V, d_model=D, n_layers=L, n_heads=H, max_seq_len=MAXLEN)
    kw.update(overrides)
    return GPTConfig.classic(**kw) if recipe == "classic" else GPTConfig.modern(**kw)


def build(recipe: str, seed: int = 0, dtype=torch.float64, **overrides) -> GPT:
    torch.manual_seed(seed)
    model = GPT(tiny(recipe, **overrides)).to(dtype).eval()
    # Perturb the norm gains and biases away from their (1, 0) init so that a bug
    # in how they are used cannot hide.
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def tokens(B: int, T: int, seed: int = 1, vocab: int = V) -> torch.Tensor:
    return torch.randint(vocab, (B, T), generator=torch.Generator().manual_seed(seed))


RECIPES = ["classic", "modern"]


# ---------------------------------------------------------------- configuration


def test_recipes_choose_their_components():
    c, m = tiny("classic"), tiny("modern")
    assert (c.position_type, c.norm_type, c.mlp_type, c.use_bias, c.kv_heads) == (
        "learned", "layernorm", "gelu_tanh", True, H)
    assert (m.position_type, m.norm_type, m.mlp_type, m.use_bias, m.kv_heads) == (
        "rope", "rmsnorm", "swiglu", False, H // 2)
    classic, modern = GPT(c), GPT(m)
    assert classic.wpe is not None and modern.wpe is None
    k_proj = modern.state_dict()["blocks.0.attn.k_proj.weight"]  # (H_kv D, d) on every backend
    assert k_proj.shape == ((H // 2) * (D // H), D)  # GQA
    assert GPTConfig.from_dict(m.to_dict()) == m


@pytest.mark.parametrize(
    "kwargs, name",
    [
        (dict(d_model=30, n_heads=4), "d_model"),
        (dict(n_kv_heads=3), "n_kv_heads"),
        (dict(recipe="future"), "recipe"),
        (dict(dropout=1.5), "dropout"),
        (dict(norm="batchnorm"), "norm"),
        (dict(vocab_size=0), "vocab_size"),
    ],
)
def test_config_rejects_bad_values(kwargs, name):
    with pytest.raises(ValueError, match=name):
        GPTConfig(**{**dict(d_model=32, n_heads=4), **kwargs})


# ---------------------------------------------------------------- KV cache


VARIANTS = [
    ("classic", {}),
    ("modern", {}),
    ("modern", {"n_kv_heads": 1}),  # multi-query attention
    ("modern", {"rope_layout": "interleaved"}),
    ("modern", {"norm_placement": "post"}),  # Post-LN, no final norm
    ("classic", {"position": "rope", "dropout": 0.1}),  # an ablation (eval: no dropout)
]


@pytest.mark.parametrize("recipe, overrides", VARIANTS)
def test_cached_decoding_equals_full_forward(recipe, overrides):
    model = build(recipe, **overrides)
    idx = tokens(2, 24)
    full, _ = model(idx)
    cache = model.new_cache()
    pieces = [model(idx[:, :7], cache=cache, start_pos=0)[0]]  # prefill 7 tokens
    for t in range(7, 24):  # then one token at a time at absolute position t
        pieces.append(model(idx[:, t : t + 1], cache=cache, start_pos=t)[0])
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-10, rtol=1e-10)
    assert cache.length == 24
    kv = tiny(recipe, **overrides).kv_heads
    assert cache.keys[0].shape == (2, kv, MAXLEN, D // H)


def test_cache_rewind_and_errors():
    model = build("modern")
    idx = tokens(1, 12)
    full, _ = model(idx)
    cache = model.new_cache()
    model(idx[:, :10], cache=cache)
    model(tokens(1, 2, seed=9), cache=cache, start_pos=10)  # a wrong continuation...
    out, _ = model(idx[:, 10:], cache=cache, start_pos=10)  # ...overwritten by rewinding
    torch.testing.assert_close(out, full[:, 10:], atol=1e-10, rtol=1e-10)
    with pytest.raises(ValueError, match="start_pos"):
        model(idx[:, :1], cache=cache, start_pos=13)  # a gap after 12 cached positions
    with pytest.raises(ValueError, match="max_seq_len"):
        model(tokens(1, MAXLEN + 1))
    with pytest.raises(ValueError, match="max_seq_len"):
        model(idx[:, :1], start_pos=MAXLEN)
    assert isinstance(model.new_cache(), StaticKVCache)


# ---------------------------------------------------------------- causality & positions


@pytest.mark.parametrize("recipe", RECIPES)
def test_future_tokens_never_change_earlier_logits(recipe):
    model = build(recipe)
    idx = tokens(1, 20)
    base, _ = model(idx)
    for t in (0, 5, 19):
        changed = idx.clone()
        changed[:, t:] = (changed[:, t:] + 1) % V
        out, _ = model(changed)
        torch.testing.assert_close(out[:, :t], base[:, :t], atol=1e-12, rtol=0)
        assert not torch.allclose(out[:, t:], base[:, t:])


def test_rope_model_depends_only_on_relative_positions():
    idx = tokens(1, 10)
    modern, classic = build("modern"), build("classic")
    torch.testing.assert_close(modern(idx, start_pos=17)[0], modern(idx)[0], atol=1e-9, rtol=1e-9)
    assert not torch.allclose(classic(idx, start_pos=17)[0], classic(idx)[0])


def test_gqa_equals_mha_with_shared_kv_heads():
    """Query head h must read KV head h // (n_heads / n_kv_heads), not h % n_kv_heads."""
    gqa = build("modern", n_kv_heads=2)
    mha = build("modern", n_kv_heads=H)
    state = gqa.state_dict()  # reference names and layout on every backend
    Dh = D // H
    for key, w in state.items():
        if key.endswith(("k_proj.weight", "v_proj.weight")):
            w = w.view(2, Dh, D).repeat_interleave(H // 2, dim=0)  # KV head h // 2 for head h
            state[key] = w.reshape(H * Dh, D)
    mha.load_state_dict(state)
    idx = tokens(2, 12)
    torch.testing.assert_close(gqa(idx)[0], mha(idx)[0], atol=1e-10, rtol=1e-10)


# ---------------------------------------------------------------- weight tying


def check_tied_unembedding(model: GPT) -> None:
    """W_U = E^T: the head's weight *is* the embedding, and logits = ln_f(h) @ E^T."""
    assert model.lm_head.weight is model.wte.weight, "lm_head.weight must be wte.weight itself"
    assert model.lm_head.weight.data_ptr() == model.wte.weight.data_ptr()
    captured = {}
    hook = model.ln_f.register_forward_hook(lambda m, i, o: captured.setdefault("h", o))
    try:
        logits, _ = model(tokens(2, 6, vocab=model.config.vocab_size))
    finally:
        hook.remove()
    E = model.wte.weight  # (V, d)
    torch.testing.assert_close(logits, captured["h"] @ E.T, atol=1e-10, rtol=1e-10)


class TransposedHeadMutant(GPT):
    """Ties the head to E without the transpose: logits = h @ E (runs only if V == d)."""

    def unembed(self, h):
        return h @ self.wte.weight


@pytest.mark.parametrize("recipe", RECIPES)
def test_weights_are_tied_with_the_right_transpose(recipe):
    model = build(recipe)
    check_tied_unembedding(model)
    # One tensor, so a gradient step on either use moves both.
    assert count_parameters(model) == sum(p.numel() for p in model.parameters())
    untied = GPT(tiny(recipe, tie_weights=False))
    assert count_parameters(untied) - count_parameters(GPT(tiny(recipe))) == V * D


def test_tying_check_catches_mutants():
    # Mutant 1: a copy of E (equal values at init, but not tied).
    copy = build("modern")
    copy.lm_head.weight = nn.Parameter(copy.wte.weight.detach().clone())
    with pytest.raises(AssertionError):
        check_tied_unembedding(copy)
    # Mutant 2: the transposed tensor, h @ E instead of h @ E^T (needs V == d to run).
    torch.manual_seed(0)
    square = TransposedHeadMutant(tiny("modern", vocab_size=D)).double().eval()
    with pytest.raises(AssertionError):
        check_tied_unembedding(square)
    # Mutant 3: a separate matrix holding E^T (shape (d, V)) used as h @ W: same
    # numbers as the right answer, but not the same tensor, so training unties it.
    class SeparateTransposeMutant(GPT):
        def __init__(self, config):
            super().__init__(config)
            self.W_U = nn.Parameter(self.wte.weight.detach().T.clone())
            self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)

        def unembed(self, h):
            return h @ self.W_U

    with pytest.raises(AssertionError):
        check_tied_unembedding(SeparateTransposeMutant(tiny("modern")).double().eval())


# ---------------------------------------------------------------- parameter counts


def test_gpt2_small_and_llama_7b_parameter_counts():
    with torch.device("meta"):
        gpt2 = GPT(GPTConfig.classic(vocab_size=50257, n_layers=12, n_heads=12, d_model=768,
                                     max_seq_len=1024))
        llama = GPT(GPTConfig.modern(vocab_size=32000, n_layers=32, n_heads=32, n_kv_heads=32,
                                     d_model=4096, max_seq_len=2048, ffn_multiple_of=256,
                                     tie_weights=False))
    assert count_parameters(gpt2) == 124_439_808  # GPT-2 small (tied)
    assert llama.blocks[0].mlp.d_ff == 11008
    assert count_parameters(llama) == 6_738_415_616  # LLaMA-7B (untied)


def test_parameter_matched_configs():
    classic, modern = parameter_matched_configs(vocab_size=256, d_model=64, n_layers=2, n_heads=4,
                                                max_seq_len=128)
    assert classic.recipe == "classic" and modern.recipe == "modern"
    nc, nm = count_parameters(GPT(classic)), count_parameters(GPT(modern))
    assert abs(nc - nm) / nc < 0.01
    assert modern.d_ff % 8 == 0


def test_parameter_matched_configs_counts_the_model_class_it_is_given():
    """A notebook passes its own GPT (the student build stubs the toolkit's while the
    capstone is open): only that class is built."""
    built = []

    class OwnGPT(GPT):
        def __init__(self, config):
            built.append(config.recipe)
            super().__init__(config)

    shape = dict(vocab_size=256, d_model=64, n_layers=2, n_heads=4, max_seq_len=128)
    assert parameter_matched_configs(model_class=OwnGPT, **shape) == \
        parameter_matched_configs(**shape)
    assert built == ["classic", "modern", "modern"]


# ---------------------------------------------------------------- against Hugging Face


def perturb_vectors(model: nn.Module) -> nn.Module:
    """Move norm gains and biases off their (1, 0) init so their use is tested too."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.add_(0.1 * torch.randn_like(p))
    return model


def test_classic_recipe_equals_hf_gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(
        vocab_size=V, n_positions=MAXLEN, n_embd=D, n_layer=L, n_head=H, resid_pdrop=0.0,
        embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5, activation_function="gelu_new",
    )
    torch.manual_seed(0)
    ref = perturb_vectors(transformers.GPT2LMHeadModel(cfg).double().eval())
    ours = GPT(tiny("classic")).double().eval()
    sd = ref.state_dict()
    new = {"wte.weight": sd["transformer.wte.weight"], "wpe.weight": sd["transformer.wpe.weight"],
           "ln_f.weight": sd["transformer.ln_f.weight"], "ln_f.bias": sd["transformer.ln_f.bias"]}
    for i in range(L):
        p, q = f"transformer.h.{i}.", f"blocks.{i}."
        for ln in ("ln_1", "ln_2"):
            for kind in ("weight", "bias"):
                new[f"{q}{ln}.{kind}"] = sd[f"{p}{ln}.{kind}"]
        # HF's Conv1D stores (in, out); nn.Linear stores (out, in).
        w, b = sd[p + "attn.c_attn.weight"], sd[p + "attn.c_attn.bias"]
        for j, name in enumerate(("q_proj", "k_proj", "v_proj")):
            new[q + f"attn.{name}.weight"] = w[:, j * D : (j + 1) * D].T
            new[q + f"attn.{name}.bias"] = b[j * D : (j + 1) * D]
        new[q + "attn.o_proj.weight"] = sd[p + "attn.c_proj.weight"].T
        new[q + "attn.o_proj.bias"] = sd[p + "attn.c_proj.bias"]
        new[q + "mlp.fc1.weight"] = sd[p + "mlp.c_fc.weight"].T
        new[q + "mlp.fc1.bias"] = sd[p + "mlp.c_fc.bias"]
        new[q + "mlp.fc2.weight"] = sd[p + "mlp.c_proj.weight"].T
        new[q + "mlp.fc2.bias"] = sd[p + "mlp.c_proj.bias"]
    missing, unexpected = ours.load_state_dict(new, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected  # tied to wte
    idx = tokens(2, 16)
    torch.testing.assert_close(ours(idx)[0], ref(idx).logits, atol=1e-9, rtol=1e-9)


def test_modern_recipe_equals_hf_llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=V, hidden_size=D, intermediate_size=48, num_hidden_layers=L,
        num_attention_heads=H, num_key_value_heads=2, max_position_embeddings=MAXLEN,
        rms_norm_eps=1e-5, tie_word_embeddings=True, attention_bias=False, mlp_bias=False,
    )
    cfg._attn_implementation = "eager"
    torch.manual_seed(0)
    ref = perturb_vectors(transformers.LlamaForCausalLM(cfg).double().eval())
    ours = GPT(tiny("modern", n_kv_heads=2, d_ff=48)).double().eval()
    sd = ref.state_dict()
    new = {"wte.weight": sd["model.embed_tokens.weight"], "ln_f.weight": sd["model.norm.weight"]}
    for i in range(L):
        p, q = f"model.layers.{i}.", f"blocks.{i}."
        new[q + "ln_1.weight"] = sd[p + "input_layernorm.weight"]
        new[q + "ln_2.weight"] = sd[p + "post_attention_layernorm.weight"]
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            new[q + f"attn.{name}.weight"] = sd[p + f"self_attn.{name}.weight"]
        for name in ("gate_proj", "up_proj", "down_proj"):
            new[q + f"mlp.{name}.weight"] = sd[p + f"mlp.{name}.weight"]
    missing, unexpected = ours.load_state_dict(new, strict=False)
    assert missing == ["lm_head.weight"] and not unexpected  # tied to wte
    idx = tokens(2, 16)
    # HF computes the RoPE angles in float32 even in a float64 model: ~1e-7 apart.
    torch.testing.assert_close(ours(idx)[0], ref(idx).logits, atol=1e-6, rtol=1e-6)


# ---------------------------------------------------------------- learning


@pytest.mark.parametrize("recipe", RECIPES)
def test_loss_falls_within_a_few_steps(recipe):
    torch.manual_seed(0)
    model = GPT(tiny(recipe)).train()
    text = torch.tensor(list(b"the cat sat on the mat. " * 8)) % V
    x, y = text[None, :-1][:, :48], text[None, 1:][:, :48]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(25):
        _, loss = model(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(torch.log(torch.tensor(float(V))).item(), abs=0.3)
    assert losses[-1] < 0.5 * losses[0]


def test_ignore_index_and_target_shape():
    model = build("classic")
    idx = tokens(1, 8)
    targets = idx.clone()
    targets[:, :4] = -100
    _, loss = model(idx, targets)
    logits, _ = model(idx)
    ref = torch.nn.functional.cross_entropy(logits[0, 4:], idx[0, 4:])
    torch.testing.assert_close(loss, ref)
    with pytest.raises(ValueError, match="targets"):
        model(idx, idx[:, :3])


def test_from_dict_names_the_renamed_fields():
    with pytest.raises(ValueError, match="n_head is now n_heads"):
        GPTConfig.from_dict({"n_head": 4, "n_layers": 2})
