"""Hidden checks for Exercise 8c: ``encode_pairs``, BERT's input rows for sentence pairs.

The pairs here have random lengths (A and B differ, and pairs differ from each other);
the student's rows are compared with :func:`toolkit.finetune.encode_pairs` computed in
this process, row by row, so a message can say which of the three is wrong and how.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, expect_value_error
from toolkit.finetune import encode_pairs as reference

pytestmark = pytest.mark.grade_cell("test_encode_pairs")

SWAPPED = "Segment ids swapped"

RUN = """
_out = encode_pairs(inputs["pairs"], inputs["seq_len"])
result = {key: _out[key] for key in ("input_ids", "token_type_ids", "attention_mask")
          if isinstance(_out, dict) and key in _out}
"""


def _pairs(seed: int, n: int = 7, seq_len: int = 24) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    pairs = []
    for _ in range(n):
        la = int(torch.randint(1, 10, (), generator=g))
        lb = int(torch.randint(1, seq_len - 3 - la + 1, (), generator=g))
        a = torch.randint(5, 90, (la,), generator=g).tolist()
        b = torch.randint(5, 90, (lb,), generator=g).tolist()
        pairs.append((a, b))
    return pairs


def _encode(submission, pairs, seq_len) -> dict:
    got = submission.run(RUN, pairs=pairs, seq_len=seq_len)
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        value = got.get(key) if isinstance(got, dict) else None
        if not isinstance(value, torch.Tensor):
            raise CheckFailure(f"encode_pairs should return a dict with the tensor {key!r}")
        if value.dtype != torch.int64 or tuple(value.shape) != (len(pairs), seq_len):
            raise CheckFailure(f"{key} should be int64 of shape (n_pairs, seq_len) = "
                               f"{(len(pairs), seq_len)}, got {value.dtype} "
                               f"{tuple(value.shape)}")
    return got


def _compare(got: dict, pairs, seq_len) -> None:
    expected = reference(pairs, seq_len)
    if not torch.equal(got["input_ids"], expected["input_ids"]):
        raise CheckFailure("input_ids should be [CLS] A [SEP] B [SEP] then [PAD] up to "
                           "seq_len, for every pair")
    if not torch.equal(got["attention_mask"], expected["attention_mask"]):
        raise CheckFailure("attention_mask should be 1 for [CLS], A, B and both [SEP], 0 for "
                           "the padding")
    types, want = got["token_type_ids"], expected["token_type_ids"]
    real = expected["attention_mask"].bool()
    if torch.equal(types[real], 1 - want[real]):
        raise CheckFailure("your segment ids are swapped: [CLS], A and the first [SEP] are "
                           "segment 0, B and the second [SEP] segment 1")
    if not torch.equal(types, want):
        raise CheckFailure("token_type_ids should be 0 for [CLS], A and the first [SEP], 1 for "
                           "B and the second [SEP], and 0 for the padding")


@pytest.mark.weight(3)
@pytest.mark.pitfall(SWAPPED)
def test_rows_match_bert(submission):
    """Seven pairs of random lengths, seq_len 24: all three rows as Hugging Face builds them."""
    pairs = _pairs(0)
    _compare(_encode(submission, pairs, 24), pairs, 24)


@pytest.mark.pitfall(SWAPPED)
def test_a_pair_that_fills_every_position(submission):
    """A pair of exactly seq_len - 3 tokens (no padding) next to a short one."""
    pairs = [([11, 12, 13], [14, 15, 16, 17]), ([20], [21])]
    _compare(_encode(submission, pairs, 10), pairs, 10)


@pytest.mark.structural
def test_too_long_is_refused(submission):
    """A pair that needs seq_len + 1 positions: ValueError, nothing truncated."""
    with expect_value_error("seq_len", "encode_pairs accepted a pair longer than seq_len: "
                                       "raise ValueError (nothing is truncated)"):
        submission.run(RUN, pairs=[([5] * 4, [6] * 4)], seq_len=10)
