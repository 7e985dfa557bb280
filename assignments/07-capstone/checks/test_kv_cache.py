"""Hidden checks for Exercise 1: ``StaticKVCache.update``.

The student's cache runs a sequence of writes in their kernel (prefill, single-token
appends, a second layer, a rewind); :class:`toolkit.models.StaticKVCache` runs the same
sequence here. Returned tensors are cloned in the kernel right away, so a cache that
returns views of its buffers is compared at the moment it answered.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal, expect_tensor
from toolkit.models import StaticKVCache

pytestmark = pytest.mark.grade_cell("test_kv_cache")

WRITE = "KV cache written at the wrong position"

RUN_OPS = """
cache = StaticKVCache(inputs["n_layers"], inputs["max_seq_len"])
result = []
for layer, k, v, start in inputs["ops"]:
    keys, values = cache.update(layer, k, v, start)
    result.append((keys.clone(), values.clone()))
"""


def _randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def _ops(spec, B=2, H=3, D=4, seed=0):
    """``[(layer, k, v, start_pos)]`` from ``[(layer, T, start_pos)]``."""
    return [(layer, _randn(B, H, T, D, seed=seed + 2 * i),
             _randn(B, H, T, D, seed=seed + 2 * i + 1), start)
            for i, (layer, T, start) in enumerate(spec)]


def _reference(ops, n_layers, max_seq_len):
    cache = StaticKVCache(n_layers, max_seq_len)
    return [tuple(t.clone() for t in cache.update(*op)) for op in ops]


def _compare(submission, spec, n_layers=2, max_seq_len=12, seed=0, hint=""):
    ops = _ops(spec, seed=seed)
    got = submission.run(RUN_OPS, n_layers=n_layers, max_seq_len=max_seq_len, ops=ops)
    expected = _reference(ops, n_layers, max_seq_len)
    if not isinstance(got, tuple) or len(got) != len(expected):
        raise CheckFailure("could not read the results of StaticKVCache.update")
    for i, ((k, v), (ek, ev), (layer, T, start)) in enumerate(zip(got, expected, spec)):
        what = f"update #{i + 1} (layer {layer}, {T} position(s) at start_pos={start})"
        for got_t, exp_t, name in ((k, ek, "keys"), (v, ev, "values")):
            expect_tensor(got_t, name=f"{name} returned by {what}")
            if tuple(got_t.shape) != tuple(exp_t.shape):
                raise CheckFailure(
                    f"{what} returned {name} of shape {tuple(got_t.shape)}, expected "
                    f"{tuple(exp_t.shape)}: all positions 0 .. start_pos + T - 1")
            assert_equal(got_t.to(exp_t.dtype), exp_t, name=f"{name} returned by {what}", hint=hint)


@pytest.mark.weight(2)
@pytest.mark.pitfall(WRITE)
def test_prefill_then_single_tokens(submission):
    """A 5-position prefill then three single positions: each call returns every stored position."""
    _compare(submission, [(0, 5, 0), (0, 1, 5), (0, 1, 6), (0, 1, 7)], seed=10,
             hint="write k at positions start_pos .. start_pos + T - 1 and return the buffer "
                  "up to start_pos + T")


@pytest.mark.pitfall(WRITE)
def test_layers_are_separate(submission):
    """Each layer has its own buffers: writing layer 1 leaves layer 0 untouched."""
    _compare(submission, [(0, 4, 0), (1, 3, 0), (0, 2, 4), (1, 2, 3)], seed=20,
             hint="keep one pair of buffers per layer (self.keys[layer], self.values[layer])")


@pytest.mark.pitfall(WRITE)
def test_chunks_and_rewind(submission):
    """Chunks of several positions, and a write at an earlier start_pos that overwrites."""
    _compare(submission, [(0, 3, 0), (0, 4, 3), (0, 2, 2), (0, 5, 4)], seed=30,
             hint="a write at start_pos overwrites positions start_pos.. and returns "
                  "positions 0 .. start_pos + T - 1, whatever was stored after them")


@pytest.mark.structural
def test_buffers_preallocated(submission):
    """Buffers are (B, H_kv, max_seq_len, D), in the dtype of the keys, allocated on first write."""
    code = """
cache = StaticKVCache(2, 9)
k = torch.zeros(2, 3, 4, 5, dtype=torch.float64)
cache.update(0, k, k.clone(), 0)
result = ([int(s) for s in cache.keys[0].shape], [int(s) for s in cache.values[0].shape],
          str(cache.keys[0].dtype), cache.keys[1] is None)
"""
    got = submission.run(code)
    if not isinstance(got, tuple) or len(got) != 4:
        raise CheckFailure("could not read the cache's buffers")
    if list(got[0]) != [2, 3, 9, 5] or list(got[1]) != [2, 3, 9, 5]:
        raise CheckFailure(f"the buffers have shapes {got[0]} and {got[1]}, expected "
                           "(B, H_kv, max_seq_len, D) = (2, 3, 9, 5)")
    if got[2] != "torch.float64":
        raise CheckFailure(f"the buffers have dtype {got[2]}: use the dtype of k")
    if got[3] is not True:
        raise CheckFailure("writing layer 0 should not allocate layer 1's buffers")


@pytest.mark.structural
def test_other_batch_size_raises(submission):
    """A cache that holds a batch of 2 refuses a batch of 3 with ValueError."""
    code = """
cache = StaticKVCache(1, 8)
cache.update(0, torch.zeros(2, 1, 2, 4), torch.zeros(2, 1, 2, 4), 0)
try:
    cache.update(0, torch.zeros(3, 1, 1, 4), torch.zeros(3, 1, 1, 4), 2)
    result = "no error"
except ValueError:
    result = "ValueError"
except NotImplementedError:
    raise  # not written yet: the student reads that, not "expected ValueError"
except Exception as exc:
    result = type(exc).__name__
"""
    got = submission.run(code)
    if got != "ValueError":
        raise CheckFailure(f"a batch of 3 written into a cache of batch 2 gave {got!r}, "
                           "expected ValueError")
