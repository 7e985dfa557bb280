"""toolkit.moe: gate conventions, the balancing losses (= Hugging Face's Mixtral), capacity,
naive = sort-based dispatch, the layer (= Hugging Face's MixtralSparseMoeBlock), counts."""

from __future__ import annotations

import pytest
import torch

from toolkit.moe import (
    MIXTRAL_8X7B,
    SharedExpertMoE,
    SparseMoE,
    apply_capacity,
    expert_capacity,
    expert_load,
    load_balancing_loss,
    moe_parameter_counts,
    naive_dispatch,
    router_z_loss,
    sorted_dispatch,
    top_k_gating,
)


def _randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ---------------------------------------------------------------------------- gating


def test_topk_then_softmax_is_softmax_over_the_selected_logits():
    logits = _randn(2, 5, 8)
    gates, idx = top_k_gating(logits, 3, "topk_then_softmax")
    assert gates.shape == idx.shape == (2, 5, 3) and idx.dtype == torch.int64
    for b in range(2):
        for t in range(5):
            chosen = logits[b, t].argsort(descending=True)[:3]
            assert torch.equal(idx[b, t], chosen)
            torch.testing.assert_close(gates[b, t], torch.softmax(logits[b, t, chosen], -1))


def test_softmax_then_topk_keeps_each_tokens_own_probabilities():
    logits = _randn(6, 8, seed=1)
    gates, idx = top_k_gating(logits, 2, "softmax_then_topk")
    probs = torch.softmax(logits, -1)
    for t in range(6):
        torch.testing.assert_close(gates[t], probs[t, idx[t]])
    assert (gates.sum(-1) < 1).all()
    renormalised, _ = top_k_gating(logits, 2, "softmax_then_topk", renormalize=True)
    torch.testing.assert_close(renormalised, gates / gates.sum(-1, keepdim=True))
    # Renormalised softmax-then-top-k is Mixtral's convention, to rounding.
    mixtral, _ = top_k_gating(logits, 2, "topk_then_softmax")
    torch.testing.assert_close(renormalised, mixtral)


def test_top1_switch_gate_is_the_probability():
    logits = _randn(4, 5, seed=2)
    gates, idx = top_k_gating(logits, 1, "softmax_then_topk")
    torch.testing.assert_close(gates[:, 0], torch.softmax(logits, -1).amax(-1))
    ones = torch.ones(4, 1, dtype=logits.dtype)
    assert torch.equal(top_k_gating(logits, 1, "topk_then_softmax")[0], ones)


def test_gating_rejects_bad_arguments():
    with pytest.raises(ValueError, match="gating"):
        top_k_gating(_randn(2, 4), 1, "mixtral")
    with pytest.raises(ValueError, match="k must"):
        top_k_gating(_randn(2, 4), 5)


# ---------------------------------------------------------------------------- losses


@pytest.mark.parametrize("k", [1, 2])
def test_load_balancing_loss_equals_hugging_face_mixtral(k):
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    layers = tuple(_randn(3 * 5, 8, seed=s, dtype=torch.float32) for s in range(3))
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 0]])
    for attention_mask in (None, mask):
        expected = mixtral.load_balancing_loss_func(layers, 8, k, attention_mask)
        got = load_balancing_loss(layers, k, attention_mask)
        torch.testing.assert_close(got, expected)
    # One tensor is one layer.
    torch.testing.assert_close(load_balancing_loss(layers[0], k),
                               mixtral.load_balancing_loss_func(layers[:1], 8, k))


def test_switch_form_alpha_n_sum_f_p():
    logits = _randn(40, 4, seed=3)
    probs = torch.softmax(logits, -1)
    f = torch.stack([(probs.argmax(-1) == i).double().mean() for i in range(4)])
    P = probs.mean(0)
    torch.testing.assert_close(load_balancing_loss(logits, 1, alpha=0.01), 0.01 * 4 * (f * P).sum())


def test_balanced_routing_reaches_the_floor_and_gradient_flows_through_p_only():
    # Every expert is first choice of exactly one token out of 4, probabilities near uniform.
    logits = (torch.eye(4, dtype=torch.float64) * 1e-3).requires_grad_(True)
    loss = load_balancing_loss(logits, 1, alpha=0.5)
    torch.testing.assert_close(loss, torch.tensor(0.5, dtype=torch.float64), atol=1e-6, rtol=0)
    loss.backward()
    assert logits.grad is not None and logits.grad.abs().sum() > 0
    # Collapse (every token to expert 0) costs more.
    collapsed = torch.tensor([[3.0, 0, 0, 0]] * 4, dtype=torch.float64)
    assert load_balancing_loss(collapsed, 1) > 1.5


def test_router_z_loss():
    logits = _randn(6, 5, seed=4)
    torch.testing.assert_close(router_z_loss(logits), torch.logsumexp(logits, -1).square().mean())
    mask = torch.tensor([[1, 1, 0], [1, 0, 0]])
    keep = mask.reshape(-1).bool()
    torch.testing.assert_close(router_z_loss(logits, mask),
                               torch.logsumexp(logits[keep], -1).square().mean())
    with pytest.raises(ValueError, match="attention_mask"):
        router_z_loss(logits, torch.ones(2, 2))


# ---------------------------------------------------------------------------- capacity


def test_expert_capacity():
    assert expert_capacity(100, 8, 2, 1.0) == 25
    assert expert_capacity(10, 4, 1, 1.25) == 4  # ceil(3.125)
    # Exact products: 1.1 * 100 / 10 = 11 and 1.15 * 2 * 20 / 4 = 11.5 (not 11.000...02)
    assert expert_capacity(100, 10, 1, 1.1) == 11
    assert expert_capacity(20, 4, 2, 1.15) == 12
    assert expert_capacity(30, 10, 1, 1.1) == 4  # ceil(3.3)
    with pytest.raises(ValueError, match="capacity_factor"):
        expert_capacity(10, 4, 1, 0.0)


def test_apply_capacity_first_choices_first_and_counts_drops():
    indices = torch.tensor([[0, 1], [0, 1], [0, 2], [1, 0]])
    kept, n_dropped = apply_capacity(indices, 3, capacity=2)
    # Expert 0: first choices of tokens 0, 1 fit; token 2's first choice and token 3's
    # second choice do not. Expert 1: token 3's first choice, then token 0's second.
    expected = torch.tensor([[True, True], [True, False], [False, True], [True, False]])
    assert torch.equal(kept, expected) and n_dropped == 3
    loads = expert_load(indices[kept][:, None], 3)
    assert (loads <= 2).all()
    kept, n_dropped = apply_capacity(indices, 3, capacity=8)
    assert kept.all() and n_dropped == 0


# ---------------------------------------------------------------------------- dispatch


def _experts(n, d=6, seed=0):
    torch.manual_seed(seed)
    return torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(d, d), torch.nn.Tanh())
                               for _ in range(n)).double()


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("capacity", [None, 3])
def test_sorted_dispatch_equals_naive_loop(k, capacity):
    experts = _experts(5)
    x = _randn(11, 6, seed=5)
    gates, idx = top_k_gating(_randn(11, 5, seed=6), k, "softmax_then_topk")
    kept = None if capacity is None else apply_capacity(idx, 5, capacity)[0]
    naive = naive_dispatch(x, gates, idx, experts, kept)
    fast = sorted_dispatch(x, gates, idx, experts, kept)
    torch.testing.assert_close(fast, naive, atol=1e-12, rtol=0)
    # ... which is sum_j g_tj E_{i_tj}(x_t) token by token.
    for t in range(11):
        expected = sum(gates[t, j] * experts[int(idx[t, j])](x[t])
                       for j in range(k) if kept is None or kept[t, j])
        torch.testing.assert_close(fast[t], expected + torch.zeros(6, dtype=torch.float64))


def test_sorted_dispatch_gradients_match():
    experts = _experts(4)
    x = _randn(9, 6, seed=7).requires_grad_(True)
    logits = _randn(9, 4, seed=8).requires_grad_(True)
    grads = []
    for dispatch in (naive_dispatch, sorted_dispatch):
        gates, idx = top_k_gating(logits, 2)
        out = dispatch(x, gates, idx, experts)
        grads.append(torch.autograd.grad(out.square().sum(), (x, logits)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b)


# ---------------------------------------------------------------------------- layer


def test_sparse_moe_equals_hugging_face_mixtral_block():
    transformers = pytest.importorskip("transformers")
    mixtral = pytest.importorskip("transformers.models.mixtral.modeling_mixtral")
    cfg = transformers.MixtralConfig(hidden_size=16, intermediate_size=24, num_local_experts=6,
                                     num_experts_per_tok=2)
    torch.manual_seed(0)
    ours = SparseMoE(16, 24, n_experts=6, k=2).eval()
    theirs = mixtral.MixtralSparseMoeBlock(cfg).eval()
    with torch.no_grad():
        theirs.gate.weight.copy_(ours.gate.weight)
        for e, expert in enumerate(ours.experts):
            theirs.experts.gate_up_proj[e].copy_(
                torch.cat([expert.gate_proj.weight, expert.up_proj.weight]))
            theirs.experts.down_proj[e].copy_(expert.down_proj.weight)
        x = torch.randn(2, 7, 16)
        y, info = ours(x)
        torch.testing.assert_close(y, theirs(x), atol=1e-6, rtol=1e-5)
    assert info["router_logits"].shape == (14, 6) and info["n_dropped"] == 0


def test_sparse_moe_capacity_and_shared_experts():
    torch.manual_seed(1)
    moe = SparseMoE(8, 12, n_experts=4, k=2, capacity_factor=0.5, n_shared_experts=1).double()
    x = _randn(2, 10, 8, seed=9)
    with torch.no_grad():
        y, info = moe(x)
        tokens = x.reshape(20, 8)
        gates, idx = top_k_gating(info["router_logits"], 2)
        kept, n_dropped = apply_capacity(idx, 4, expert_capacity(20, 4, 2, 0.5))
        expected = naive_dispatch(tokens, gates, idx, moe.experts, kept)
        expected = expected + moe.shared_experts[0](tokens)
    assert info["n_dropped"] == n_dropped > 0
    torch.testing.assert_close(y.reshape(20, 8), expected)


@pytest.mark.parametrize("renormalize", [False, True])
def test_shared_expert_moe_equals_hugging_face_qwen2_moe_block(renormalize):
    transformers = pytest.importorskip("transformers")
    qwen = pytest.importorskip("transformers.models.qwen2_moe.modeling_qwen2_moe")
    cfg = transformers.Qwen2MoeConfig(hidden_size=16, moe_intermediate_size=12,
                                      shared_expert_intermediate_size=40, num_experts=6,
                                      num_experts_per_tok=2, norm_topk_prob=renormalize)
    torch.manual_seed(0)
    ours = SharedExpertMoE(16, 12, n_experts=6, k=2, d_shared=40, renormalize=renormalize)
    theirs = qwen.Qwen2MoeSparseMoeBlock(cfg)
    with torch.no_grad():
        theirs.gate.weight.copy_(ours.routed.gate.weight)
        for e, expert in enumerate(ours.routed.experts):
            theirs.experts.gate_up_proj[e].copy_(
                torch.cat([expert.gate_proj.weight, expert.up_proj.weight]))
            theirs.experts.down_proj[e].copy_(expert.down_proj.weight)
        for name in ("gate_proj", "up_proj", "down_proj"):
            getattr(theirs.shared_expert, name).weight.copy_(
                getattr(ours.shared.expert, name).weight)
        theirs.shared_expert_gate.weight.copy_(ours.shared.gate.weight)
        x = torch.randn(2, 7, 16)
        y, info = ours(x)
        torch.testing.assert_close(y, theirs(x), atol=1e-6, rtol=1e-5)
        # The gate matters: each token takes its own share of the shared expert.
        share = torch.sigmoid(ours.shared.gate(x))
        assert share.std() > 0.01
        ungated = ours.routed(x)[0] + ours.shared.expert(x)
        assert not torch.allclose(y, ungated, atol=1e-3)


def test_parameter_counts_mixtral_and_a_real_model():
    counts = moe_parameter_counts(**MIXTRAL_8X7B)
    assert round(counts["total"] / 1e9, 1) == 46.7 and round(counts["active"] / 1e9, 1) == 12.9
    transformers = pytest.importorskip("transformers")
    cfg = transformers.MixtralConfig(vocab_size=50, hidden_size=16, intermediate_size=24,
                                     num_hidden_layers=2, num_attention_heads=4,
                                     num_key_value_heads=2, num_local_experts=4,
                                     num_experts_per_tok=2)
    model = transformers.MixtralForCausalLM(cfg)
    small = moe_parameter_counts(d_model=16, d_ff=24, n_layers=2, n_heads=4, n_kv_heads=2,
                                 vocab_size=50, n_experts=4, k=2)
    assert small["total"] == sum(p.numel() for p in model.parameters())
