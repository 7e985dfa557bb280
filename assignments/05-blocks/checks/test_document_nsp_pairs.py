"""Hidden checks for Exercise 8a: ``document_nsp_pairs``, NSP pairs from documents.

Every segment here is a one-token list whose id says where it comes from
(``1000 * d + s`` for segment ``s`` of document ``d``), so each pair can be checked
against the rules: one pair per consecutive pair of segments of each document, in order;
``IsNext`` (0) takes the next segment of the same document, ``NotNext`` (1) one of
another document, drawn uniformly over those segments. The draws themselves are the
student's (any order of random calls is fine); the checks test the rules and the
statistics, with bounds that a correct builder misses with probability below 1e-6.
"""

from __future__ import annotations

import math

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, expect_value_error

pytestmark = pytest.mark.grade_cell("test_document_nsp_pairs")

SAME_DOC = "NotNext drawn from the same document"
LABELS = "IsNext and NotNext labels swapped"

RUN = """
import torch as _torch

_docs = [[[1000 * d + s] for s in range(n)] for d, n in enumerate(inputs["sizes"])]
_out = document_nsp_pairs(_docs, _torch.Generator().manual_seed(inputs["rng_seed"]))
_pairs, _labels = _out if isinstance(_out, tuple) and len(_out) == 2 else (None, None)
try:  # one token per segment: send back the two ids of each pair, not the lists
    _a = _torch.tensor([int(p[0][0]) for p in _pairs])
    _b = _torch.tensor([int(p[1][0]) for p in _pairs])
    _ok = all(len(p) == 2 and len(p[0]) == 1 and len(p[1]) == 1 for p in _pairs)
except Exception:
    _a = _b = None
    _ok = False
result = (_pairs is not None, _ok and _a is not None, _a, _b, _labels)
"""


def _pairs(submission, sizes, seed):
    returned, well_formed, a, b, labels = submission.run(RUN, sizes=list(sizes), rng_seed=seed)
    if not returned:
        raise CheckFailure("document_nsp_pairs should return (pairs, labels)")
    if not well_formed:
        raise CheckFailure("each pair should be (A, B), two lists of token ids (a copy of the "
                           "segments)")
    if not isinstance(labels, torch.Tensor) or labels.dtype != torch.int64 or labels.dim() != 1:
        raise CheckFailure("labels should be an int64 tensor (n_pairs,)")
    n = sum(max(0, size - 1) for size in sizes)
    if len(a) != n or len(labels) != n:
        raise CheckFailure(f"documents of {list(sizes)} segments give {n} pairs (one per "
                           f"consecutive pair of segments of a document), got {len(a)}")
    return a.tolist(), b.tolist(), labels.tolist()


def _check_rules(a, b, labels, sizes) -> None:
    expected_a = [1000 * d + s for d, n in enumerate(sizes) for s in range(n - 1)]
    if a != expected_a:
        raise CheckFailure("A should be documents[d][s] for every document d and every segment "
                           "s but the last, in document order")
    flipped = all((lab == 1) == (bb == aa + 1) for aa, bb, lab in zip(a, b, labels))
    if flipped and any(lab == 1 for lab in labels):
        raise CheckFailure("your labels are the other way round: IsNext (B follows A) is 0 "
                           "and NotNext is 1, Hugging Face's convention")
    for aa, bb, lab in zip(a, b, labels):
        if lab not in (0, 1):
            raise CheckFailure(f"labels must be 0 (IsNext) or 1 (NotNext), got {lab}")
        if lab == 0 and bb != aa + 1:
            raise CheckFailure(f"an IsNext pair (label 0) must take the next segment of A's "
                               f"document: A = documents[{aa // 1000}][{aa % 1000}], B = "
                               f"documents[{bb // 1000}][{bb % 1000}]")
        if lab == 1 and bb // 1000 == aa // 1000:
            raise CheckFailure("a NotNext pair (label 1) took B from A's own document: "
                               "draw it from the segments of the other documents")


@pytest.mark.weight(3)
@pytest.mark.pitfall(SAME_DOC)
def test_pairs_follow_the_rules(submission):
    """Documents of 7, 1, 12, 2 and 5 segments: A in order, IsNext the next segment, NotNext
    from another document, labels 0 / 1."""
    sizes = (7, 1, 12, 2, 5)
    a, b, labels = _pairs(submission, sizes, seed=0)
    _check_rules(a, b, labels, sizes)
    if not any(labels) or all(labels):
        raise CheckFailure("all 22 pairs got the same label: each pair is IsNext or NotNext "
                           "with probability 1/2")


@pytest.mark.weight(2)
@pytest.mark.pitfall(SAME_DOC)
def test_statistics(submission):
    """Over 4 documents of 600 segments: half NotNext, and NotNext B uniform over the other
    documents' segments."""
    sizes = (600, 300, 600, 900)
    a, b, labels = _pairs(submission, sizes, seed=1)
    _check_rules(a, b, labels, sizes)
    n = len(labels)
    share = sum(labels) / n
    if abs(share - 0.5) > 5 * math.sqrt(0.25 / n):
        raise CheckFailure(f"{share:.3f} of the pairs are NotNext; each pair should be NotNext "
                           "with probability 1/2")
    # NotNext B of a pair from document 3 (900 segments): the other documents hold 600,
    # 300 and 600 segments, so B lies in document 1 with probability 300 / 1500 = 0.2.
    from_3 = [bb // 1000 for aa, bb, lab in zip(a, b, labels) if lab == 1 and aa // 1000 == 3]
    p = 300 / 1500
    got = sum(d == 1 for d in from_3) / len(from_3)
    if abs(got - p) > 5 * math.sqrt(p * (1 - p) / len(from_3)):
        raise CheckFailure(f"NotNext segments for document 3 came from document 1 in {got:.2f} "
                           f"of the draws, expected {p:.2f}: draw uniformly over all the "
                           "segments of the other documents (not over the documents)")


def test_seeded(submission):
    """The same generator seed gives the same pairs; another seed other pairs."""
    sizes = (30, 30, 30)
    first, again, other = (_pairs(submission, sizes, seed) for seed in (5, 5, 6))
    if first != again:
        raise CheckFailure("two calls with generators seeded alike gave different pairs: draw "
                           "every random number with `generator`")
    if first == other:
        raise CheckFailure("two different seeds gave the same pairs")


@pytest.mark.structural
def test_one_document_is_refused(submission):
    """A single document cannot give NotNext pairs: ValueError."""
    with expect_value_error("one document", "document_nsp_pairs accepted a single document: "
                                            "raise ValueError"):
        submission.run("import torch as _t\nresult = document_nsp_pairs([[[1], [2]]], "
                       "_t.Generator().manual_seed(0))")
