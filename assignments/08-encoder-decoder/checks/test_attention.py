"""Hidden checks for Exercise 3: ``T5Attention.forward``.

The student's layer gets the weights of :class:`toolkit.seq2seq.T5Attention` (float64) and
is compared with it: self-attention with a bias and a mask, cross-attention over a memory
with a padding mask, a self-attention cache fed one token at a time, and a cross-attention
cache that is filled once and then read (a spy counts the key projections).
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close
from toolkit.masks import causal_mask
from toolkit.seq2seq import EncDecCache, EncDecConfig, T5Attention

pytestmark = pytest.mark.grade_cell("test_attention")

CONFIG = EncDecConfig(vocab_size=20, d_model=16, n_heads=4, d_head=6, d_ff=32)

RUN = """
from toolkit.seq2seq import EncDecCache as _Cache, EncDecConfig as _Config

_layer = T5Attention(_Config.from_dict(inputs["config"]), cross=inputs["cross"]).double()
_load_exercise_state(_layer, inputs["state"])
_calls = []
_layer.k_proj.register_forward_hook(lambda *_: _calls.append(1))
_cache = _Cache(2) if inputs["cached"] else None
_outs = []
for _x, _bias, _mask in inputs["steps"]:
    _outs.append(_layer(_x, inputs["memory"], bias=_bias, mask=_mask, cache=_cache, layer=1))
result = (torch.cat(_outs, dim=1), len(_calls))
"""


def _reference(cross: bool, seed: int):
    torch.manual_seed(seed)
    layer = T5Attention(CONFIG, cross=cross).double()
    return layer, {k: v.detach().clone() for k, v in layer.state_dict().items()}


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _run(submission, cross, state, steps, memory=None, cached=False):
    got = submission.run(RUN, config=CONFIG.to_dict(), cross=cross, state=state, steps=steps,
                         memory=memory, cached=cached)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("could not read T5Attention's output")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall("Position bias added after the softmax")
def test_self_attention_with_bias(submission):
    """Self-attention: softmax(q k^T + bias), masked, times v, without 1/sqrt(d_head)."""
    ref, state = _reference(False, 1)
    x, bias = _randn(2, 7, 16, seed=2), 2 * _randn(1, 4, 7, 7, seed=3)
    mask = causal_mask(7, 7)
    got, _ = _run(submission, False, state, [(x, bias, mask)])
    assert_close(got, ref(x, bias=bias, mask=mask), atol=1e-9, rtol=1e-7,
                 hint="scores = q k^T (no 1/sqrt(d_head) in T5), + bias before the softmax, "
                      "then masked_fill(~mask, -inf), softmax over the keys")


@pytest.mark.weight(2)
@pytest.mark.pitfall("Cross-attention keys and values taken from the decoder")
def test_cross_attention(submission):
    """Cross-attention: queries from x, keys and values from memory, the source padding masked."""
    ref, state = _reference(True, 4)
    x, memory = _randn(2, 5, 16, seed=5), _randn(2, 9, 16, seed=6)
    mask = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    mask[1, ..., 6:] = False
    got, _ = _run(submission, True, state, [(x, None, mask)], memory=memory)
    assert_close(got, ref(x, memory, mask=mask), atol=1e-9, rtol=1e-7,
                 hint="with cross=True, project memory (not x) to keys and values")


@pytest.mark.weight(2)
@pytest.mark.pitfall("Self-attention cache not appended or not read")
def test_self_attention_cache(submission):
    """Self-attention with a cache, fed 3 positions then one at a time, equals one full call."""
    ref, state = _reference(False, 7)
    x, bias = _randn(2, 6, 16, seed=8), _randn(1, 4, 6, 6, seed=9)
    mask = causal_mask(6, 6)
    steps = [(x[:, :3], bias[:, :, :3, :3], mask[:3, :3])]
    steps += [(x[:, t : t + 1], bias[:, :, t : t + 1, : t + 1], mask[t : t + 1, : t + 1])
              for t in range(3, 6)]
    got, _ = _run(submission, False, state, steps, cached=True)
    assert_close(got, ref(x, bias=bias, mask=mask), atol=1e-9, rtol=1e-7,
                 hint="append this call's keys and values with cache.update(layer, k, v) and "
                      "attend over everything it returns")


@pytest.mark.pitfall("Cross-attention keys and values projected at every step")
def test_cross_attention_cache(submission):
    """Cross-attention with a cache projects memory once, then reads the cache."""
    ref, state = _reference(True, 10)
    x, memory = _randn(2, 4, 16, seed=11), _randn(2, 7, 16, seed=12)
    mask = torch.ones(2, 1, 1, 7, dtype=torch.bool)
    mask[0, ..., 5:] = False
    steps = [(x[:, t : t + 1], None, mask) for t in range(4)]
    got, k_calls = _run(submission, True, state, steps, memory=memory, cached=True)
    assert_close(got, ref(x, memory, mask=mask), atol=1e-9, rtol=1e-7,
                 hint="the first call projects memory and stores it with cache.update(..., "
                      "cross=True); later calls read cache.cross_keys[layer] and cross_values")
    if k_calls != 1:
        raise CheckFailure(f"over 4 decoding steps k_proj ran {k_calls} times; with a cache, "
                           "cross-attention projects the memory once (cache.has_cross(layer))")
