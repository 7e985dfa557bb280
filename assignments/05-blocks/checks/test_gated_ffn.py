"""Hidden checks for Exercise 2: ``swiglu_hidden_dim`` and ``GatedFeedForward``.

Modules are built in the student's kernel with positional arguments
``(d_model, hidden, activation)``, loaded with weights made here and compared with
:mod:`toolkit.ffn` (itself tested against Hugging Face's ``LlamaMLP``).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autograder.protocol.checklib import CheckFailure, assert_close, assert_equal, expect_tensor
from toolkit.ffn import GEGLU, GLU, GatedFeedForward, ReGLU, SwiGLU, swiglu_hidden_dim

pytestmark = pytest.mark.grade_cell("test_gated_ffn")

BRANCH = "SwiGLU gate applied to the wrong branch"
ROUND = "SwiGLU hidden size 8d/3 without LLaMA's rounding to a multiple"
FOUR_D = "Gated FFN with the classic 4d hidden size (50% more parameters)"
TOL = dict(atol=1e-10, rtol=1e-8)

# In the student's kernel: build cls(*args), load our weights (float64), apply to x.
RUN = """
import torch as _torch

_m = globals()[inputs["cls"]](*inputs["args"]).double()
_load_exercise_state(_m, inputs["state"])
_m.eval()
with _torch.no_grad():
    result = _m(inputs["x"])
"""

# In the student's kernel: the hidden size, parameter names and shapes of cls(*args).
SHAPES = """
_m = globals()[inputs["cls"]](*inputs["args"])
result = ({n: tuple(p.shape) for n, p in _m.named_parameters()}, _m.d_ff)
"""


def _randn(*shape, seed, scale=1.0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64) * scale


def _reference(cls, *args, seed=0):
    torch.manual_seed(seed)
    return cls(*args).double().eval()


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _apply(submission, name, args, module, x):
    return submission.run(RUN, cls=name, args=list(args), state=_state(module), x=x)


@pytest.mark.weight(2)
@pytest.mark.pitfall(ROUND)
def test_hidden_dim_llama(submission):
    """swiglu_hidden_dim: int(8d/3) rounded up to a multiple (4096 -> 11008, 5120 -> 13824)."""
    cases = [(4096, 256), (5120, 256), (4096, 1), (64, 32), (100, 64), (768, 128), (12, 8)]
    for d, multiple in cases:
        expected = swiglu_hidden_dim(d, multiple)
        got = submission.call("swiglu_hidden_dim", d, multiple)
        if got == int(8 * d / 3) and expected != got:
            raise CheckFailure(f"swiglu_hidden_dim({d}, {multiple}) = {got} is int(8d/3) without "
                               f"the rounding: round it *up* to a multiple of {multiple} "
                               f"({expected})")
        if got == 4 * d:
            raise CheckFailure(f"swiglu_hidden_dim({d}, {multiple}) = 4d: a gated FFN has three "
                               "matrices, so parameter parity with a 4d MLP needs 8d/3")
        assert_equal(got, expected, name=f"swiglu_hidden_dim({d}, multiple_of={multiple})",
                     hint="multiple_of * ceil(int(2 * 4 * d / 3) / multiple_of)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(BRANCH)
def test_swiglu_matches_reference(submission):
    """SwiGLU(12, 20) with loaded weights: down(silu(gate(x)) * up(x))."""
    ref = _reference(SwiGLU, 12, 20, seed=1)
    x = _randn(2, 5, 12, seed=2)
    got = _apply(submission, "SwiGLU", [12, 20], ref, x)
    expect_tensor(got, shape=x.shape, dtype=torch.float64, name="SwiGLU(x)")
    with torch.no_grad():
        wrong = ref.down_proj(ref.gate_proj(x) * F.silu(ref.up_proj(x)))
    if torch.allclose(got, wrong, atol=1e-8):
        raise CheckFailure("you applied the activation to up_proj(x); it belongs on the gate "
                           "branch: act(gate_proj(x)), multiplied by the plain up_proj(x)")
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="SwiGLU(x)",
                     hint="down_proj(act(gate_proj(x)) * up_proj(x)), act = silu for SwiGLU")


@pytest.mark.weight(2)
@pytest.mark.pitfall(BRANCH)
@pytest.mark.parametrize("cls", [GLU, ReGLU, GEGLU], ids=["GLU", "ReGLU", "GEGLU"])
def test_glu_family(submission, cls):
    """GLU (sigmoid), ReGLU (relu), GEGLU (gelu) gates with loaded weights."""
    ref = _reference(cls, 10, 14, seed=3)
    x = _randn(3, 10, seed=4, scale=2.0)
    got = _apply(submission, cls.__name__, [10, 14], ref, x)
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name=f"{cls.__name__}(x)",
                     hint=f"the gate's activation is {cls.default_activation}: use the class's "
                          "default_activation when activation is None, and put it on gate_proj")


def test_explicit_activation_and_bias(submission):
    """GatedFeedForward(8, 12, 'gelu_tanh', bias=True): the given activation, with biases."""
    ref = _reference(GatedFeedForward, 8, 12, "gelu_tanh", 256, True, seed=5)
    with torch.no_grad():
        for p in ref.parameters():
            if p.dim() == 1:
                p.normal_()
    x = _randn(4, 8, seed=6)
    got = _apply(submission, "GatedFeedForward", [8, 12, "gelu_tanh", 256, True], ref, x)
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="GatedFeedForward(8, 12, 'gelu_tanh', bias=True)",
                     hint="activation picks the gate's function; bias=True gives the three "
                          "projections biases")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ROUND)
def test_default_hidden_size(submission):
    """Without a hidden size, SwiGLU uses swiglu_hidden_dim(d_model, multiple_of) (1024 -> 2816)."""
    for args in ([1024], [100, None, None, 64], [48, None, None, 32]):
        names, hidden = submission.run(SHAPES, cls="SwiGLU", args=args)
        d, multiple = args[0], (args[3] if len(args) > 3 else 256)
        expected = swiglu_hidden_dim(d, multiple)
        if hidden != expected:
            raise CheckFailure(f"SwiGLU({', '.join(map(repr, args))}) has d_ff {hidden}, "
                               f"expected swiglu_hidden_dim({d}, {multiple}) = {expected}")
        if names.get("gate_proj.weight") != (expected, d):
            raise CheckFailure(f"gate_proj of SwiGLU({d}) should be ({expected}, {d}), got "
                               f"{names.get('gate_proj.weight')}")


@pytest.mark.pitfall(FOUR_D)
def test_parameter_parity(submission):
    """SwiGLU(d, multiple_of=1) has about the 8 d^2 parameters of a 4d-hidden MLP."""
    names, _ = submission.run(SHAPES, cls="SwiGLU", args=[96, None, None, 1])
    if not isinstance(names, dict):
        raise CheckFailure("could not read the parameters of SwiGLU(96, multiple_of=1)")
    total = sum(int(torch.Size(s).numel()) for s in names.values())
    classic = 8 * 96 * 96
    if abs(total - classic) > 0.01 * classic:
        raise CheckFailure(f"SwiGLU(96, multiple_of=1) has {total:,} parameters; a 4d-hidden MLP "
                           f"has 8 d^2 = {classic:,}. Three matrices of 8d/3 x d match it; three "
                           "of 4d x d have 50% more")


@pytest.mark.structural
def test_parameter_names(submission):
    """gate_proj, up_proj (d -> h) and down_proj (h -> d), without biases by default."""
    names, hidden = submission.run(SHAPES, cls="SwiGLU", args=[12, 20])
    expected = {"gate_proj.weight": (20, 12), "up_proj.weight": (20, 12),
                "down_proj.weight": (12, 20)}
    if names != expected or hidden != 20:
        raise CheckFailure(f"SwiGLU(12, 20) should have parameters {expected} and d_ff 20, "
                           f"got {names} and {hidden}")
