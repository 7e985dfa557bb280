"""Hidden checks for Exercise 4: ``repeat_kv``, ``DynamicKVCache`` and ``GroupedQueryAttention``.

The student's module is loaded with the weights of :class:`toolkit.gqa.GroupedQueryAttention`
(by name: ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``) and compared with it, without and
with a KV cache. Decoding through the cache runs in the student's kernel (``submission.run``)
with the student's own ``DynamicKVCache``.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.gqa import GroupedQueryAttention, repeat_kv
from toolkit.masks import padding_mask
from toolkit.position import apply_rope

pytestmark = pytest.mark.grade_cell("test_gqa")

MODULO = "Query head h reads KV head h % n_kv_heads instead of h // group"
OFFSET = "Causal mask ignores the cache offset"
OVERWRITE = "KV cache overwritten instead of appended"
NAMES = "Parameter names differ from the specification"

D_MODEL = 16
TOL = dict(atol=2e-5, rtol=1e-4)  # float32 modules


def _randn(*shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _reference(n_heads=4, n_kv_heads=2, seed=0, bias=False) -> GroupedQueryAttention:
    torch.manual_seed(seed)
    return GroupedQueryAttention(D_MODEL, n_heads, n_kv_heads, bias=bias).eval()


def _init(ref: GroupedQueryAttention, bias=False) -> dict:
    return {"d_model": ref.d_model, "n_heads": ref.n_heads, "n_kv_heads": ref.n_kv_heads,
            "bias": bias}


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


# Prompt of `prompt` tokens, then one token at a time, through the student's DynamicKVCache.
DECODE = """
_m = GroupedQueryAttention(**inputs['init']).eval()
_m.load_state_dict(inputs['state'])
_cache = DynamicKVCache()
_x, _p = inputs['x'], inputs['prompt']
_rot = (lambda t, pos: apply_rope(t, pos)) if inputs['rope'] else None
with torch.no_grad():
    _outs = [_m(_x[:, :_p], cache=_cache, rotary=_rot)]
    _outs += [_m(_x[:, t:t + 1], cache=_cache, rotary=_rot) for t in range(_p, _x.shape[1])]
result = (torch.cat(_outs, dim=1), _cache.keys[0], _cache.values[0], _cache.length(0))
"""


def _decode(submission, ref, x, prompt, rope=False):
    got = submission.run("from toolkit.position import apply_rope\n" + DECODE, init=_init(ref),
                         state=_state(ref), x=x, prompt=prompt, rope=rope)
    if not isinstance(got, tuple) or len(got) != 4:
        raise CheckFailure("decoding through the cache did not return tensors")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall(MODULO)
def test_repeat_kv(submission):
    """repeat_kv gives output head h = KV head h // n_rep ([k0, k0, k1, k1], not tiled)."""
    x = _randn(2, 3, 5, 4, seed=1, dtype=torch.float64)
    got = expect_tensor(submission.call("repeat_kv", x, 2), name="repeat_kv(x, 2)")
    if tuple(got.shape) != (2, 6, 5, 4):
        raise CheckFailure(f"repeat_kv of a (2, 3, 5, 4) tensor with n_rep=2 has shape "
                           f"{tuple(got.shape)}, expected (2, 6, 5, 4)")
    if torch.equal(got, x.repeat(1, 2, 1, 1)):
        raise CheckFailure("your heads are tiled [k0, k1, k2, k0, k1, k2]: query head h reads KV "
                           "head h % n_kv_heads. GQA groups *consecutive* query heads: head h "
                           "reads KV head h // n_rep, i.e. [k0, k0, k1, k1, k2, k2]")
    assert_close(got, repeat_kv(x, 2), atol=0, rtol=0, name="repeat_kv(x, 2)",
                 hint="output head h must be input head h // n_rep")
    got = submission.call("repeat_kv", x[:, :1], 4)
    assert_close(got, repeat_kv(x[:, :1], 4), atol=0, rtol=0, name="repeat_kv (MQA, n_rep=4)")
    got = submission.call("repeat_kv", x, 1)
    assert_close(got, x, atol=0, rtol=0, name="repeat_kv(x, 1)", hint="n_rep=1 changes nothing")


@pytest.mark.pitfall(OVERWRITE)
def test_kv_cache_append(submission):
    """DynamicKVCache.append concatenates along time, per layer, and returns the whole history."""
    k = [_randn(2, 2, t, 4, seed=10 + t) for t in (3, 1, 2)]
    v = [_randn(2, 2, t, 4, seed=20 + t) for t in (3, 1, 2)]
    code = (
        "_c = DynamicKVCache()\n"
        "_a = _c.append(0, inputs['k0'], inputs['v0'])\n"
        "_b = _c.append(2, inputs['k1'], inputs['v1'])\n"
        "_d = _c.append(0, inputs['k2'], inputs['v2'])\n"
        "result = (_a[0], _b[0], _d[0], _d[1], _c.length(0), _c.length(2), _c.get(1) is None)\n"
    )
    got = submission.run(code, k0=k[0], v0=v[0], k1=k[1], v1=v[1], k2=k[2], v2=v[2])
    if not isinstance(got, tuple) or len(got) != 7:
        raise CheckFailure("DynamicKVCache.append should return the layer's (keys, values)")
    first, layer2, keys0, values0, len0, len2, gap = got
    assert_close(first, k[0], atol=0, rtol=0, name="the keys after the first append")
    assert_close(layer2, k[1], atol=0, rtol=0, name="layer 2's keys",
                 hint="each layer has its own cache entry")
    if isinstance(keys0, torch.Tensor) and keys0.shape == k[2].shape:
        raise CheckFailure("the second append to layer 0 returned only the new keys: concatenate "
                           "them to the cached ones (torch.cat along dim=2) instead of replacing")
    assert_close(keys0, torch.cat([k[0], k[2]], dim=2), atol=0, rtol=0,
                 name="layer 0's keys after two appends",
                 hint="torch.cat([cached, new], dim=2): old tokens first, along the time axis")
    assert_close(values0, torch.cat([v[0], v[2]], dim=2), atol=0, rtol=0,
                 name="layer 0's values after two appends")
    if (len0, len2, gap) != (5, 1, True):
        raise CheckFailure(f"after appending 3 + 2 tokens to layer 0 and 1 to layer 2, "
                           f"length(0), length(2) and get(1) is None are {len0}, {len2}, {gap}; "
                           "expected 5, 1, True (fill skipped layers with None)")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names_and_shapes(submission):
    """q_proj, k_proj, v_proj, o_proj with n_kv_heads * d_head outputs for K and V."""
    for bias in (False, True):
        ref = _reference(n_heads=4, n_kv_heads=2, bias=bias)
        state = submission.module_state("GroupedQueryAttention", init=_init(ref, bias))
        expected = {k: tuple(v.shape) for k, v in ref.state_dict().items()}
        got = {k: tuple(v.shape) for k, v in state.items()}
        if got != expected:
            raise CheckFailure(f"GroupedQueryAttention(16, 4, 2, bias={bias}) has parameters "
                               f"{got}, expected {expected}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(MODULO)
def test_forward_matches_reference(submission):
    """Full-sequence causal GQA, with and without a key-padding mask, equals the reference."""
    ref = _reference(n_heads=4, n_kv_heads=2, seed=1)
    x = _randn(2, 6, D_MODEL, seed=2)
    got = submission.module("GroupedQueryAttention", x, init=_init(ref), state=_state(ref))
    with torch.no_grad():
        expected = ref(x)
    expect_tensor(got, shape=(2, 6, D_MODEL), name="GroupedQueryAttention(x)")
    assert_close(got, expected, **TOL, name="GroupedQueryAttention(x)",
                 hint="query head h reads KV head h // (n_heads // n_kv_heads); causal mask")
    mask = padding_mask(torch.tensor([6, 4]))
    got = submission.module("GroupedQueryAttention", x, init=_init(ref), state=_state(ref),
                            mask=mask)
    with torch.no_grad():
        expected = ref(x, mask=mask)
    assert_close(got, expected, **TOL, name="GroupedQueryAttention(x, mask=padding)",
                 hint="AND the extra mask with the causal mask")


@pytest.mark.pitfall(MODULO)
def test_mqa_mha_and_non_causal(submission):
    """n_kv_heads = 1 (MQA), n_kv_heads = n_heads (MHA), and causal=False."""
    x = _randn(1, 5, D_MODEL, seed=3)
    for n_kv, causal in ((1, True), (4, True), (2, False)):
        ref = _reference(n_heads=4, n_kv_heads=n_kv, seed=4, bias=True)
        got = submission.module("GroupedQueryAttention", x, init=_init(ref, True),
                                state=_state(ref), causal=causal)
        with torch.no_grad():
            expected = ref(x, causal=causal)
        assert_close(got, expected, **TOL,
                     name=f"GroupedQueryAttention(16, 4, {n_kv}, bias=True)(x, causal={causal})")


@pytest.mark.weight(2)
@pytest.mark.pitfall(OFFSET)
def test_cached_decoding_equals_full_pass(submission):
    """A prompt, then one token at a time through the cache, equals one call on everything."""
    ref = _reference(n_heads=8, n_kv_heads=2, seed=5)
    x = _randn(2, 7, D_MODEL, seed=6)
    out, keys, values, length = _decode(submission, ref, x, prompt=3)
    with torch.no_grad():
        expected = ref(x)
    expect_tensor(out, shape=(2, 7, D_MODEL), name="the outputs decoded through the cache")
    assert_close(out, expected, **TOL, name="the outputs decoded through the cache",
                 hint="new queries sit at positions past, past + 1, ...: build the causal mask "
                      "with offset=past (the number of cached tokens) over past + T keys, and "
                      "attend over the keys and values the cache returns")
    if length != 7:
        raise CheckFailure(f"after 7 tokens the cache holds {length}")


@pytest.mark.structural
@pytest.mark.pitfall(OVERWRITE)
def test_cache_holds_only_kv_heads(submission):
    """The cache stores (B, n_kv_heads, T, d_head) keys and values: GQA's saving."""
    ref = _reference(n_heads=8, n_kv_heads=2, seed=7)
    x = _randn(1, 5, D_MODEL, seed=8)
    _, keys, values, _ = _decode(submission, ref, x, prompt=2)
    for name, t in (("keys", keys), ("values", values)):
        t = expect_tensor(t, name=f"the cached {name}")
        if tuple(t.shape) != (1, 2, 5, 2):
            raise CheckFailure(f"the cached {name} have shape {tuple(t.shape)}, expected "
                               "(B, n_kv_heads, T, d_head) = (1, 2, 5, 2): append k and v before "
                               "repeating the KV heads, and keep every token")
    with torch.no_grad():
        k_expected = ref.k_proj(x).view(1, 5, 2, 2).transpose(1, 2)
    assert_close(keys, k_expected, **TOL, name="the cached keys",
                 hint="the cache holds k_proj(x) split into n_kv_heads heads, in time order")


def test_rotary_uses_absolute_positions(submission):
    """With RoPE, cached decoding rotates each new token at its absolute position."""
    ref = _reference(n_heads=4, n_kv_heads=2, seed=9)
    x = _randn(1, 6, D_MODEL, seed=10)
    out, _, _, _ = _decode(submission, ref, x, prompt=2, rope=True)
    with torch.no_grad():
        expected = ref(x, rotary=lambda t, pos: apply_rope(t, pos))
    assert_close(out, expected, **TOL, name="cached decoding with RoPE",
                 hint="positions = torch.arange(past, past + T); rotate q and k before caching")
