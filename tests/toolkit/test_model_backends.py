"""FastGPT's attention backends compute one function (Triton in the interpreter).

:class:`FastGPT` on ``reference``, ``sdpa``, ``blocked`` and ``triton`` and the teaching
:class:`GPT` with the same weights give the same logits, loss and parameter gradients to float32
rounding, for both recipes (GQA, RoPE in both layouts, biases); KV-cache decoding equals
the full pass with each; ``auto`` picks ``blocked`` only where it was measured faster and
never picks the interpreter. Set-up as
``test_triton_kernel.py``: TRITON_INTERPRET is set above every import, and a fresh
process runs the Triton cases when triton was imported too early in this one. Shapes
stay tiny (T <= 12, d_head 8) for the interpreter.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # must precede the first `import triton`

from dataclasses import replace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
from triton_harness import run_file_in_fresh_process  # noqa: E402

from toolkit.kernels import HAS_TRITON, interpreter_active  # noqa: E402
from toolkit.models import GPT, FastGPT, GPTConfig  # noqa: E402
from toolkit.models.attention import CausalSelfAttention  # noqa: E402
from toolkit.models.backends import causal_attention, resolve_backend  # noqa: E402
from toolkit.models.fast_attention import FastCausalSelfAttention  # noqa: E402

COMPILED = HAS_TRITON and torch.cuda.is_available() and not interpreter_active()
TRITON_RUNS = HAS_TRITON and (interpreter_active() or COMPILED)
DEVICE = "cuda" if COMPILED else "cpu"
_CHILD = "TOOLKIT_MODEL_BACKENDS_TEST_CHILD"
BACKENDS = ["sdpa", "blocked", "triton"] if TRITON_RUNS else ["sdpa", "blocked"]

CONFIGS = {
    "modern-gqa": GPTConfig.modern(vocab_size=40, d_model=32, n_layers=2, n_heads=4,
                                   n_kv_heads=2, max_seq_len=16),
    "modern-interleaved-bias": GPTConfig.modern(vocab_size=40, d_model=32, n_layers=1,
                                                n_heads=4, n_kv_heads=1, max_seq_len=16,
                                                rope_layout="interleaved", bias=True),
    "classic": GPTConfig.classic(vocab_size=40, d_model=32, n_layers=2, n_heads=4,
                                 max_seq_len=16),
}


@pytest.mark.skipif(TRITON_RUNS or not HAS_TRITON or bool(os.environ.get(_CHILD)),
                    reason="the Triton cases ran in-process (or there is no Triton)")
def test_triton_cases_in_a_fresh_process():
    run_file_in_fresh_process(__file__, _CHILD, "-k", "triton", timeout=600)


def build(config: GPTConfig, backend: str) -> GPT:
    """``"teaching"``: the teaching :class:`GPT`; otherwise :class:`FastGPT` on ``backend``."""
    if backend == "teaching":
        return GPT(config)
    return FastGPT(replace(config, attention_backend=backend))


def twin(config: GPTConfig, backend: str, seed: int = 0) -> GPT:
    """A model on ``backend`` (see :func:`build`) with the weights of a teaching model of
    ``seed``, changed so that every path matters (no unit gains)."""
    torch.manual_seed(seed)
    state = GPT(config).state_dict()
    g = torch.Generator().manual_seed(seed + 1)
    for key, value in state.items():
        if key != "lm_head.weight":  # tied: it is wte.weight
            value.add_(0.3 * torch.randn(value.shape, generator=g))
    model = build(config, backend)
    model.load_state_dict(state)  # the reference names and layout, whatever the backend
    return model.to(DEVICE)


def tokens(B: int, T: int, seed: int = 2) -> torch.Tensor:
    return torch.randint(0, 40, (B, T), generator=torch.Generator().manual_seed(seed)).to(DEVICE)


def reference_named(model: GPT, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Tensors keyed by parameter name, the fast layers' joint QKV ones split into the
    reference layer's ``q_proj``, ``k_proj``, ``v_proj`` (names and layout)."""
    tensors = dict(tensors)
    for name, module in model.named_modules():
        if isinstance(module, FastCausalSelfAttention):
            for kind in ("weight", "bias"):
                joint = tensors.pop(f"{name}.qkv_proj.{kind}", None)
                if joint is not None:
                    for proj, part in zip(("q_proj", "k_proj", "v_proj"), module.split_qkv(joint)):
                        tensors[f"{name}.{proj}.{kind}"] = part
    return tensors


def logits_loss_grads(model: GPT, idx, targets):
    model.zero_grad()
    logits, loss = model(idx, targets)
    loss.backward()
    grads = reference_named(model, {n: p.grad for n, p in model.named_parameters()})
    return logits.detach(), loss.detach(), grads


@pytest.mark.parametrize("backend", ["reference", *BACKENDS])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_backend_matches_reference(name, backend):
    config = CONFIGS[name]
    ref, fast = twin(config, "teaching"), twin(config, backend)
    idx, targets = tokens(2, 12), tokens(2, 12, seed=3)
    want, got = logits_loss_grads(ref, idx, targets), logits_loss_grads(fast, idx, targets)
    torch.testing.assert_close(got[0], want[0], atol=2e-5, rtol=2e-5)
    torch.testing.assert_close(got[1], want[1], atol=2e-6, rtol=2e-6)
    assert got[2].keys() == want[2].keys()
    for param in want[2]:
        torch.testing.assert_close(got[2][param], want[2][param], atol=2e-5, rtol=1e-4,
                                   msg=f"gradient of {param}")


@pytest.mark.parametrize("backend", ["teaching", "reference", *BACKENDS])
@pytest.mark.parametrize("name", ["modern-gqa", "classic"])
def test_kv_cache_decoding_equals_the_full_pass(name, backend):
    """A 5-token prefill, a 3-token chunk after it (queries see the cached prefix), then
    one token per step: the logits of the full pass, with every backend."""
    model = twin(CONFIGS[name], backend).eval()
    idx = tokens(2, 12)
    with torch.no_grad():
        full, _ = model(idx)
        cache = model.new_cache()
        parts = [model(idx[:, :5], cache=cache)[0], model(idx[:, 5:8], cache=cache, start_pos=5)[0]]
        parts += [model(idx[:, t:t + 1], cache=cache, start_pos=t)[0] for t in range(8, 12)]
    torch.testing.assert_close(torch.cat(parts, dim=1), full, atol=2e-5, rtol=2e-5)
    assert cache.length == 12


def test_fast_layer_keeps_the_reference_state_dict():
    config = CONFIGS["modern-gqa"]
    assert issubclass(FastCausalSelfAttention, CausalSelfAttention)
    ref, fast = GPT(config), FastGPT(replace(config, attention_backend="sdpa"))
    assert type(ref.blocks[0].attn) is CausalSelfAttention
    assert type(fast.blocks[0].attn) is FastCausalSelfAttention
    # the same names in the same order, whatever the fast layer stores
    assert list(fast.state_dict()) == list(ref.state_dict())


def test_fast_layer_stores_one_qkv_matrix():
    """q, k, v are one layer, so no step joins three parameters (the CPU speed depends on it)."""
    config = CONFIGS["classic"]
    attn = FastGPT(replace(config, attention_backend="sdpa")).blocks[0].attn
    names = [name for name, _ in attn.named_parameters()]
    assert names == ["qkv_proj.weight", "qkv_proj.bias", "o_proj.weight", "o_proj.bias"]
    assert attn.qkv_proj.weight.shape == (3 * config.d_model, config.d_model)
    with pytest.raises(AttributeError, match=r"k_proj.*qkv_proj.*state_dict.*GPT"):
        attn.k_proj  # noqa: B018 - what a reader of the teaching layer would try


@pytest.mark.parametrize("backend", ["reference", "sdpa"])
@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_one_seed_gives_every_backend_the_same_weights(name, backend):
    """FastGPT initialises the teaching model and moves its tensors into the fast layers:
    from one seed, GPT's weights bit for bit, and the generator left in the same state."""
    states, after = [], []
    for model_backend in ("teaching", backend):
        torch.manual_seed(0)
        states.append(build(CONFIGS[name], model_backend).state_dict())
        after.append(torch.rand(4))
    ref, fast = states
    assert list(fast) == list(ref)
    for key, value in ref.items():
        assert torch.equal(fast[key], value), key
    assert torch.equal(after[0], after[1])


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_state_dict_moves_between_backends(name):
    """reference -> sdpa -> reference returns every tensor bit for bit (RoPE's row order
    undone), and the fast model loaded from it computes the reference's logits."""
    ref = twin(CONFIGS[name], "teaching", seed=3)
    fast = build(CONFIGS[name], "sdpa").to(DEVICE)
    fast.load_state_dict(ref.state_dict())
    back = GPT(CONFIGS[name]).to(DEVICE)
    back.load_state_dict(fast.state_dict())
    for key, value in ref.state_dict().items():
        assert torch.equal(back.state_dict()[key], value), key
    idx = tokens(2, 10)
    torch.testing.assert_close(fast(idx)[0], ref(idx)[0], atol=2e-5, rtol=2e-5)


def test_fast_state_dict_goes_through_safetensors(tmp_path):
    """The split q, k, v are disjoint views of one parameter, which safetensors saves (it
    refuses only tensors that overlap, such as a tied head), and a reference model loads."""
    from safetensors.torch import load_file, save_file

    fast = twin(CONFIGS["classic"], "sdpa")
    state = {k: v for k, v in fast.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(tmp_path / "model.safetensors"))
    loaded = load_file(str(tmp_path / "model.safetensors"))
    ref = GPT(CONFIGS["classic"]).to(DEVICE)
    ref.load_state_dict(loaded, strict=False)
    idx = tokens(1, 8)
    torch.testing.assert_close(ref(idx)[0], fast(idx)[0], atol=2e-5, rtol=2e-5)


def test_loading_a_partial_qkv_names_the_layer_and_the_missing_key():
    fast = build(CONFIGS["classic"], "sdpa")
    state = fast.state_dict()
    del state["blocks.1.attn.k_proj.weight"]
    named = r"blocks\.1\.attn: .*lacks blocks\.1\.attn\.k_proj\.weight"
    with pytest.raises(RuntimeError, match=named) as err:
        fast.load_state_dict(state)
    # the same missing key as the reference layer would report, and nothing "unexpected"
    assert 'Missing key(s) in state_dict: "blocks.1.attn.k_proj.weight".' in str(err.value)
    assert "Unexpected" not in str(err.value)


def test_missing_qkv_is_reported_by_its_reference_names():
    fast = build(CONFIGS["classic"], "sdpa")
    state = {k: v for k, v in fast.state_dict().items() if ".attn.q_proj." not in k
             and ".attn.k_proj." not in k and ".attn.v_proj." not in k}
    missing, unexpected = fast.load_state_dict(state, strict=False)
    ref = GPT(CONFIGS["classic"])
    want = ref.load_state_dict(state, strict=False)
    assert (missing, unexpected) == (want.missing_keys, want.unexpected_keys)
    assert "blocks.0.attn.v_proj.bias" in missing


@pytest.mark.parametrize("backend", BACKENDS)
def test_attention_alignment_is_bottom_right(backend):
    """Four queries after eight cached keys: query i sees keys j <= 4 + i, as the reference."""
    g = torch.Generator().manual_seed(4)
    q = torch.randn(1, 4, 4, 16, generator=g).to(DEVICE)
    k, v = (torch.randn(1, 2, 8, 16, generator=g).to(DEVICE) for _ in range(2))
    torch.testing.assert_close(causal_attention(q, k, v, backend),
                               causal_attention(q, k, v, "reference"), atol=1e-5, rtol=1e-5)


def test_auto_picks_the_measured_fastest_backend():
    # On a CPU, blocked for a full causal pass of 128 (GQA) or 256 (MHA) to 1024 positions
    # in float32/64 (faster than PyTorch's kernel there, benchmarks/attention.py
    # --cpu-backends); sdpa elsewhere. The interpreter is correct but slow; on an H100
    # sdpa trained the capstone faster.
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    for T in (128, 300, 1024):
        for dtype in (torch.float32, torch.float64):
            assert resolve_backend("auto", cpu, dtype, T, T, group=2) == "blocked"
    assert resolve_backend("auto", cpu, torch.float32, 256, 256, group=1) == "blocked"
    assert resolve_backend("auto", cpu, torch.float32, 128, 128, group=1) == "sdpa"  # MHA
    assert resolve_backend("auto", cpu, torch.float32, 64, 64, group=2) == "sdpa"  # shorter
    assert resolve_backend("auto", cpu, torch.float32, 2048, 2048, group=2) == "sdpa"  # T^2
    assert resolve_backend("auto", cpu, torch.float32, 1, 128, group=2) == "sdpa"  # decoding
    assert resolve_backend("auto", cpu, torch.float32, 100, 228, group=2) == "sdpa"  # cached
    assert resolve_backend("auto", cpu, torch.bfloat16, 128, 128, group=2) == "sdpa"
    assert resolve_backend("auto", cpu, torch.float32) == "sdpa"  # shape unknown
    assert resolve_backend("auto", cuda, torch.bfloat16, 128, 128, group=2) == "sdpa"
    for name in ("reference", "sdpa", "blocked", "triton"):
        assert resolve_backend(name, cpu, torch.float32, 128, 128) == name
    assert GPTConfig().attention_backend == "auto"


def test_auto_reaches_blocked_through_the_model():
    """A modern FastGPT (2 KV heads) training on 128 positions on a CPU runs the blocked
    Function; at 64 positions it does not."""
    from toolkit.models.blocked_attention import _BlockedCausalAttention

    config = GPTConfig.modern(vocab_size=40, d_model=32, n_layers=1, n_heads=4, n_kv_heads=2,
                              max_seq_len=128)
    model = FastGPT(config)
    for T, uses_blocked in ((128, True), (64, False)):
        _, loss = model(tokens(1, T), tokens(1, T, seed=3))
        seen, todo = {}, [loss.grad_fn]  # the backward graph's nodes, by id
        while todo:
            fn = todo.pop()
            if fn is not None and id(fn) not in seen:
                seen[id(fn)] = type(fn).__name__
                todo.extend(next_fn for next_fn, _ in fn.next_functions)
        assert (f"{_BlockedCausalAttention.__name__}Backward" in seen.values()) == uses_blocked, T


def test_bad_backend_names_the_field():
    with pytest.raises(ValueError, match="attention_backend"):
        GPTConfig.modern(attention_backend="flash")
    with pytest.raises(ValueError, match="attention_backend"):
        resolve_backend("fast", torch.device("cpu"), torch.float32)


@pytest.mark.skipif(not TRITON_RUNS, reason="needs Triton (interpreter or GPU)")
def test_triton_backend_refuses_float64_with_a_hint():
    model = twin(CONFIGS["classic"], "triton").double()
    with pytest.raises(ValueError, match="float64"):
        model(tokens(1, 4))


def test_rope_table_made_in_inference_mode_serves_training():
    model = twin(CONFIGS["modern-gqa"], "sdpa")
    with torch.inference_mode():
        model(tokens(1, 4))
    _, loss = model(tokens(1, 6), tokens(1, 6, seed=5))
    loss.backward()  # would fail on an inference tensor saved for backward
