"""toolkit.rwkv: stable recurrent WKV = naive parallel form = Hugging Face's CPU WKV, no
overflow on long inputs, causal, O(1) state; time and channel mixing = Hugging Face's."""

from __future__ import annotations

import pytest
import torch

from toolkit.rwkv import (
    RwkvChannelMixing,
    RwkvTimeMixing,
    token_shift,
    wkv_parallel,
    wkv_recurrent,
)


def _inputs(batch=2, T=12, C=5, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(batch, T, C, generator=g, dtype=dtype)
    v = torch.randn(batch, T, C, generator=g, dtype=dtype)
    w = torch.rand(C, generator=g, dtype=dtype) + 0.01
    u = torch.randn(C, generator=g, dtype=dtype)
    return k, v, w, u


def test_recurrent_equals_parallel_form():
    k, v, w, u = _inputs()
    torch.testing.assert_close(wkv_recurrent(k, v, w, u), wkv_parallel(k, v, w, u))


def test_first_output_is_the_first_value_and_bonus_only_touches_the_current_token():
    k, v, w, u = _inputs(T=4, seed=1)
    out = wkv_recurrent(k, v, w, u)
    torch.testing.assert_close(out[:, 0], v[:, 0])  # a weighted average of one value
    # Token 1: weights e^{k_0} (past) and e^{u + k_1} (current), by hand.
    a, b = torch.exp(k[:, 0]), torch.exp(u + k[:, 1])
    torch.testing.assert_close(out[:, 1], (a * v[:, 0] + b * v[:, 1]) / (a + b))


def test_equals_hugging_face_cpu_wkv_with_state():
    rwkv = pytest.importorskip("transformers.models.rwkv.modeling_rwkv")
    k, v, w, u = _inputs(dtype=torch.float32, seed=2)
    expected, hf_state = rwkv.rwkv_linear_attention_cpu(torch.log(w), u, k, v, return_state=True)
    got, state = wkv_recurrent(k, v, w, u, return_state=True)
    torch.testing.assert_close(got, expected)
    for ours, theirs in zip(state, hf_state):
        torch.testing.assert_close(ours, theirs)


def test_state_continues_a_sequence():
    k, v, w, u = _inputs(T=10, seed=3)
    head, state = wkv_recurrent(k[:, :6], v[:, :6], w, u, return_state=True)
    tail = wkv_recurrent(k[:, 6:], v[:, 6:], w, u, state=state)
    torch.testing.assert_close(torch.cat([head, tail], 1), wkv_recurrent(k, v, w, u))


def test_causal():
    k, v, w, u = _inputs(T=10, seed=4)
    base = wkv_recurrent(k, v, w, u)
    k2, v2 = k.clone(), v.clone()
    k2[:, 7:] += 2.0
    v2[:, 7:] -= 1.0
    torch.testing.assert_close(wkv_recurrent(k2, v2, w, u)[:, :7], base[:, :7], atol=0, rtol=0)


def test_long_inputs_with_large_keys_do_not_overflow():
    k = torch.full((1, 2048, 3), 85.0)
    k[:, ::7] = 60.0
    v = torch.randn(1, 2048, 3, generator=torch.Generator().manual_seed(5))
    w, u = torch.tensor([1e-3, 0.1, 2.0]), torch.zeros(3)
    out = wkv_recurrent(k, v, w, u)
    assert torch.isfinite(out).all()
    exact = wkv_recurrent(k.double(), v.double(), w.double(), u.double())
    torch.testing.assert_close(out, exact.float(), atol=1e-4, rtol=1e-4)
    naive = wkv_parallel(k[:, :64], v[:, :64], w, u)  # e^85 summed 64 times overflows float32
    assert not torch.allclose(naive, out[:, :64], atol=1e-3)


def test_token_shift():
    x = torch.arange(12.0).reshape(1, 4, 3)
    torch.testing.assert_close(token_shift(x), torch.cat([torch.zeros(1, 1, 3), x[:, :3]], 1))
    last = torch.full((1, 3), -1.0)
    torch.testing.assert_close(token_shift(x, last)[:, 0], last)


def _hf_rwkv_modules():
    transformers = pytest.importorskip("transformers")
    rwkv = pytest.importorskip("transformers.models.rwkv.modeling_rwkv")
    cfg = transformers.RwkvConfig(hidden_size=8, attention_hidden_size=8, intermediate_size=20,
                                  context_length=64)
    return rwkv.RwkvSelfAttention(cfg, 0), rwkv.RwkvFeedForward(cfg, 0)


def test_time_and_channel_mixing_equal_hugging_face():
    att, ffn = _hf_rwkv_modules()
    torch.manual_seed(0)
    ours_att, ours_ffn = RwkvTimeMixing(8, layer_id=1, n_layers=3), RwkvChannelMixing(8, 20)
    att.load_state_dict(ours_att.state_dict())
    ffn.load_state_dict(ours_ffn.state_dict())
    x = torch.randn(2, 7, 8)
    with torch.no_grad():
        torch.testing.assert_close(ours_att(x)[0], att(x)[0])
        torch.testing.assert_close(ours_ffn(x)[0], ffn(x)[0])


def test_generation_one_token_at_a_time_with_a_constant_state():
    torch.manual_seed(1)
    att, ffn = RwkvTimeMixing(6).double(), RwkvChannelMixing(6).double()
    x = torch.randn(2, 9, 6, dtype=torch.float64)
    with torch.no_grad():
        full_att, full_ffn = att(x)[0], ffn(x)[0]
        state, last, outs = None, None, []
        for t in range(9):
            y, state = att(x[:, t:t + 1], state)
            z, last = ffn(x[:, t:t + 1], last)
            outs.append((y, z))
            sizes = [s.numel() for s in (state[0], *state[1], last)]
            assert sizes == [12] * 5  # (batch, d_model) each, whatever t is
        torch.testing.assert_close(torch.cat([o[0] for o in outs], 1), full_att)
        torch.testing.assert_close(torch.cat([o[1] for o in outs], 1), full_ffn)
