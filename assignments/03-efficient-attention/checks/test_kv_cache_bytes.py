"""Hidden checks for Exercise 3: ``kv_cache_bytes``, with LLaMA-2 70B's published numbers.

LLaMA-2 70B (arXiv 2307.09288): 80 layers, 64 query heads, 8 KV heads, head size 128.
"""

from __future__ import annotations

import pytest

from autograder.protocol.checklib import CheckFailure
from toolkit.gqa import kv_cache_bytes

pytestmark = pytest.mark.grade_cell("test_kv_cache_bytes")

FACTOR2 = "KV cache counted without the factor 2 (K and V)"


def _number(value, label):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckFailure(f"{label} should be a number, got {type(value).__name__}")
    return value


def _check(submission, args, kwargs, label):
    got = _number(submission.call("kv_cache_bytes", *args, **kwargs), label)
    expected = kv_cache_bytes(*args, **kwargs)
    size = kwargs.get("bytes_per_element", 2)
    if got * 2 == expected and size == 2:  # fp16: two ways to be off by 2
        raise CheckFailure(f"{label} = {got:,}, half the expected {expected:,}: either keys and "
                           "values are not both counted (the factor 2), or bytes_per_element "
                           "(2 for fp16) is left out")
    if got * 2 == expected:
        raise CheckFailure(f"{label} = {got:,}, half the expected {expected:,}: the cache holds "
                           "keys *and* values, count both (the factor 2)")
    if size != 1 and got * size == expected:
        raise CheckFailure(f"{label} = {got:,}, expected {expected:,}: multiply by "
                           f"bytes_per_element={size} (the size of one number)")
    if abs(got - expected) > 1e-9 * max(1, abs(expected)):
        raise CheckFailure(f"{label} = {got:,}, expected {expected:,} "
                           "(2 x layers x n_kv_heads x d_head x tokens x batch x bytes)")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall(FACTOR2)
def test_llama2_70b(submission):
    """LLaMA-2 70B in fp16: 327,680 bytes per token, 1.25 GiB for 4096 tokens."""
    _check(submission, (80, 8, 128, 1), {}, "kv_cache_bytes(80, 8, 128, 1)")
    got = _check(submission, (80, 8, 128, 4096), {}, "kv_cache_bytes(80, 8, 128, 4096)")
    if got != 1_342_177_280:
        raise CheckFailure(f"LLaMA-2 70B, 4096 tokens, fp16: expected 1,342,177,280 bytes, "
                           f"got {got}")


@pytest.mark.pitfall(FACTOR2)
def test_batch_dtype_and_heads(submission):
    """Batch, bytes per element (fp32, fp8) and the number of KV heads all multiply in."""
    # fp32 first: with fp16's 2 bytes, a missing factor 2 and a missing size look alike.
    _check(submission, (32, 8, 128, 2048), {"batch": 3, "bytes_per_element": 4},
           "kv_cache_bytes(32, 8, 128, 2048, batch=3, bytes_per_element=4)")
    _check(submission, (60, 1, 64, 100), {"batch": 2, "bytes_per_element": 1},
           "MQA in fp8 (bytes_per_element=1)")
    _check(submission, (80, 64, 128, 4096), {}, "MHA with 64 KV heads")


@pytest.mark.structural
def test_int_when_whole_float_otherwise(submission):
    """Whole results come back as int; fractional ones (sub-byte elements) as float."""
    got = submission.call("kv_cache_bytes", 2, 2, 4, 8)
    if not isinstance(got, int) or isinstance(got, bool):
        raise CheckFailure(f"kv_cache_bytes(2, 2, 4, 8) returned {got!r}; return an int when the "
                           "product is a whole number: int(total) if float(total).is_integer()")
    got = _check(submission, (1, 1, 3, 1), {"bytes_per_element": 0.25},
                 "kv_cache_bytes(1, 1, 3, 1, bytes_per_element=0.25)")
    if not isinstance(got, float):
        raise CheckFailure(f"a fractional size (1.5 bytes) should stay a float, got {got!r}")
