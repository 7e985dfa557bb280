"""Hidden checks for Exercise 3: ``split_heads``, ``merge_heads`` and ``MultiHeadAttention``.

The student's module is built in their kernel and loaded with weights made here (by
name: ``q_proj``, ``k_proj``, ``v_proj``, ``out_proj``), then compared with
:class:`toolkit.attention.MultiHeadAttention` and with ``torch.nn.MultiheadAttention``
holding the same weights.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.attention import MultiHeadAttention, merge_heads, split_heads
from toolkit.masks import causal_mask, padding_mask

pytestmark = pytest.mark.grade_cell("test_multi_head_attention")

HEADS = "Heads split along the wrong axis"
MERGE = "Heads merged without undoing the transpose"
NAMES = "Parameter names differ from the specification"
CROSS = "Cross-attention takes keys and values from the wrong sequence"

D_MODEL, N_HEADS = 12, 3
INIT = {"d_model": D_MODEL, "n_heads": N_HEADS}
TOL = dict(atol=2e-5, rtol=1e-4)  # float32 modules


def _randn(*shape, seed: int, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _reference(seed: int = 0, **init) -> MultiHeadAttention:
    torch.manual_seed(seed)
    return MultiHeadAttention(**{**INIT, **init}).eval()


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.weight(2)
@pytest.mark.pitfall(HEADS)
def test_split_heads(submission):
    """split_heads gives (B, h, T, d_k); head i holds features i*d_k..(i+1)*d_k-1 of each token."""
    x = _randn(2, 5, D_MODEL, seed=1, dtype=torch.float64)
    expected = split_heads(x, N_HEADS)
    got = expect_tensor(submission.call("split_heads", x, N_HEADS), name="split_heads(x, 3)")
    if got.shape != expected.shape:
        raise CheckFailure(f"split_heads of a (2, 5, 12) tensor into 3 heads has shape "
                           f"{tuple(got.shape)}, expected (B, h, T, d_k) = {tuple(expected.shape)}")
    if torch.equal(got, x.reshape(2, N_HEADS, 5, D_MODEL // N_HEADS)):
        raise CheckFailure("your heads are cut along the sequence: view(B, h, T, d_k) reads the "
                           "memory in order and mixes tokens into heads. View as (B, T, h, d_k), "
                           "then transpose(1, 2)")
    assert_close(got, expected, atol=0, rtol=0, name="split_heads(x, 3)",
                 hint="head i of token t must hold x[b, t, i*d_k:(i+1)*d_k]")


@pytest.mark.pitfall(MERGE)
def test_merge_heads(submission):
    """merge_heads((B, h, T, d_k)) is (B, T, h*d_k) and undoes split_heads."""
    x = _randn(2, N_HEADS, 5, 4, seed=2, dtype=torch.float64)
    expected = merge_heads(x)
    got = expect_tensor(submission.call("merge_heads", x), shape=expected.shape,
                        name="merge_heads(x)")
    if torch.equal(got, x.reshape(2, 5, D_MODEL)):
        raise CheckFailure("merge_heads reshapes (B, h, T, d_k) directly to (B, T, h*d_k): "
                           "transpose(1, 2) back to (B, T, h, d_k) first")
    assert_close(got, expected, atol=0, rtol=0, name="merge_heads(x)",
                 hint="merge_heads(split_heads(x, h)) must give x back")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names_and_shapes(submission):
    """Parameters are q_proj, k_proj, v_proj, out_proj: nn.Linear(d_model, d_model, bias=bias)."""
    for bias in (True, False):
        expected = _reference(bias=bias).state_dict()
        got = submission.module_state("MultiHeadAttention", init={**INIT, "bias": bias})
        if not isinstance(got, dict):
            raise CheckFailure("could not read the parameters of your MultiHeadAttention")
        if sorted(got) != sorted(expected):
            raise CheckFailure(f"MultiHeadAttention(d_model=12, n_heads=3, bias={bias}) has "
                               f"parameters {sorted(got)}, expected {sorted(expected)}")
        for name, tensor in expected.items():
            expect_tensor(got[name], shape=tensor.shape, name=f"parameter {name}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(HEADS)
def test_self_attention_matches_reference(submission):
    """Self-attention with loaded weights equals the reference (with and without a mask)."""
    ref = _reference(seed=3)
    x = _randn(2, 5, D_MODEL, seed=4)
    got = submission.module("MultiHeadAttention", x, init=INIT, state=_state(ref))
    with torch.no_grad():
        expected = ref(x)
    assert_close(got, expected, **TOL, name="MultiHeadAttention(x)",
                 hint="project, split the feature axis into heads, attend, merge, out_proj")
    mask = causal_mask(5)
    got = submission.module("MultiHeadAttention", x, init=INIT, state=_state(ref), mask=mask)
    with torch.no_grad():
        expected = ref(x, mask=mask)
    assert_close(got, expected, **TOL, name="MultiHeadAttention(x, mask=causal)",
                 hint="pass the mask on to your scaled_dot_product_attention")


@pytest.mark.weight(2)
@pytest.mark.pitfall(HEADS)
def test_matches_torch_multihead_attention(submission):
    """Equals torch.nn.MultiheadAttention with the same weights, under a causal mask."""
    torch.manual_seed(5)
    torch_mha = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).eval()
    with torch.no_grad():  # PyTorch initialises the biases to 0: make them matter
        torch_mha.in_proj_bias.normal_()
        torch_mha.out_proj.bias.normal_()
    w_q, w_k, w_v = torch_mha.in_proj_weight.detach().chunk(3)
    b_q, b_k, b_v = torch_mha.in_proj_bias.detach().chunk(3)
    state = {
        "q_proj.weight": w_q, "q_proj.bias": b_q,
        "k_proj.weight": w_k, "k_proj.bias": b_k,
        "v_proj.weight": w_v, "v_proj.bias": b_v,
        "out_proj.weight": torch_mha.out_proj.weight.detach(),
        "out_proj.bias": torch_mha.out_proj.bias.detach(),
    }
    x = _randn(3, 6, D_MODEL, seed=6)
    mask = causal_mask(6)
    with torch.no_grad():
        # PyTorch's attn_mask uses True = blocked, the opposite of ours.
        expected, _ = torch_mha(x, x, x, attn_mask=~mask, need_weights=False)
    got = submission.module("MultiHeadAttention", x, init=INIT, state=state, mask=mask)
    assert_close(got, expected, **TOL, name="MultiHeadAttention vs torch.nn.MultiheadAttention",
                 hint="same weights must give the same output: check d_k = d_model / h, the "
                      "head split and merge, and the 1/sqrt(d_k) scale")


@pytest.mark.weight(2)
@pytest.mark.pitfall(CROSS)
def test_cross_attention(submission):
    """Cross-attention: queries from x_q, keys and values from x_kv (another length), padding."""
    ref = _reference(seed=7)
    x_q, x_kv = _randn(2, 3, D_MODEL, seed=8), _randn(2, 7, D_MODEL, seed=9)
    mask = padding_mask(torch.tensor([7, 4]))  # (2, 1, 1, 7)
    got = submission.module("MultiHeadAttention", x_q, x_kv, init=INIT, state=_state(ref),
                            mask=mask)
    with torch.no_grad():
        expected = ref(x_q, x_kv, mask=mask)
    expect_tensor(got, shape=(2, 3, D_MODEL), name="MultiHeadAttention(x_q, x_kv)")
    assert_close(got, expected, **TOL, name="MultiHeadAttention(x_q, x_kv, mask)",
                 hint="queries come from x_q; keys and values from x_kv "
                      "(k_proj(x_kv), v_proj(x_kv))")


@pytest.mark.property
def test_permutation_equivariance(submission):
    """Without a mask, MHA(PX) = P MHA(X): multi-head self-attention ignores token order."""
    ref = _reference(seed=10)
    x = _randn(1, 6, D_MODEL, seed=11)
    perm = torch.tensor([2, 5, 0, 4, 1, 3])
    out = expect_tensor(submission.module("MultiHeadAttention", x, init=INIT, state=_state(ref)),
                        shape=(1, 6, D_MODEL), name="MultiHeadAttention(x)")
    out_p = submission.module("MultiHeadAttention", x[:, perm], init=INIT, state=_state(ref))
    assert_close(out_p, out[:, perm], **TOL, name="MHA(PX)",
                 hint="shuffling the tokens must shuffle the output rows the same way; a head "
                      "split along the sequence axis mixes tokens and breaks this")
