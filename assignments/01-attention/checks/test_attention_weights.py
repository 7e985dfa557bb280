"""Hidden checks for Exercise 1: ``attention_weights`` and ``scaled_dot_product_attention``.

References come from :mod:`toolkit.attention` in this (trusted) process; the student's
functions run in their kernel through ``submission``. Inputs are float64 wherever exact
agreement is expected, so a correct answer never fails on rounding.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor, expect_value_error
from toolkit.attention import attention_weights, scaled_dot_product_attention
from toolkit.masks import causal_mask, combine_masks, mask_to_additive, padding_mask

pytestmark = pytest.mark.grade_cell("test_attention_weights")

SCALE = "Forgotten 1/sqrt(d_k)"
AFTER = "Mask applied after the softmax"
NAN = "Fully masked row gives NaN"

TOL = dict(atol=1e-10, rtol=1e-8)  # float64 inputs


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _close(a, b, atol=1e-8) -> bool:
    return (isinstance(a, torch.Tensor) and a.shape == b.shape
            and torch.allclose(a.to(b.dtype), b, atol=atol, rtol=1e-6))


def _some_visible_mask(*shape, seed: int) -> torch.Tensor:
    """A random bool mask in which every row keeps at least one key."""
    g = torch.Generator().manual_seed(seed)
    m = torch.rand(*shape, generator=g) > 0.5
    m[..., 0] = True
    return m


def _combined_mask():
    """Causal AND key padding for B=2, T=5 (lengths 3 and 5): shape (2, 1, 5, 5)."""
    return combine_masks(causal_mask(5), padding_mask(torch.tensor([3, 5])))


@pytest.mark.weight(2)
@pytest.mark.pitfall(SCALE)
def test_weights_match_reference(submission):
    """attention_weights(q, k) equals softmax(q k^T / sqrt(d_k)) over the keys."""
    q, k = _randn(2, 3, 4, 16, seed=1), _randn(2, 3, 6, 16, seed=2)  # (B, h, T_q|T_k, d_k)
    out = submission.call("attention_weights", q, k)
    expected = attention_weights(q, k)
    expect_tensor(out, shape=expected.shape, name="attention_weights(q, k)")
    if _close(out, attention_weights(q, k, scale=1.0)):
        raise CheckFailure("your weights are softmax(q k^T) without the 1/sqrt(d_k) factor: "
                           "divide the scores by sqrt(d_k), d_k = q.size(-1)")
    if _close(out, torch.softmax(q @ k.transpose(-2, -1) / 4.0, dim=-2)):
        raise CheckFailure("the softmax runs over the queries (dim=-2): it must run over the "
                           "keys (dim=-1) so that each row sums to 1")
    assert_close(out, expected, **TOL, name="attention_weights(q, k)",
                 hint="scores = q @ k.transpose(-2, -1) / sqrt(d_k), then softmax over dim=-1")


@pytest.mark.pitfall(SCALE)
def test_explicit_scale(submission):
    """An explicit `scale` replaces the default 1/sqrt(d_k)."""
    q, k = _randn(3, 5, 8, seed=3), _randn(3, 4, 8, seed=4)
    out = submission.call("attention_weights", q, k, scale=0.3)
    assert_close(out, attention_weights(q, k, scale=0.3), **TOL,
                 name="attention_weights(q, k, scale=0.3)",
                 hint="when scale is given, multiply the scores by it instead of 1/sqrt(d_k)")


@pytest.mark.pitfall(AFTER)
def test_rows_are_distributions_under_mask(submission):
    """With a bool mask, blocked keys get exactly 0 and every row still sums to 1."""
    q, k = _randn(2, 2, 6, 8, seed=5), _randn(2, 2, 7, 8, seed=6)
    mask = _some_visible_mask(2, 2, 6, 7, seed=7)
    out = expect_tensor(submission.call("attention_weights", q, k, mask), shape=(2, 2, 6, 7),
                        name="attention_weights(q, k, mask)")
    if (out.masked_select(~mask) != 0).any():
        raise CheckFailure("a key blocked by the mask (False) received a non-zero weight")
    if (out < 0).any():
        raise CheckFailure("some weights are negative: they should be probabilities")
    sums = out.sum(-1)
    if not torch.allclose(sums, torch.ones_like(sums), atol=1e-10):
        raise CheckFailure(
            f"with a mask, rows sum to values between {sums.min().item():.3f} and "
            f"{sums.max().item():.3f} instead of 1. Hint: set blocked scores to -inf *before* "
            "the softmax; zeroing weights after it leaves rows that no longer sum to 1")


@pytest.mark.weight(2)
@pytest.mark.pitfall(AFTER)
def test_bool_mask_matches_reference(submission):
    """A broadcast causal + padding mask (B, 1, T, T) gives the reference weights."""
    q, k = _randn(2, 3, 5, 8, seed=8), _randn(2, 3, 5, 8, seed=9)
    mask = _combined_mask()  # (2, 1, 5, 5), broadcast over the 3 heads
    out = submission.call("attention_weights", q, k, mask)
    assert_close(out, attention_weights(q, k, mask), **TOL, name="attention_weights(q, k, mask)",
                 hint="scores.masked_fill(~mask, float('-inf')) before the softmax; the mask "
                      "broadcasts over the head axis")


def test_float_mask_is_added(submission):
    """A float mask is a bias added to the scores (finite values and -inf)."""
    q, k = _randn(2, 4, 6, seed=10), _randn(2, 5, 6, seed=11)
    bias = _randn(2, 4, 5, seed=12)
    out = submission.call("attention_weights", q, k, bias)
    assert_close(out, attention_weights(q, k, bias), **TOL,
                 name="attention_weights with a float bias",
                 hint="a float mask is added to the (scaled) scores before the softmax")
    additive = mask_to_additive(_some_visible_mask(2, 4, 5, seed=13), torch.float64)  # 0 / -inf
    out = submission.call("attention_weights", q, k, additive)
    assert_close(out, attention_weights(q, k, additive), **TOL,
                 name="attention_weights with a 0/-inf float mask")


@pytest.mark.structural
@pytest.mark.weight(0.5)
def test_integer_mask_is_rejected(submission):
    """An integer 0/1 mask raises ValueError instead of being added to the scores."""
    q, k = _randn(3, 4, seed=14), _randn(3, 4, seed=15)
    mask = torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.int64)
    with expect_value_error("an int64 mask", "an int64 0/1 mask was accepted: adding 0/1 to "
                            "the scores masks nothing. Raise ValueError for masks that are "
                            "neither bool nor floating point"):
        submission.call("attention_weights", q, k, mask)


@pytest.mark.pitfall(NAN)
def test_fully_masked_row_is_zero(submission):
    """A query with no visible key gets all-zero weights, never NaN."""
    q, k = _randn(2, 3, 4, seed=16), _randn(2, 5, 4, seed=17)
    mask = _some_visible_mask(2, 3, 5, seed=18)
    mask[0, 1] = False  # batch 0, query 1 sees nothing
    mask[1, 2] = False
    out = submission.call("attention_weights", q, k, mask)
    if isinstance(out, torch.Tensor) and torch.isnan(out).any():
        raise CheckFailure("NaN in the weights of a query whose keys are all masked. Hint: find "
                           "rows whose scores are all -inf and define their weights as 0")
    expected = attention_weights(q, k, mask)
    assert_close(out, expected, **TOL, name="attention_weights with fully masked rows",
                 hint="a fully masked row is all zeros; the other rows are unchanged")
    bias = mask_to_additive(mask, torch.float64)  # the same mask as a 0/-inf float bias
    out = submission.call("attention_weights", q, k, bias)
    assert_close(out, expected, **TOL, name="attention_weights with a fully -inf float row",
                 hint="a row that is all -inf after adding a float mask must also give zeros")


@pytest.mark.pitfall(NAN)
def test_fully_masked_row_has_zero_gradient(submission):
    """Backpropagating through a fully masked row gives finite gradients, not NaN."""
    q, k, v = _randn(1, 3, 4, seed=19), _randn(1, 4, 4, seed=20), _randn(1, 4, 2, seed=21)
    bool_mask = torch.ones(1, 3, 4, dtype=torch.bool)
    bool_mask[0, 2] = False  # query 2 sees nothing
    code = (
        "q = inputs['q'].clone().requires_grad_(True)\n"
        "k = inputs['k'].clone().requires_grad_(True)\n"
        "v = inputs['v'].clone().requires_grad_(True)\n"
        "out = scaled_dot_product_attention(q, k, v, inputs['mask'])\n"
        "out.sum().backward()\n"
        "result = (out.detach(), q.grad, k.grad, v.grad)\n"
    )
    # A bool mask, then the same mask as a 0/-inf float bias: with the bias, the gradient
    # of softmax(-inf, ..., -inf) reaches q and k unless the row is handled before the softmax.
    float_mask = mask_to_additive(bool_mask, torch.float64)
    for mask, kind in ((bool_mask, "bool"), (float_mask, "float -inf")):
        got = submission.run(code, q=q, k=k, v=v, mask=mask)
        if not isinstance(got, tuple) or len(got) != 4 or any(g is None for g in got):
            raise CheckFailure("could not backpropagate through your scaled_dot_product_attention "
                               "(is the output detached from q, k, v?)")
        out, dq, dk, dv = got
        if isinstance(out, torch.Tensor) and torch.isnan(out).any():
            raise CheckFailure(f"with a {kind} mask that hides every key from one query, the "
                               "output contains NaN: that row's weights must be zeros")
        for name, grad in (("q", dq), ("k", dk), ("v", dv)):
            if isinstance(grad, torch.Tensor) and torch.isnan(grad).any():
                raise CheckFailure(
                    f"with a {kind} mask that hides every key from one query, the gradient with "
                    f"respect to {name} contains NaN. Zeroing the NaN weights after the softmax "
                    "fixes the forward pass only: give a fully masked row finite scores *before* "
                    "the softmax, then zero its weights")
        q_, k_, v_ = (t.clone().requires_grad_(True) for t in (q, k, v))
        ref = scaled_dot_product_attention(q_, k_, v_, mask)
        ref.sum().backward()
        assert_close(out, ref.detach(), **TOL, name=f"the output ({kind} mask)",
                     hint="the query that sees no key gets all-zero weights, so its output "
                          "row is 0; every other row is the usual masked attention")
        for name, grad, expected in (("q", dq, q_.grad), ("k", dk, k_.grad), ("v", dv, v_.grad)):
            assert_close(grad, expected, **TOL,
                         name=f"the gradient with respect to {name} ({kind} mask)")


@pytest.mark.weight(2)
def test_sdpa_matches_reference(submission):
    """scaled_dot_product_attention(q, k, v, mask) equals the reference, also with d_v != d_k."""
    q, k, v = _randn(2, 3, 5, 8, seed=22), _randn(2, 3, 5, 8, seed=23), _randn(2, 3, 5, 6, seed=24)
    mask = _combined_mask()
    out = submission.call("scaled_dot_product_attention", q, k, v, mask)
    assert_close(out, scaled_dot_product_attention(q, k, v, mask), **TOL,
                 name="scaled_dot_product_attention(q, k, v, mask)",
                 hint="the output is attention_weights(q, k, mask, scale) @ v: (..., T_q, d_v)")
    out = submission.call("scaled_dot_product_attention", q, k, v, scale=0.5)
    assert_close(out, scaled_dot_product_attention(q, k, v, scale=0.5), **TOL,
                 name="scaled_dot_product_attention(q, k, v, scale=0.5)",
                 hint="pass `scale` on to the weights")


def test_sdpa_matches_pytorch(submission):
    """Agrees with torch.nn.functional.scaled_dot_product_attention (float32, bool mask)."""
    q, k, v = (_randn(2, 4, 6, 16, seed=s, dtype=torch.float32) for s in (25, 26, 27))
    mask = _some_visible_mask(2, 1, 6, 6, seed=28)
    out = submission.call("scaled_dot_product_attention", q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    expect_tensor(out, shape=expected.shape, dtype=torch.float32,
                  name="scaled_dot_product_attention on float32 inputs")
    assert_close(out, expected, atol=1e-5, rtol=1e-4, name="scaled_dot_product_attention",
                 hint="True in the mask means *may attend*")


@pytest.mark.pitfall(AFTER)
@pytest.mark.property
def test_causal_mask_keeps_future_out(submission):
    """Under a causal mask, changing later keys and values never changes earlier outputs."""
    T = 6
    q, k, v = _randn(1, 2, T, 8, seed=29), _randn(1, 2, T, 8, seed=30), _randn(1, 2, T, 4, seed=31)
    mask = causal_mask(T)
    base = expect_tensor(submission.call("scaled_dot_product_attention", q, k, v, mask),
                         shape=(1, 2, T, 4), name="scaled_dot_product_attention(q, k, v, causal)")
    k2, v2 = k.clone(), v.clone()
    k2[..., 4:, :] += 3.0 * _randn(1, 2, 2, 8, seed=32)  # change keys and values 4, 5
    v2[..., 4:, :] += 3.0
    moved = expect_tensor(submission.call("scaled_dot_product_attention", q, k2, v2, mask),
                          shape=(1, 2, T, 4), name="scaled_dot_product_attention(q, k, v, causal)")
    if not torch.allclose(moved[..., :4, :], base[..., :4, :], atol=1e-10):
        raise CheckFailure(
            "changing keys/values 4 and 5 changed the outputs of queries 0..3: information from "
            "the future leaks through the mask. Hint: blocked scores must be -inf before the "
            "softmax, so blocked keys do not even enter its denominator")


@pytest.mark.property
def test_permutation_equivariance(submission):
    """Without a mask, shuffling the tokens shuffles the output the same way: f(PX) = P f(X)."""
    x = _randn(1, 7, 8, seed=33)
    perm = torch.tensor([4, 0, 6, 2, 1, 5, 3])
    # (separate copies: tensors sent to the kernel must not share memory)
    out = expect_tensor(submission.call("scaled_dot_product_attention", x, x.clone(), x.clone()),
                        shape=(1, 7, 8), name="scaled_dot_product_attention(x, x, x)")
    xp = x[:, perm]
    out_p = submission.call("scaled_dot_product_attention", xp, xp.clone(), xp.clone())
    assert_close(out_p, out[:, perm], **TOL, name="f(PX)",
                 hint="self-attention without a mask must be permutation-equivariant: "
                      "f(PX) = P f(X); does your code depend on token positions?")
