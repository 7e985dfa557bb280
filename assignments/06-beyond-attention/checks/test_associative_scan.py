"""Hidden checks for Exercise 3c: the parallel ``associative_scan``.

Reference: :func:`toolkit.ssm.selective.associative_scan` (Hillis-Steele); any parallel
order of combining (Blelloch, even/odd recursion) gives the same numbers and full marks.
The last check counts the tensor operations on a long input: a loop over time is the
sequential scan again. Inputs are float64 unless stated.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.ssm.selective import associative_scan

pytestmark = pytest.mark.grade_cell("test_associative_scan")

ORDER = "Scan operator applied in the wrong order"
LOOP = "Parallel scan written as a loop over time"

TOL = dict(atol=1e-10, rtol=1e-8)


def _inputs(*shape, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return (torch.rand(*shape, generator=g, dtype=dtype) * 1.2,
            torch.randn(*shape, generator=g, dtype=dtype))


def _swapped(a, b, dim):
    """The operator composed the other way round, (a_1 a_2, a_1 b_2 + b_1): each b_t is
    scaled by the decays of the steps *before* it, h'_t = sum_{s <= t} (a_0 ... a_{s-1}) b_s."""
    a, b = a.movedim(dim, 0), b.movedim(dim, 0)
    before = torch.cat([torch.ones_like(a[:1]), a[:-1]]).cumprod(0)  # a_0 ... a_{s-1}
    return (before * b).cumsum(0).movedim(0, dim)


def _diagnose(out, a, b, dim) -> None:
    if not isinstance(out, torch.Tensor) or out.shape != b.shape:
        return
    if torch.allclose(out.to(b.dtype), _swapped(a, b, dim), **TOL):
        raise CheckFailure("your scan composes the steps in the wrong order: (a_1, b_1) then "
                           "(a_2, b_2) is (a_2 a_1, a_2 b_1 + b_2), the earlier b multiplied by "
                           "the later a, not a_1 b_2 + b_1")


@pytest.mark.weight(3)
@pytest.mark.pitfall(ORDER)
def test_matches_the_sequential_scan(submission):
    """h_t = a_t h_(t-1) + b_t along dim 1 of (2, 37, 3), as the sequential loop gives it."""
    a, b = _inputs(2, 37, 3, seed=1)
    out = submission.call("associative_scan", a, b, dim=1)
    _diagnose(out, a, b, 1)
    assert_close(out, associative_scan(a, b, dim=1), **TOL, name="associative_scan(a, b, dim=1)",
                 hint="(a_1, b_1) then (a_2, b_2) = (a_2 a_1, a_2 b_1 + b_2)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ORDER)
@pytest.mark.parametrize("shape, dim", [((50,), 0), ((3, 4, 21), -1), ((2, 3, 17, 2), 2),
                                         ((64, 5), 0)])
def test_any_time_axis(submission, shape, dim):
    """The time axis is `dim` (negative allowed); lengths that are not powers of two."""
    a, b = _inputs(*shape, seed=2)
    out = submission.call("associative_scan", a, b, dim=dim)
    _diagnose(out, a, b, dim)
    assert_close(out, associative_scan(a, b, dim=dim), **TOL,
                 name=f"associative_scan on {shape} with dim={dim}",
                 hint="move the time axis first (movedim) and back at the end")


def test_resets_and_single_step(submission):
    """a_t = 0 forgets everything before t; a sequence of one step gives h = b."""
    a = torch.tensor([[0.9, 0.0, 1.0, 1.0, 0.0, 0.5]], dtype=torch.float64)
    b = torch.tensor([[1.0, 2.0, 3.0, -1.0, 4.0, 2.0]], dtype=torch.float64)
    out = submission.call("associative_scan", a, b, dim=1)
    assert_close(out, torch.tensor([[1.0, 2.0, 5.0, 4.0, 4.0, 4.0]], dtype=torch.float64), **TOL,
                 name="associative_scan with resets (a_t = 0)")
    one = submission.call("associative_scan", a[:, :1], b[:, :1], dim=1)
    assert_close(one, b[:, :1], **TOL, name="associative_scan of a single step")


@pytest.mark.structural
def test_float32(submission):
    """float32 in, float32 out."""
    a, b = _inputs(2, 19, 3, seed=3, dtype=torch.float32)
    out = submission.call("associative_scan", a, b, dim=1)
    assert_close(out, associative_scan(a, b, dim=1), atol=1e-5, rtol=1e-4,
                 name="float32 associative_scan")


COUNT = """
from torch.overrides import TorchFunctionMode

class _CountOps(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))

_counter = _CountOps()
with _counter:
    _h = associative_scan(inputs['a'], inputs['b'], dim=0)
result = (_h, _counter.n)
"""


@pytest.mark.weight(2)
@pytest.mark.pitfall(LOOP)
@pytest.mark.property
def test_log_depth(submission):
    """A parallel scan: on L = 4096 steps, fewer than L / 4 tensor operations (log L rounds)."""
    a, b = _inputs(4096, 2, seed=4)
    got = submission.run(COUNT, a=a, b=b)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("associative_scan did not return a tensor")
    h, n_ops = got
    expect_tensor(h, shape=(4096, 2), name="associative_scan on 4096 steps")
    if n_ops >= 1024:
        raise CheckFailure(f"your scan performs {n_ops} tensor operations for L = 4096: that "
                           "grows like L, a loop over the time steps. Combine every position "
                           "with the one 2^r steps back, r = 0, 1, ... (12 rounds for 4096)")
