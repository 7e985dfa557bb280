"""Hidden checks for Exercise 2: ``T5RelativePositionBias.forward``.

The student's module, with the weights of a :class:`toolkit.position.T5RelativePositionBias`
loaded into it, must return the same ``(1, H, T_q, T_k)`` bias for several query and key
counts and query offsets, in both directions.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import assert_close
from toolkit.position import T5RelativePositionBias

pytestmark = pytest.mark.grade_cell("test_bias")

DIRECTION = "Bucket sign or direction flipped"


def _compare(submission, bidirectional: bool, calls, hint: str):
    init = dict(n_heads=3, num_buckets=12, max_distance=20, bidirectional=bidirectional)
    torch.manual_seed(7)
    reference = T5RelativePositionBias(**init).double()
    state = {k: v.detach() for k, v in reference.state_dict().items()}
    for n_queries, n_keys, offset in calls:
        got = submission.module("T5RelativePositionBias", n_queries, n_keys, offset, init=init,
                                state={k: v.float() for k, v in state.items()})
        expected = reference(n_queries, n_keys, offset).float()
        assert_close(got, expected, atol=1e-6, rtol=1e-6, hint=hint,
                     name=f"bias({n_queries}, {n_keys}, query_offset={offset}) "
                     f"(bidirectional={bidirectional})")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DIRECTION)
def test_encoder_bias(submission):
    """Bidirectional: bias[0, h, i, j] = W[bucket(j - i), h] over a square and a wide grid."""
    _compare(submission, True, [(9, 9, 0), (4, 30, 0), (30, 30, 0)],
             hint="the offset is key position - query position, j - i")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DIRECTION)
def test_decoder_bias_with_offset(submission):
    """One-sided, with cached positions: the queries sit at query_offset + i."""
    _compare(submission, False, [(6, 6, 0), (1, 8, 7), (3, 25, 22), (2, 40, 5)],
             hint="query i is at absolute position query_offset + i, key j at j")
