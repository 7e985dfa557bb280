"""FastGPT is the capstone GPT computed faster: same state dict, same function.

:class:`toolkit.models.GPT` is the readable model (teaching layers only);
:class:`toolkit.models.FastGPT` swaps every layer for its fused twin. Both recipes: the
state dicts agree key for key and shape for shape, one seed gives both the same weights,
logits, losses and gradients agree to float rounding (float64 and float32), cached
decoding agrees, and a checkpoint trained with one model loads into the other.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from toolkit.models import GPT, CausalSelfAttention, FastCausalSelfAttention, FastGPT, GPTConfig
from toolkit.models import gpt as gpt_module
from toolkit.models.fused import FusedFeedForward, FusedLayerNorm, FusedRMSNorm, FusedSwiGLU
from toolkit.train import configure_optimizer, load_checkpoint, save_checkpoint

CONFIGS = {
    "classic": GPTConfig.classic(vocab_size=48, d_model=32, n_layers=2, n_heads=4,
                                 max_seq_len=24),
    "modern": GPTConfig.modern(vocab_size=48, d_model=32, n_layers=2, n_heads=4,
                               n_kv_heads=2, max_seq_len=24),
    "modern-interleaved": GPTConfig.modern(vocab_size=48, d_model=32, n_layers=1, n_heads=4,
                                           n_kv_heads=1, max_seq_len=24,
                                           rope_layout="interleaved"),
    "post-norm": GPTConfig.classic(vocab_size=48, d_model=32, n_layers=1, n_heads=4,
                                   max_seq_len=24, norm_placement="post"),
}


def pair(name: str, dtype=torch.float64, seed: int = 0) -> tuple[GPT, FastGPT]:
    """``(GPT, FastGPT)`` with one set of weights, changed from the initialisation so that
    every path matters (no unit gains, no zero biases)."""
    torch.manual_seed(seed)
    teaching = GPT(CONFIGS[name]).to(dtype)
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for p in teaching.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=dtype))
    fast = FastGPT(CONFIGS[name]).to(dtype)
    fast.load_state_dict(teaching.state_dict())
    return teaching, fast


def tokens(B: int, T: int, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, 48, (B, T), generator=torch.Generator().manual_seed(seed))


def grads_by_name(model: GPT) -> dict[str, torch.Tensor]:
    """Parameter gradients in the state dict's names and layout (the fast attention's
    joint QKV gradient split into q_proj, k_proj, v_proj)."""
    grads = {}
    for name, module in model.named_modules():
        if isinstance(module, FastCausalSelfAttention):
            for kind in ("weight", "bias"):
                p = getattr(module.qkv_proj, kind)
                if p is not None:
                    for proj, part in zip(("q_proj", "k_proj", "v_proj"), module.split_qkv(p.grad)):
                        grads[f"{name}.{proj}.{kind}"] = part
    for name, p in model.named_parameters():
        if ".qkv_proj." not in name:
            grads[name] = p.grad
    return grads


def test_gpt_reads_top_to_bottom_without_the_fast_paths():
    """The teaching module imports no fused layer, and GPT builds only teaching layers,
    whatever attention_backend says."""
    source = inspect.getsource(gpt_module)
    for fast in ("fused", "Fused", "fast_attention", "backends", "FastCausalSelfAttention"):
        assert fast not in source.split('"""', 2)[2], fast  # below the module docstring
    for backend in ("auto", "sdpa", "reference"):
        model = GPT(GPTConfig.modern(attention_backend=backend, n_layers=1))
        assert type(model.blocks[0].attn) is CausalSelfAttention
        fused = (FusedLayerNorm, FusedRMSNorm, FusedFeedForward, FusedSwiGLU,
                 FastCausalSelfAttention)
        assert not any(isinstance(m, fused) for m in model.modules())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fast_gpt_builds_the_fast_twins(name):
    config = CONFIGS[name]
    fast = FastGPT(config)
    block = fast.blocks[0]
    norm = FusedLayerNorm if config.norm_type == "layernorm" else FusedRMSNorm
    mlp = FusedSwiGLU if config.mlp_type == "swiglu" else FusedFeedForward
    assert type(block.ln_1) is norm and type(block.ln_2) is norm
    assert type(block.mlp) is mlp and type(block.attn) is FastCausalSelfAttention
    if config.norm_placement == "pre":
        assert type(fast.ln_f) is norm
    assert fast.lm_head.weight is fast.wte.weight  # still tied


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_dicts_agree_key_for_key_and_shape_for_shape(name):
    teaching, fast = GPT(CONFIGS[name]), FastGPT(CONFIGS[name])
    want, got = teaching.state_dict(), fast.state_dict()
    assert list(got) == list(want)
    assert {k: v.shape for k, v in got.items()} == {k: v.shape for k, v in want.items()}


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_one_seed_gives_both_models_the_same_weights(name):
    states, after = [], []
    for model_class in (GPT, FastGPT):
        torch.manual_seed(0)
        states.append(model_class(CONFIGS[name]).state_dict())
        after.append(torch.rand(3))  # the generator is left in the same state
    for key, value in states[0].items():
        assert torch.equal(states[1][key], value), key
    assert torch.equal(after[0], after[1])


@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-10), (torch.float32, 2e-5)])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_logits_loss_and_gradients_agree(name, dtype, tol):
    teaching, fast = pair(name, dtype)
    idx, targets = tokens(3, 20), tokens(3, 20, seed=3)
    targets[0, :4] = -100  # ignored targets too
    results = []
    for model in (teaching, fast):
        model.zero_grad()
        logits, loss = model(idx, targets)
        loss.backward()
        results.append((logits.detach(), loss.detach(), grads_by_name(model)))
    (want_logits, want_loss, want_grads), (logits, loss, grads) = results
    torch.testing.assert_close(logits, want_logits, atol=tol, rtol=tol)
    torch.testing.assert_close(loss, want_loss, atol=tol, rtol=tol)
    assert grads.keys() == want_grads.keys()
    for key in want_grads:
        torch.testing.assert_close(grads[key], want_grads[key], atol=tol, rtol=5 * tol, msg=key)


@pytest.mark.parametrize("name", ["classic", "modern"])
def test_cached_decoding_agrees_with_the_teaching_model(name):
    """Prefill 6 tokens, a 3-token chunk, then one token per step, on both models: the
    teaching model's full pass, to float64 rounding."""
    teaching, fast = (m.eval() for m in pair(name))
    idx = tokens(2, 14)
    with torch.no_grad():
        full, _ = teaching(idx)
        cache = fast.new_cache()
        parts = [fast(idx[:, :6], cache=cache)[0], fast(idx[:, 6:9], cache=cache, start_pos=6)[0]]
        parts += [fast(idx[:, t:t + 1], cache=cache, start_pos=t)[0] for t in range(9, 14)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=1e-10, rtol=1e-10)


def _train(model: GPT, steps: int = 5) -> GPT:
    optimizer = configure_optimizer(model, 3e-3, weight_decay=0.1)
    for step in range(steps):
        _, loss = model(tokens(4, 16, seed=10 + step), tokens(4, 16, seed=20 + step))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.mark.parametrize("trained_with", ["GPT", "FastGPT"])
@pytest.mark.parametrize("name", ["classic", "modern"])
def test_a_checkpoint_of_one_loads_into_the_other(name, trained_with, tmp_path):
    """Trained a few steps with one class, saved with save_checkpoint: the other class
    loads it strictly and computes the same logits; load_checkpoint gives a FastGPT."""
    model_class, other_class = (GPT, FastGPT) if trained_with == "GPT" else (FastGPT, GPT)
    torch.manual_seed(0)
    trained = _train(model_class(CONFIGS[name]))
    path = tmp_path / "model.safetensors"
    save_checkpoint(trained, CONFIGS[name], path)
    other = other_class(CONFIGS[name])
    other.load_state_dict(trained.state_dict())  # strict: every key, every shape
    loaded = load_checkpoint(path)
    assert type(loaded) is FastGPT
    idx = tokens(2, 16, seed=5)
    with torch.no_grad():
        want = trained(idx)[0]
        for model in (other.eval(), loaded):
            torch.testing.assert_close(model(idx)[0], want, atol=2e-5, rtol=2e-5)


def test_training_steps_agree():
    """Five AdamW steps from one seed on each model: the same weights after, to float32
    rounding (the gradients agree at every step)."""
    models = []
    for model_class in (GPT, FastGPT):
        torch.manual_seed(0)
        models.append(_train(model_class(CONFIGS["modern"]).train()))
    want, got = (m.state_dict() for m in models)
    for key, value in want.items():
        torch.testing.assert_close(got[key], value, atol=1e-5, rtol=1e-4, msg=key)
