"""Hidden checks for Exercise 2: ``CausalSelfAttention.forward``.

The student's layer gets the weights of :class:`toolkit.models.CausalSelfAttention`
(float64) and is compared with it on full sequences (modern and classic recipes, both
RoPE layouts), probed for causality, and run with a cache. The cache in these checks is
a minimal one written here (in the checker's code), so a bug in the student's
``StaticKVCache`` costs points in Exercise 1, not here.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.models import CausalSelfAttention, GPTConfig

pytestmark = pytest.mark.grade_cell("test_attention")

LEAK = "Causal mask missing (future leaks)"
ROPE = "RoPE applied at position 0 for every new token"
NAMES = "Parameter names differ from the specification"
TOL = dict(atol=1e-9, rtol=1e-7)

# Runs in the student's kernel: build their layer with our weights, then run `calls`,
# each (x, positions, start_pos, use_cache), in order, sharing one cache.
RUN = """
import torch as _torch
from toolkit.models import GPTConfig as _GPTConfig


class _Cache:
    def __init__(self):
        self.k = self.v = None
        self.length = 0  # as in StaticKVCache: positions filled before this forward pass

    def update(self, layer, k, v, start_pos):
        if self.k is None:
            self.k, self.v = k, v
        else:
            self.k = _torch.cat([self.k[:, :, :start_pos], k], dim=2)
            self.v = _torch.cat([self.v[:, :, :start_pos], v], dim=2)
        return self.k, self.v


_layer = CausalSelfAttention(_GPTConfig.from_dict(inputs["config"]), 0).double()
_load_exercise_state(_layer, inputs["state"])
_layer.eval()
_cache = _Cache()
result = []
with _torch.no_grad():
    for _x, _positions, _start, _use_cache in inputs["calls"]:
        _cache.length = _start  # GPT.forward advances it after its blocks
        result.append(_layer(_x, _positions, _cache if _use_cache else None, _start))
"""


def _randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return scale * torch.randn(*shape, generator=g, dtype=torch.float64)


def _config(recipe="modern", **kw) -> GPTConfig:
    # The toolkit's teaching path is the oracle (the fast backends compute the same
    # function with other operations; the student writes the teaching one).
    base = dict(vocab_size=64, d_model=32, n_layers=1, n_heads=4, max_seq_len=32,
                attention_backend="reference")
    base.update(kw)
    return GPTConfig.modern(**base) if recipe == "modern" else GPTConfig.classic(**base)


def _reference(config: GPTConfig, seed: int) -> CausalSelfAttention:
    torch.manual_seed(seed)
    layer = CausalSelfAttention(config, 0).double().eval()
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    return layer


def _state(layer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in layer.state_dict().items()}


def _run(submission, config, ref, calls) -> list[torch.Tensor]:
    got = submission.run(RUN, config=config.to_dict(), state=_state(ref), calls=calls)
    if not isinstance(got, tuple) or len(got) != len(calls):
        raise CheckFailure("could not read the outputs of your CausalSelfAttention")
    for out, (x, *_rest) in zip(got, calls):
        expect_tensor(out, shape=x.shape, name="CausalSelfAttention output")
    return [t.to(torch.float64) for t in got]


def _full(submission, config, ref, x) -> torch.Tensor:
    positions = torch.arange(x.size(1))
    return _run(submission, config, ref, [(x, positions, 0, False)])[0]


def _expected(ref, x, positions=None, **kw) -> torch.Tensor:
    with torch.no_grad():
        return ref(x, torch.arange(x.size(1)) if positions is None else positions, **kw)


def _check_full(submission, config, seed, hint):
    ref = _reference(config, seed)
    x = _randn(2, 9, config.d_model, seed=seed + 1)
    got = _full(submission, config, ref, x)
    expected = _expected(ref, x)
    if not torch.allclose(got, expected, **TOL) and torch.allclose(got[:, -1], expected[:, -1],
                                                                  **TOL):
        raise CheckFailure("only the last position is right: the earlier positions see tokens "
                           "after them. Apply causal_mask(T, T_k, offset=T_k - T)")
    assert_close(got, expected, **TOL, name="CausalSelfAttention output", hint=hint)


@pytest.mark.weight(2)
@pytest.mark.pitfall(LEAK)
def test_modern_full_pass(submission):
    """Modern recipe (RoPE, 4 query heads on 2 KV heads): output equals the reference."""
    _check_full(submission, _config("modern", n_kv_heads=2), seed=1,
                hint="rotate q and k with apply_rope(..., positions, base=config.rope_base, "
                     "layout=config.rope_layout), repeat_kv(k, n_rep), causal mask, o_proj")


def test_classic_full_pass(submission):
    """Classic recipe (no RoPE, one KV head per query head, biases): output equals the reference."""
    _check_full(submission, _config("classic"), seed=2,
                hint="with position_type 'learned' there is no rotation inside attention")


def test_rope_settings_respected(submission):
    """RoPE follows config.rope_base and config.rope_layout (interleaved), with one KV head."""
    _check_full(submission, _config("modern", n_kv_heads=1, rope_base=500.0,
                                    rope_layout="interleaved"), seed=3,
                hint="pass base=config.rope_base and layout=config.rope_layout to apply_rope")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LEAK)
@pytest.mark.property
def test_no_future_leak(submission):
    """Changing the inputs at positions >= t never changes the outputs before t."""
    config = _config("modern", n_kv_heads=2)
    ref = _reference(config, 4)
    x = _randn(2, 8, config.d_model, seed=5)
    calls = [(x, torch.arange(8), 0, False)]
    for t in (1, 4, 7):
        moved = x.clone()
        moved[:, t:] += _randn(2, 8 - t, config.d_model, seed=6 + t)
        calls.append((moved, torch.arange(8), 0, False))
    base, *others = _run(submission, config, ref, calls)
    for t, out in zip((1, 4, 7), others):
        if not torch.allclose(out[:, :t], base[:, :t], atol=1e-9):
            raise CheckFailure(
                f"changing the inputs from position {t} on changed the outputs at positions "
                f"before {t}: the future leaks. Query i may only see keys j <= i")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ROPE)
def test_cached_calls_match_full_pass(submission):
    """Prefill 3 tokens, a chunk of 3, then single tokens with a cache = one full pass."""
    config = _config("modern", n_kv_heads=2)
    ref = _reference(config, 7)
    x = _randn(2, 9, config.d_model, seed=8)
    spans = [(0, 3), (3, 6), (6, 7), (7, 8), (8, 9)]
    calls = [(x[:, a:b], torch.arange(a, b), a, True) for a, b in spans]
    got = torch.cat(_run(submission, config, ref, calls), dim=1)
    expected = _expected(ref, x)
    if not torch.allclose(got, expected, **TOL):
        zero = torch.cat([_expected(ref, x[:, :3])]
                         + [_expected(ref, x[:, a:b]) for a, b in spans[1:]], dim=1)
        if torch.allclose(got[:, 3:], zero[:, 3:], atol=1e-6):
            raise CheckFailure("with a cache, the new tokens ignore the cached keys and values: "
                               "use the k, v that cache.update(...) returns")
    assert_close(got, expected, **TOL, name="cached CausalSelfAttention outputs",
                 hint="rotate q and k at the absolute `positions` given (not 0..T-1), write "
                      "the cache at start_pos, and mask with causal_mask(T, T_k, offset=T_k - T)")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names(submission):
    """q_proj, k_proj, v_proj, o_proj with the specified shapes (GQA: smaller k_proj, v_proj)."""
    config = _config("modern", n_kv_heads=2)
    code = """
from toolkit.models import GPTConfig as _GPTConfig
_layer = CausalSelfAttention(_GPTConfig.from_dict(inputs["config"]), 0)
result = {k: [int(s) for s in v.shape] for k, v in _layer.state_dict().items()}
"""
    got = submission.run(code, config=config.to_dict())
    expected = {k: list(v.shape) for k, v in CausalSelfAttention(config, 0).state_dict().items()}
    if not isinstance(got, dict) or {k: list(v) for k, v in got.items()} != expected:
        raise CheckFailure(f"parameters {got} differ from the specification {expected}")
