"""Hidden checks for Exercise 5: ``GatedAttentionUnit.forward``.

The student's unit is loaded with the weights of :class:`toolkit.gau.GatedAttentionUnit`
(scales and offsets of Q and K randomised and different from each other) and compared
with it, then probed for causality and prefix independence.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.gau import GatedAttentionUnit

pytestmark = pytest.mark.grade_cell("test_gau")

SHARED = "GAU scale and offset shared between Q and K"
LENGTH = "Causal GAU divides every row by the sequence length"
NAMES = "Parameter names differ from the specification"

INIT = dict(d_model=8, expansion_factor=1.5, d_qk=6)
TOL = dict(atol=2e-5, rtol=1e-4)  # float32 modules


def _reference(seed=0, **init) -> GatedAttentionUnit:
    torch.manual_seed(seed)
    gau = GatedAttentionUnit(**{**INIT, **init}).eval()
    with torch.no_grad():
        for p in (gau.q_gamma, gau.q_beta, gau.k_gamma, gau.k_beta):
            p.copy_(torch.randn_like(p))
    return gau


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _variant(gau, x, shared=False, gate=True) -> torch.Tensor:
    """The unit computed with a known mistake, to recognise it."""
    with torch.no_grad():
        u, v, z = (F.silu(p(x)) for p in (gau.u_proj, gau.v_proj, gau.z_proj))
        q = z * gau.q_gamma + gau.q_beta
        k = q if shared else z * gau.k_gamma + gau.k_beta
        A = F.relu(q @ k.transpose(-2, -1) / x.size(1)).square()
        return gau.o_proj((u if gate else 1.0) * (A @ v))


@pytest.mark.weight(3)
@pytest.mark.pitfall(SHARED)
def test_matches_reference(submission):
    """Bidirectional unit: O = (U * relu(Q K^T / T)^2 V) W_o with the reference's weights."""
    ref = _reference(seed=1)
    x = _randn(2, 7, 8, seed=2)
    out = expect_tensor(submission.module("GatedAttentionUnit", x, init=INIT, state=_state(ref)),
                        shape=(2, 7, 8), name="GatedAttentionUnit(x)")
    if torch.allclose(out, _variant(ref, x, shared=True), **TOL):
        raise CheckFailure("your K uses Q's scale and offset: K = Z * k_gamma + k_beta, with its "
                           "own parameters (otherwise Q = K and every score is symmetric)")
    if torch.allclose(out, _variant(ref, x, gate=False), **TOL):
        raise CheckFailure("your output lacks the gate: O = (U * (A V)) W_o")
    with torch.no_grad():
        expected = ref(x)
    assert_close(out, expected, **TOL, name="GatedAttentionUnit(x)",
                 hint="U, V, Z = silu(...); Q, K = Z * gamma + beta (separately); "
                      "A = relu(Q K^T / T)^2; O = o_proj(U * (A @ V))")


@pytest.mark.pitfall(SHARED)
def test_queries_and_keys_are_distinct(submission):
    """Moving only K's offset changes the output (Q and K do not share parameters)."""
    ref = _reference(seed=3)
    x = _randn(1, 5, 8, seed=4)
    state = _state(ref)
    state["k_beta"] = state["k_beta"] + 1.0
    moved = submission.module("GatedAttentionUnit", x, init=INIT, state=state)
    with torch.no_grad():
        ref.k_beta.add_(1.0)
        expected = ref(x)
    assert_close(moved, expected, **TOL, name="GatedAttentionUnit with K's offset moved",
                 hint="K = Z * k_gamma + k_beta")


def test_bias_is_added_before_the_relu(submission):
    """attn_bias (T, T) is added to Q K^T / T before the squared ReLU."""
    ref = _reference(seed=5)
    x, bias = _randn(2, 6, 8, seed=6), _randn(6, 6, seed=7)
    out = submission.module("GatedAttentionUnit", x, init=INIT, state=_state(ref), attn_bias=bias)
    with torch.no_grad():
        expected = ref(x, attn_bias=bias)
    assert_close(out, expected, **TOL, name="GatedAttentionUnit(x, attn_bias)",
                 hint="scores = Q K^T / T + attn_bias, then relu(.)^2")


CAUSAL = {**INIT, "causal": True}


def _causal(submission, ref, x):
    return expect_tensor(submission.module("GatedAttentionUnit", x, init=CAUSAL, state=_state(ref)),
                         shape=x.shape, name="causal GatedAttentionUnit(x)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LENGTH)
def test_causal_matches_reference(submission):
    """causal=True: row i averages keys 0..i, divided by i + 1, with the reference's weights."""
    ref = _reference(seed=8, causal=True)
    x = _randn(1, 9, 8, seed=9)
    with torch.no_grad():
        expected = ref(x)
    assert_close(_causal(submission, ref, x), expected, **TOL, name="causal GatedAttentionUnit(x)",
                 hint="scores = Q K^T / (i + 1) for query i; relu(.)^2; weight 0 for keys j > i")


@pytest.mark.weight(2)
@pytest.mark.property
def test_causal_future_does_not_leak(submission):
    """causal=True: changing tokens after position t never changes the outputs up to t."""
    ref = _reference(seed=10, causal=True)
    x = _randn(1, 9, 8, seed=11)
    full = _causal(submission, ref, x)
    x2 = x.clone()
    x2[:, 6:] += 1.0
    moved = _causal(submission, ref, x2)
    if not torch.allclose(moved[:, :6], full[:, :6], atol=1e-6):
        raise CheckFailure("with causal=True, changing tokens 6.. changed the outputs 0..5: set "
                           "the weights of future keys (j > i) to zero")


@pytest.mark.pitfall(LENGTH)
@pytest.mark.property
def test_causal_prefix_ignores_what_follows(submission):
    """causal=True: the first 4 outputs are the same for a 4-token and a 9-token input."""
    ref = _reference(seed=12, causal=True)
    x = _randn(1, 9, 8, seed=13)
    full, prefix = _causal(submission, ref, x), _causal(submission, ref, x[:, :4])
    if not torch.allclose(prefix, full[:, :4], **TOL):
        raise CheckFailure("with causal=True the first 4 outputs differ between a 4-token and a "
                           "9-token input: divide row i by its number of keys, i + 1, not by T")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names(submission):
    """u_proj, v_proj, z_proj, o_proj and q_gamma, q_beta, k_gamma, k_beta of shape (d_qk,)."""
    expected = _reference().state_dict()
    got = submission.module_state("GatedAttentionUnit", init=INIT)
    if not isinstance(got, dict):
        raise CheckFailure("could not read the parameters of your GatedAttentionUnit")
    if sorted(got) != sorted(expected):
        raise CheckFailure(f"GatedAttentionUnit has parameters {sorted(got)}, expected "
                           f"{sorted(expected)}")
    for name, tensor in expected.items():
        expect_tensor(got[name], shape=tensor.shape, name=f"parameter {name}")
