"""toolkit.arguments: each check accepts good input silently and names the bad argument."""

import pytest
import torch

from toolkit import arguments as A
from toolkit.ffn import ACTIVATIONS

q4 = torch.zeros(2, 4, 5, 8)
kv2 = torch.zeros(2, 2, 7, 8)
routes = torch.tensor([[0, 2], [1, 0], [2, 1]])  # 3 tokens, top-2 of 3 experts
gates = torch.full((3, 2), 0.5)
scan = dict(u=torch.zeros(2, 5, 4), delta=torch.ones(2, 5, 4), A_log=torch.zeros(4, 3),
            B=torch.zeros(2, 5, 3), C=torch.zeros(2, 5, 3))


@pytest.mark.parametrize("call", [
    lambda: A.check_int("n", 3),
    lambda: A.check_int("n", 0, minimum=0),
    lambda: A.check_even("d_head", 64),
    lambda: A.check_dropout(0.1),
    lambda: A.check_frequency_base(10000.0),
    lambda: A.check_context_scale(1),
    lambda: A.check_rope_layout("interleaved"),
    lambda: A.check_kv_heads(8, 2),
    lambda: A.check_qkv(q4, q4, q4),
    lambda: A.check_bool_mask("mask", None),
    lambda: A.check_block_args(16, 4, 64, 0.0, "gelu"),
    lambda: A.check_sequence("x", torch.zeros(2, 3, 16), 16),
    lambda: A.check_eps(0),
    lambda: A.check_features("x", torch.zeros(5, 16), 16),
    lambda: A.check_activation("silu", {"silu": None, "relu": None}),
    lambda: A.check_token_ids("input_ids", torch.zeros(2, 3, dtype=torch.int32), dims=2),
    lambda: A.check_mlm_probabilities(0.15, 0.5, 0.5),
    lambda: A.check_same_shape("a", q4, "b", torch.ones(2, 4, 5, 8)),
    lambda: A.check_temperature(0.5),
    lambda: A.check_gating("softmax_then_topk"),
    lambda: A.check_top_k(2, 8),
    lambda: A.check_capacity_factor(None),
    lambda: A.check_capacity_factor(1.25, optional=False),
    lambda: A.check_routing(routes, 3, gates),
    lambda: A.check_dispatch_inputs(torch.zeros(3, 6), gates, routes, 3),
    lambda: A.check_step_sizes(torch.tensor([0.1, 2.0])),
    lambda: A.check_zoh_inputs(0.5, -torch.ones(4, 3)),
    lambda: A.check_selective_inputs(**scan),
    lambda: A.check_wkv_inputs(torch.zeros(2, 5, 4), torch.zeros(2, 5, 4), torch.ones(4),
                               torch.zeros(4)),
])
def test_good_input_passes(call):
    assert call() is None


@pytest.mark.parametrize("call, name", [
    (lambda: A.check_int("n_heads", 0), "n_heads"),
    (lambda: A.check_int("n", True), "n"),
    (lambda: A.check_int("window", 2.0), "window"),
    (lambda: A.check_even("d_model", 7), "d_model"),
    (lambda: A.check_dropout(1.0), "dropout"),
    (lambda: A.check_frequency_base(1.0), "base"),
    (lambda: A.check_context_scale(0.5), "scale"),
    (lambda: A.check_rope_layout("rotated"), "layout"),
    (lambda: A.check_kv_heads(6, 4), "n_heads"),
    (lambda: A.check_qkv(q4, kv2, kv2), "k"),
    (lambda: A.check_flash_inputs(q4, kv2[:, :, :, :4], kv2, 4, 4), "q and k"),
    (lambda: A.check_flash_inputs(q4, kv2, kv2, 0, 4), "block_q"),
    (lambda: A.check_bool_mask("self_mask", torch.ones(3, 3)), "self_mask"),
    (lambda: A.check_block_args(16, 4, 64, 0.0, "swish"), "activation"),
    (lambda: A.check_block_args(16, 0, 64, 0.0, "relu"), "n_heads"),
    (lambda: A.check_sequence("memory", torch.zeros(2, 3, 8), 16), "memory"),
    (lambda: A.check_eps(-1e-5), "eps"),
    (lambda: A.check_eps("1e-5"), "eps"),
    (lambda: A.check_features("x", torch.zeros(5, 8), 16), "last dimension d_model=16"),
    (lambda: A.check_features("x", torch.tensor(1.0), 16), "x"),
    (lambda: A.check_activation("swish", ("silu",)), "activation"),
    (lambda: A.check_token_ids("input_ids", torch.zeros(2, 3)), "integer token ids"),
    (lambda: A.check_token_ids("input_ids", torch.zeros(3, dtype=torch.long), dims=2), "2 axes"),
    (lambda: A.check_mlm_probabilities(1.5, 0.8, 0.1), "mlm_probability=1.5"),
    (lambda: A.check_mlm_probabilities(0.15, 0.8, 0.3), "random_replace_prob=0.3"),
    (lambda: A.check_same_shape("student_logits", q4, "teacher_logits", kv2), "teacher_logits"),
    (lambda: A.check_temperature(0), "temperature"),
    (lambda: A.check_temperature(float("nan")), "temperature"),
    (lambda: A.check_gating("softmax"), "gating"),
    (lambda: A.check_top_k(3, 2), "k must"),
    (lambda: A.check_top_k(True, 2), "k must"),
    (lambda: A.check_capacity_factor(0.0), "capacity_factor"),
    (lambda: A.check_capacity_factor(None, optional=False), "capacity_factor"),
    (lambda: A.check_routing(routes + 1, 3), "indices"),
    (lambda: A.check_routing(routes, 3, gates[:, :1]), "gates"),
    (lambda: A.check_dispatch_inputs(torch.zeros(1, 3, 6), gates, routes, 3), "x must"),
    (lambda: A.check_step_sizes(torch.tensor([0.1, 0.0])), "delta"),
    (lambda: A.check_zoh_inputs(0.5, torch.tensor([-1.0, 0.0])), "A has zero"),
    (lambda: A.check_selective_inputs(**{**scan, "A_log": torch.zeros(5, 3)}), "A_log"),
    (lambda: A.check_selective_inputs(**{**scan, "C": torch.zeros(2, 5, 2)}), "C must"),
    (lambda: A.check_wkv_inputs(torch.zeros(2, 5, 4), torch.zeros(2, 5, 4), torch.ones(3),
                                torch.zeros(4)), "w must"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_flash_inputs_return_the_group_size():
    assert A.check_flash_inputs(q4, kv2, kv2, 4, 4) == 2


def test_block_activations_are_ones_the_feed_forward_network_knows():
    """The blocks pass their activation to toolkit.ffn.FeedForward, which knows more."""
    assert set(A.BLOCK_ACTIVATIONS) <= set(ACTIVATIONS)
