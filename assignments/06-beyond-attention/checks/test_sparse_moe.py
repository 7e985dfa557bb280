"""Hidden checks for Exercise 2: ``apply_capacity``, ``sorted_dispatch`` and ``SparseMoE``.

The experts given to ``sorted_dispatch`` are built inside the student's kernel from
weights made here (``tanh(x W^T + b)``, recording how often they are called); the
references are :mod:`toolkit.moe`'s capacity rule, per-expert loop and layer.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autograder.protocol.checklib import CheckFailure, assert_close, assert_equal, expect_tensor
from toolkit.moe import SparseMoE, apply_capacity, naive_dispatch, top_k_gating

pytestmark = pytest.mark.grade_cell("test_sparse_moe")

DROPPED = "Dropped tokens silently zeroed without being counted"
OVERWRITE = "Combine overwrites a token's answers instead of adding them"
NAMES = "Parameter names differ from the specification"

EXPERTS = (
    "class _CheckExpert(torch.nn.Module):\n"
    "    def __init__(self, W, b):\n"
    "        super().__init__()\n"
    "        self.W, self.b, self.rows = W, b, []\n"
    "    def forward(self, x):\n"
    "        self.rows.append(int(x.shape[0]))\n"
    "        return torch.tanh(x @ self.W.T + self.b)\n"
    "_experts = [_CheckExpert(W, b) for W, b in zip(inputs['W'], inputs['b'])]\n"
    "_out = sorted_dispatch(inputs['x'], inputs['gates'], inputs['indices'], _experts,\n"
    "                       inputs.get('kept'))\n"
    "result = (_out, [e.rows for e in _experts])\n"
)


class _Expert(nn.Module):
    def __init__(self, W, b):
        super().__init__()
        self.W, self.b = W, b

    def forward(self, x):
        return torch.tanh(x @ self.W.T + self.b)


def _randn(*shape, seed: int, dtype=torch.float64) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _routing(n_tokens, n_experts, k, seed):
    return top_k_gating(_randn(n_tokens, n_experts, seed=seed), k, "softmax_then_topk")


# ---------------------------------------------------------------------------- capacity


@pytest.mark.weight(2)
@pytest.mark.pitfall(DROPPED)
def test_apply_capacity_known_case(submission):
    """Capacity 2: first choices before second choices, and every drop counted."""
    indices = torch.tensor([[2, 0], [2, 1], [0, 2], [2, 0], [1, 2]])
    expected_kept, expected_dropped = apply_capacity(indices, 3, 2)  # 4 dropped
    got = submission.call("apply_capacity", indices, 3, 2)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("apply_capacity should return a pair (kept, n_dropped)")
    kept, n_dropped = got
    assert_equal(kept, expected_kept, name="kept (capacity 2)",
                 hint="places go to every token's first choice in token order, then to the "
                      "second choices; an expert's (capacity + 1)-th arrival is dropped")
    if n_dropped == 0:
        raise CheckFailure(f"{expected_dropped} assignments did not fit, but n_dropped is 0: a "
                           "drop must be counted (return (~kept).sum() as an int)")
    assert_equal(n_dropped, expected_dropped, name="n_dropped")


@pytest.mark.pitfall(DROPPED)
@pytest.mark.parametrize("capacity", [0, 9, 17])
def test_apply_capacity_random(submission, capacity):
    """60 tokens, top-2 of 5 experts, capacities 0, 9 and 17 (24 would fit an even split)."""
    _, indices = _routing(60, 5, 2, seed=1)
    expected = apply_capacity(indices, 5, capacity)
    got = submission.call("apply_capacity", indices, 5, capacity)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("apply_capacity should return a pair (kept, n_dropped)")
    assert_equal(got[0], expected[0], name=f"kept (capacity {capacity})")
    assert_equal(got[1], expected[1], name=f"n_dropped (capacity {capacity})")


# ---------------------------------------------------------------------------- dispatch


def _dispatch(submission, x, gates, indices, W, b, kept=None):
    inputs = dict(x=x, gates=gates, indices=indices, W=W, b=b)
    if kept is not None:
        inputs["kept"] = kept
    got = submission.run(EXPERTS, **inputs)
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("sorted_dispatch did not return a tensor")
    return got


@pytest.mark.weight(2)
@pytest.mark.pitfall(OVERWRITE)
@pytest.mark.parametrize("k", [1, 2, 3])
def test_sorted_dispatch_equals_the_loop(submission, k):
    """y_t = sum_j g_tj E_{i_tj}(x_t) for 40 tokens, top-k of 6 experts."""
    x = _randn(40, 5, seed=2)
    W, b = _randn(6, 5, 5, seed=3), _randn(6, 5, seed=4)
    gates, indices = _routing(40, 6, k, seed=5 + k)
    out, _ = _dispatch(submission, x, gates, indices, W, b)
    experts = [_Expert(W[e], b[e]) for e in range(6)]
    expected = naive_dispatch(x, gates, indices, experts)
    if k > 1 and isinstance(out, torch.Tensor) and out.shape == expected.shape:
        # What overwriting keeps: one of each token's k gated answers, whichever was
        # written last (which one depends on the sort, so accept any of them).
        answers = torch.stack([torch.stack([gates[t, j] * experts[int(indices[t, j])](x[t])
                                            for j in range(k)]) for t in range(40)])
        kept_one = ((out.double()[:, None] - answers).abs().amax(-1) < 1e-9).any(-1)
        if not torch.allclose(out.double(), expected, atol=1e-9) and kept_one.float().mean() > 0.5:
            raise CheckFailure("tokens keep the answer of only one of their k experts: add the "
                               "gated answers with index_add (a token appears k times)")
    assert_close(out, expected, atol=1e-12, rtol=1e-10, name=f"sorted_dispatch (k={k})",
                 hint="gather x by token, run each expert on its block, multiply by the gates, "
                      "index_add back at the tokens' rows")


@pytest.mark.pitfall(DROPPED)
def test_sorted_dispatch_skips_dropped(submission):
    """Assignments with kept False contribute nothing."""
    x = _randn(30, 4, seed=8)
    W, b = _randn(5, 4, 4, seed=9), _randn(5, 4, seed=10)
    gates, indices = _routing(30, 5, 2, seed=11)
    kept, _ = apply_capacity(indices, 5, 7)
    out, rows = _dispatch(submission, x, gates, indices, W, b, kept)
    experts = [_Expert(W[e], b[e]) for e in range(5)]
    assert_close(out, naive_dispatch(x, gates, indices, experts, kept), atol=1e-12, rtol=1e-10,
                 name="sorted_dispatch with kept",
                 hint="leave the assignments with kept False out before sorting")
    sent = sum(sum(r) for r in rows)
    if sent != int(kept.sum()):
        raise CheckFailure(f"the experts processed {sent} rows but only {int(kept.sum())} "
                           "assignments were kept: dropped ones must not reach an expert")


@pytest.mark.structural
def test_each_expert_runs_once_on_its_block(submission):
    """Dispatch: every expert is called at most once, with exactly its own tokens."""
    x = _randn(50, 4, seed=12)
    W, b = _randn(7, 4, 4, seed=13), _randn(7, 4, seed=14)
    gates, indices = _routing(50, 7, 2, seed=15)
    out, rows = _dispatch(submission, x, gates, indices, W, b)
    expect_tensor(out, shape=(50, 4), name="sorted_dispatch(x, ...)")
    counts = torch.bincount(indices.reshape(-1), minlength=7).tolist()
    for e, (calls, count) in enumerate(zip(rows, counts)):
        if len(calls) > 1 or sum(calls) != count:
            raise CheckFailure(f"expert {e} was called {len(calls)} times with {sum(calls)} rows; "
                               f"it should run once on its {count} assigned tokens (one "
                               "contiguous block after sorting by expert)")


# ---------------------------------------------------------------------------- layer

INIT = dict(d_model=8, d_ff=12, n_experts=4, k=2)


def _reference(seed=0, **init):
    torch.manual_seed(seed)
    return SparseMoE(**{**INIT, **init}).eval()


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _layer(submission, ref, x, init):
    got = submission.module("SparseMoE", x, init={**INIT, **init}, state=_state(ref))
    if not isinstance(got, tuple) or len(got) != 2 or not isinstance(got[1], dict):
        raise CheckFailure("SparseMoE.forward should return (y, info) with info a dict")
    return got


@pytest.mark.weight(2)
def test_layer_matches_reference(submission):
    """SparseMoE (Mixtral gates, no capacity) equals the reference with the same weights."""
    ref = _reference(seed=1)
    x = _randn(2, 6, 8, seed=16, dtype=torch.float32)
    y, info = _layer(submission, ref, x, {})
    with torch.no_grad():
        expected, expected_info = ref(x)
    assert_close(y, expected, atol=1e-5, rtol=1e-4, name="SparseMoE(x)[0]",
                 hint="router logits -> top_k_gating -> sorted_dispatch on the flattened tokens")
    assert_close(info.get("router_logits"), expected_info["router_logits"], atol=1e-5,
                 rtol=1e-4, name="info['router_logits'] (batch * seq, n_experts)")
    assert_equal(info.get("n_dropped"), 0, name="info['n_dropped'] without a capacity")


@pytest.mark.weight(2)
@pytest.mark.pitfall(DROPPED)
def test_layer_with_capacity_counts_drops(submission):
    """capacity_factor 0.5: the dropped assignments are left out and counted."""
    ref = _reference(seed=2, capacity_factor=0.5)
    x = _randn(2, 8, 8, seed=17, dtype=torch.float32)
    y, info = _layer(submission, ref, x, {"capacity_factor": 0.5})
    with torch.no_grad():
        expected, expected_info = ref(x)
    assert_close(y, expected, atol=1e-5, rtol=1e-4, name="SparseMoE(x) with capacity_factor=0.5",
                 hint="capacity = expert_capacity(n_tokens, n_experts, k, capacity_factor); "
                      "pass kept from apply_capacity to the dispatch")
    if info.get("n_dropped") == 0:
        raise CheckFailure(f"{expected_info['n_dropped']} assignments were dropped but "
                           "info['n_dropped'] is 0: report the count from apply_capacity")
    assert_equal(info.get("n_dropped"), expected_info["n_dropped"], name="info['n_dropped']")


def test_layer_switch_gates_and_shared_expert(submission):
    """Switch gates (softmax over all experts) and one always-on shared expert."""
    init = {"gating": "softmax_then_topk", "n_shared_experts": 1, "k": 1}
    ref = _reference(seed=3, **init)
    x = _randn(1, 7, 8, seed=18, dtype=torch.float32)
    y, _ = _layer(submission, ref, x, init)
    with torch.no_grad():
        expected, _ = ref(x)
    assert_close(y, expected, atol=1e-5, rtol=1e-4, name="SparseMoE with a shared expert",
                 hint="pass self.gating and self.renormalize to your gating, and add every "
                      "shared expert's output for every token, without a gate")


def test_layer_renormalized_top2_and_two_shared_experts(submission):
    """Switch gates renormalised over the k = 2 chosen experts, and two shared experts."""
    init = {"gating": "softmax_then_topk", "renormalize": True, "n_shared_experts": 2}
    ref = _reference(seed=5, **init)
    x = _randn(2, 5, 8, seed=20, dtype=torch.float32)
    y, _ = _layer(submission, ref, x, init)
    with torch.no_grad():
        expected, _ = ref(x)
    assert_close(y, expected, atol=1e-5, rtol=1e-4,
                 name="SparseMoE with renormalize=True and two shared experts",
                 hint="pass self.renormalize on to your gating, and add the output of every "
                      "shared expert, not only the first")


@pytest.mark.property
def test_layer_without_capacity_ignores_token_order(submission):
    """Without a capacity limit, shuffling the tokens shuffles the output the same way
    (each token's route depends on that token only)."""
    ref = _reference(seed=4)
    x = _randn(1, 9, 8, seed=19, dtype=torch.float32)
    perm = torch.tensor([4, 8, 0, 2, 7, 1, 6, 3, 5])
    y, _ = _layer(submission, ref, x, {})
    y_p, _ = _layer(submission, ref, x[:, perm].contiguous(), {})
    expect_tensor(y, shape=(1, 9, 8), name="SparseMoE(x)[0]")
    assert_close(y_p, y[:, perm], atol=1e-5, rtol=1e-4, name="SparseMoE on shuffled tokens",
                 hint="route, dispatch and combine each token on its own row")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names(submission):
    """Parameters: gate (the router), experts.{e}.gate_proj/up_proj/down_proj, shared_experts."""
    init = {**INIT, "n_shared_experts": 1}
    expected = _reference(n_shared_experts=1).state_dict()
    got = submission.module_state("SparseMoE", init=init)
    if not isinstance(got, dict):
        raise CheckFailure("could not read the parameters of your SparseMoE")
    if sorted(got) != sorted(expected):
        raise CheckFailure(f"SparseMoE has parameters {sorted(got)}, expected {sorted(expected)}")
    for name, tensor in expected.items():
        expect_tensor(got[name], shape=tensor.shape, name=f"parameter {name}")
