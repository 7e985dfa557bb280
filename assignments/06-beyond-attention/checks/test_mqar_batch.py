"""Hidden checks for Exercise 7a: ``mqar_batch``, the multi-query associative recall batch.

Random draws differ between correct solutions, so the checks test the format's properties
on large batches: the ranges of keys and values, distinct keys, queries that are distinct
keys of the pairs in a random order followed by their values, ``targets`` at the query
keys only, draws that cover the ranges, and reproducibility through the generator.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, expect_tensor

pytestmark = pytest.mark.grade_cell("test_mqar_batch")

REUSED = "Keys reused within a sequence"
TARGETS = "Targets at the answers' positions instead of the query keys'"
B = 512


def _batch(submission, n_pairs, vocab_size, n_queries=None, seed=0):
    out = submission.call("mqar_batch", B, n_pairs, vocab_size, n_queries=n_queries, seed=seed)
    if not isinstance(out, (tuple, list)) or len(out) != 2:
        raise CheckFailure("mqar_batch should return (inputs, targets)")
    T = 2 * n_pairs + 2 * (n_pairs if n_queries is None else n_queries)
    inputs = expect_tensor(out[0], shape=(B, T), dtype=torch.int64, name="inputs")
    targets = expect_tensor(out[1], shape=(B, T), dtype=torch.int64, name="targets")
    return inputs, targets


@pytest.mark.weight(2)
@pytest.mark.pitfall(REUSED)
@pytest.mark.parametrize("n_pairs, vocab_size", [(12, 32), (5, 64)])
def test_pairs(submission, n_pairs, vocab_size):
    """The pairs: distinct keys in [0, V/2) at even positions, values in [V/2, V) after them"""
    inputs, _ = _batch(submission, n_pairs, vocab_size, seed=1)
    keys, values = inputs[:, 0:2 * n_pairs:2], inputs[:, 1:2 * n_pairs:2]
    if not ((keys >= 0) & (keys < vocab_size // 2)).all():
        raise CheckFailure("a key outside 0 .. vocab_size/2 - 1 (keys at positions 0, 2, ...)")
    if not ((values >= vocab_size // 2) & (values < vocab_size)).all():
        raise CheckFailure("a value outside vocab_size/2 .. vocab_size - 1 (positions 1, 3, ...)")
    repeated = sum(len(set(row)) < n_pairs for row in keys.tolist())
    if repeated:
        raise CheckFailure(f"{repeated} of {B} sequences list a key twice: the keys of one "
                           "sequence must be distinct (draw them without replacement)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(TARGETS)
@pytest.mark.parametrize("n_pairs, n_queries", [(6, 4), (7, None)])
def test_queries_and_targets(submission, n_pairs, n_queries):
    """The queries: distinct keys of the pairs, each followed by its value; targets there only"""
    inputs, targets = _batch(submission, n_pairs, 32, n_queries, seed=2)
    m = n_pairs if n_queries is None else n_queries
    keys, values = inputs[:, 0:2 * n_pairs:2], inputs[:, 1:2 * n_pairs:2]
    queries, answers = inputs[:, 2 * n_pairs::2], inputs[:, 2 * n_pairs + 1::2]
    for k, v, q, a in zip(keys.tolist(), values.tolist(), queries.tolist(), answers.tolist()):
        lookup = dict(zip(k, v))
        if len(set(q)) != m or not all(x in lookup for x in q):
            raise CheckFailure(f"the {m} queries of a sequence must be distinct keys of its pairs")
        if [lookup[x] for x in q] != a:
            raise CheckFailure("after each queried key must come that key's value")
    expected = torch.full_like(targets, -100)
    expected[:, 2 * n_pairs::2] = answers
    if not torch.equal(targets, expected):
        scored = (targets != -100).nonzero()[:, 1].unique().tolist()
        raise CheckFailure(f"targets must be -100 except at the query keys, positions "
                           f"{list(range(2 * n_pairs, 2 * n_pairs + 2 * m, 2))}, which hold the "
                           f"value that follows; your targets score positions {scored[:8]}")


def test_draws_cover_the_ranges(submission):
    """Keys, values and the order of the queries are drawn at random over their whole ranges"""
    inputs, _ = _batch(submission, 4, 16, seed=3)
    keys, values, queries = inputs[:, 0:8:2], inputs[:, 1:8:2], inputs[:, 8::2]
    for name, x, allowed in (("keys", keys, range(8)), ("values", values, range(8, 16))):
        for column in range(4):
            seen = set(x[:, column].tolist())
            if seen != set(allowed):
                raise CheckFailure(f"pair {column + 1}'s {name} take only the values "
                                   f"{sorted(seen)} over {B} sequences; draw them uniformly from "
                                   f"{allowed.start} .. {allowed.stop - 1}")
    firsts = (queries[:, 0:1] == keys).float().mean(0)  # which pair the first query asks
    if (firsts < 0.1).any():
        raise CheckFailure("the first query is not drawn uniformly from the pairs "
                           f"(shares {firsts.tolist()}): ask the keys in a random order")
    shared = (values[:, 0] == values[:, 1]).float().mean().item()
    if not 0.03 < shared < 0.3:
        raise CheckFailure(f"two pairs share a value in {shared:.0%} of sequences, expected about "
                           "1/8: draw each value independently")


@pytest.mark.property
def test_generator_makes_it_reproducible(submission):
    """The same generator seed gives the same batch, whatever the global random state"""
    same = submission.run(
        "torch.manual_seed(1)\n"
        "a = mqar_batch(16, 5, 20, generator=torch.Generator().manual_seed(7))\n"
        "torch.manual_seed(2)\n"
        "b = mqar_batch(16, 5, 20, generator=torch.Generator().manual_seed(7))\n"
        "result = bool(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]))\n")
    if not same:
        raise CheckFailure("two calls with generators of the same seed gave different batches: "
                           "pass generator=generator to every random draw")
