"""Hidden checks for Exercise 1: ``t5_relative_position_bucket``.

Compared bucket for bucket with :func:`toolkit.position.t5_relative_position_bucket`, which
equals Hugging Face's ``T5Attention._relative_position_bucket`` (tested in the toolkit's
suite), on every offset of a wide range, several bucket counts and distances, both
directions.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal, expect_tensor
from toolkit.position import t5_relative_position_bucket

pytestmark = pytest.mark.grade_cell("test_bucket")

DIRECTION = "Bucket sign or direction flipped"
SETTINGS = [(32, 128), (8, 16), (16, 40), (6, 9)]


def _compare(submission, bidirectional: bool, hint: str):
    rel = torch.arange(-300, 300).view(3, -1)  # any shape
    for num_buckets, max_distance in SETTINGS:
        got = submission.call("t5_relative_position_bucket", rel, bidirectional, num_buckets,
                              max_distance)
        expected = t5_relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
        what = (f"buckets of offsets -300 .. 299 (bidirectional={bidirectional}, "
                f"num_buckets={num_buckets}, max_distance={max_distance})")
        expect_tensor(got, name=what)
        if tuple(got.shape) != tuple(rel.shape):
            raise CheckFailure(f"{what}: shape {tuple(got.shape)}, expected {tuple(rel.shape)}")
        assert_equal(got.long(), expected, name=what, hint=hint)


@pytest.mark.weight(2)
@pytest.mark.pitfall(DIRECTION)
def test_bidirectional(submission):
    """Encoder buckets: keys before or at the query in the lower half, after it in the upper."""
    _compare(submission, True, hint="offset = key - query; offset > 0 (a key to the right) adds "
             "num_buckets // 2; the distance is |offset|")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DIRECTION)
def test_one_sided(submission):
    """Decoder buckets: the past only, every future key in bucket 0."""
    _compare(submission, False, hint="one-sided: distance = max(-offset, 0), all num_buckets "
             "buckets for the past")


@pytest.mark.pitfall("Logarithmic buckets rounded differently from T5")
def test_bucket_edges(submission):
    """Distances on the edges of the logarithmic buckets round as T5's do."""
    rel = -torch.arange(0, 200)
    for num_buckets, max_distance in ((32, 128), (64, 256), (20, 50)):
        got = submission.call("t5_relative_position_bucket", rel, False, num_buckets, max_distance)
        expected = t5_relative_position_bucket(rel, False, num_buckets, max_distance)
        expect_tensor(got, name="one-sided buckets")
        assert_equal(got.long(), expected, name=f"buckets of distances 0 .. 199 (num_buckets="
                     f"{num_buckets}, max_distance={max_distance})",
                     hint="float32: n_exact + (log(d / n_exact) / log(max_distance / n_exact) "
                     "* (n - n_exact)).long(), capped at n - 1")


@pytest.mark.structural
def test_returns_long(submission):
    """The buckets are a long tensor of the offsets' shape."""
    got = submission.call("t5_relative_position_bucket", torch.arange(-3, 4).view(7, 1))
    expect_tensor(got, name="buckets")
    if got.dtype != torch.long or tuple(got.shape) != (7, 1):
        raise CheckFailure(f"got {got.dtype} of shape {tuple(got.shape)}, expected torch.long "
                           "of the input's shape (7, 1)")
