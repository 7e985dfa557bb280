"""Hidden checks for Exercise 1b: ``global_token_mask`` (Longformer, BigBird).

The reference is :func:`toolkit.masks.global_token_mask`. An all-True mask has every
property below, so the property checks count only next to a passing value check. Besides equality on hidden
patterns, the checks test the properties that make global tokens useful: a global row
and a global column are all ``True``, the rest of the base pattern is untouched, a
symmetric base stays symmetric, and a global token hears the whole sequence in one layer
(every query in two).
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal, expect_tensor, expect_value_error
from toolkit.masks import band_mask, dilated_mask, global_token_mask, sliding_window_mask

pytestmark = pytest.mark.grade_cell("test_global_tokens")

ROWS_ONLY = "Global tokens only as rows (they see all, nobody sees them)"
COLUMNS_ONLY = "Global tokens only as columns (all see them, they see only their window)"
NO_BASE = "Global tokens replace the local window instead of adding to it"


def _grid(m: torch.Tensor) -> str:
    return "\n".join(" ".join("1" if v else "0" for v in row) for row in m.tolist())


def _get(submission, n, idx, base=None, label=None) -> torch.Tensor:
    label = label or f"global_token_mask({n}, {idx}{', base=...' if base is not None else ''})"
    got = expect_tensor(submission.call("global_token_mask", n, idx, base=base), name=label)
    if tuple(got.shape) != (n, n):
        raise CheckFailure(f"{label} has shape {tuple(got.shape)}, expected ({n}, {n})")
    if got.dtype != torch.bool:
        raise CheckFailure(
            f"{label} has dtype {got.dtype}, expected torch.bool (True = may attend)")
    return got


def _diagnose(got: torch.Tensor, idx, base: torch.Tensor | None) -> str:
    n = got.shape[0]
    rows, cols = got[idx].all(), got[:, idx].all()
    if rows and not cols:
        return ("the global rows are all True but not the global columns: every query must also "
                "see the global tokens (mask[:, idx] = True)")
    if cols and not rows:
        return ("the global columns are all True but not the global rows: a global token must "
                "see every key (mask[idx, :] = True)")
    if base is not None:
        plain = global_token_mask(n, idx)
        if torch.equal(got, plain):
            return "the base pattern is gone: OR the global rows and columns into a copy of base"
    return "M[i, j] = base[i, j] or (i is global) or (j is global)"


CASES = (
    (12, [0], "band", 1),
    (16, [0, 7], "band", 2),
    (10, [3, 3, 9], "window", 3),  # repeated index
    (14, [13], "dilated", 3),
    (9, [2, 4], None, None),
)


def _base(kind, n, size):
    if kind == "band":
        return band_mask(n, size)
    if kind == "window":
        return sliding_window_mask(n, size)
    if kind == "dilated":
        return dilated_mask(n, size, 2, causal=False)
    return None


@pytest.mark.weight(3)
def test_matches_reference(submission):
    """base OR (row is global) OR (column is global), on windows, bands and dilated bases."""
    for n, idx, kind, size in CASES:
        base = _base(kind, n, size)
        got = _get(submission, n, idx, base)
        expected = global_token_mask(n, idx, base=base)
        if not torch.equal(got, expected):
            raise CheckFailure(
                f"global_token_mask({n}, {idx}, base={kind or 'None'}) is\n{_grid(got)}\nwhich is "
                f"wrong: {_diagnose(got, idx, base)}")


@pytest.mark.property
@pytest.mark.pitfall(COLUMNS_ONLY)
def test_global_rows_and_columns_are_full(submission):
    """A global token's row (it sees every key) and column (every query sees it) are all True."""
    n, idx = 15, [1, 8]
    got = _get(submission, n, idx, sliding_window_mask(n, 2))
    for g in idx:
        if not got[g].all():
            raise CheckFailure(f"row {g} (a global query) has {int(got[g].sum())} of {n} keys "
                               "visible: a global token sees every key")
        if not got[:, g].all():
            raise CheckFailure(f"column {g} (a global key) is visible to {int(got[:, g].sum())} of "
                               f"{n} queries: every query sees a global token")


@pytest.mark.pitfall(NO_BASE)
def test_base_is_kept_elsewhere(submission):
    """Away from the global rows and columns the base pattern is exactly unchanged."""
    n, idx = 13, [0, 6]
    base = dilated_mask(n, 3, 2, causal=False)
    got = _get(submission, n, idx, base)
    rest = [i for i in range(n) if i not in idx]
    if not torch.equal(got[rest][:, rest], base[rest][:, rest]):
        raise CheckFailure("outside the global rows and columns your mask differs from base: "
                           "keep every cell of base (OR, do not replace)")


@pytest.mark.property
@pytest.mark.pitfall(ROWS_ONLY)
def test_symmetric_base_stays_symmetric(submission):
    """A band plus global tokens is symmetric: seeing and being seen go together."""
    n, idx = 11, [4]
    got = _get(submission, n, idx, band_mask(n, 1))
    if not torch.equal(got, got.T):
        raise CheckFailure("band_mask plus global tokens should be symmetric (M == M.T): the "
                           "global rows and the global columns must both be all True")


@pytest.mark.property
def test_reach_in_one_and_two_layers(submission):
    """A global token hears everything in one layer; every token reaches every other in two."""
    n, idx = 20, [10]
    got = _get(submission, n, idx, band_mask(n, 1)).long()
    if not bool((got[10] > 0).all()):
        raise CheckFailure("after one layer the global token 10 should have heard all 20 "
                           f"positions, it heard {int((got[10] > 0).sum())}")
    two = (got @ got) > 0
    if not bool(two.all()):
        i, j = (~two).nonzero()[0].tolist()
        raise CheckFailure(f"after two layers query {i} still cannot hear position {j}: through a "
                           "global token (i -> g -> j) every pair should connect")


def test_tensor_indices_and_no_base(submission):
    """Indices may be a tensor of any shape; no base means only the global rows and columns."""
    label = "global_token_mask(7, tensor([[1], [5]]))"
    got = _get(submission, 7, torch.tensor([[1], [5]]), label=label)
    assert_equal(got, global_token_mask(7, [1, 5]), name=label,
                 hint="flatten a tensor of indices; with base=None start from all False")
    empty = _get(submission, 5, [], band_mask(5, 1), label="global_token_mask(5, [], base=band)")
    assert_equal(empty, band_mask(5, 1), name="global_token_mask(5, [], base=band)",
                 hint="no global tokens leaves the base as it is")


@pytest.mark.structural
def test_base_is_not_modified(submission):
    """The base mask passed in is left as it was (the result is a new tensor)."""
    code = (
        "_base = inputs['base'].clone()\n"
        "_out = global_token_mask(8, [2], base=_base)\n"
        "result = (_out, _base)\n"
    )
    got = submission.run(code, base=band_mask(8, 1))
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("global_token_mask did not return a mask")
    if not torch.equal(got[1], band_mask(8, 1)):
        raise CheckFailure("global_token_mask changed the base mask it was given: clone it first")


@pytest.mark.structural
def test_bad_arguments_raise(submission):
    """An index outside [0, n) and a base of the wrong shape or dtype raise ValueError."""
    with expect_value_error("global index 8 with n = 8",
                            "global_token_mask(8, [8]) was accepted: indices must lie in [0, n)"):
        submission.call("global_token_mask", 8, [8])
    with expect_value_error("a (7, 7) base with n = 8",
                            "a (7, 7) base for n = 8 was accepted: raise ValueError"):
        submission.call("global_token_mask", 8, [0], base=band_mask(7, 1))
    with expect_value_error("a float base",
                            "a float base was accepted: base must be a bool mask"):
        submission.call("global_token_mask", 8, [0], base=band_mask(8, 1).float())
