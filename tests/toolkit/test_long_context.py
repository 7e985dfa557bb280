"""toolkit.long_context: the position models, the passkey prompts and the three measurements."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from toolkit.long_context import (
    DIGITS,
    EXTENSIONS,
    KEY_LINE,
    QUESTION,
    loss_by_position,
    passkey_accuracy,
    passkey_text,
    passkey_tokens,
    position_model,
    rope_extension,
    rope_speeds,
    use_position_functions,
)
from toolkit.position import (
    apply_rope,
    rope_inv_freq,
    rope_inv_freq_dynamic_ntk,
    rope_inv_freq_linear,
    rope_inv_freq_ntk,
    yarn_inv_freq_and_temperature,
)


class PasskeyOracle(nn.Module):
    """Reads the key after the first '#' and predicts the next digit; wrong from ``fail_from``
    tokens on (so an accuracy of 0 or 1 can be told apart by length)."""

    def __init__(self, fail_from: int = 10**9):
        super().__init__()
        self.fail_from = fail_from

    def forward(self, idx):
        B, T = idx.shape
        logits = torch.zeros(B, T, 256)
        for b in range(B):
            row = idx[b].tolist()
            first, last = row.index(ord("#")), len(row) - 1 - row[::-1].index(ord("#"))
            key = row[first + 1:first + 1 + DIGITS]
            done = T - 1 - last  # digits already written after the question's '#'
            digit = key[min(done, DIGITS - 1)]
            if T >= self.fail_from:
                digit = ord("0") + (digit - ord("0") + 1) % 10
            logits[b, -1, digit] = 1.0
        return logits, None


def test_passkey_prompt_layout():
    for length, depth in ((100, 0.0), (100, 1.0), (333, 0.5), (1000, 0.25)):
        text = passkey_text(4321, length, depth)
        line = KEY_LINE.format(key="04321")
        assert len(text) == length and text.endswith(QUESTION) and text.count(line) == 1
        n_filler = length - len(line) - len(QUESTION)
        assert text.index(line) == round(depth * n_filler)
    prompt, answer = passkey_tokens(7, 80, 0.3)
    assert prompt.shape == (80,) and prompt.dtype == torch.long
    assert bytes(answer.tolist()) == b"00007"
    with pytest.raises(ValueError):
        passkey_text(10**DIGITS, 100, 0.5)
    with pytest.raises(ValueError):
        passkey_text(1, 20, 0.5)


def test_passkey_accuracy_counts_exact_answers():
    keys = [0, 12345, 99999, 31415]
    assert passkey_accuracy(PasskeyOracle(), keys, 120, 0.5) == 1.0
    assert passkey_accuracy(PasskeyOracle(fail_from=120 + DIGITS - 1), keys, 120, 0.5) == 0.0
    # wrong on the first digit only: the greedy loop must feed its own (wrong) digits back
    assert passkey_accuracy(PasskeyOracle(fail_from=120), keys, 120, 0.9) == 0.0


def test_loss_by_position_is_per_position_cross_entropy():
    torch.manual_seed(0)
    model = position_model("rope", 16, n_layers=1, d_model=32)
    model.train()
    windows = torch.randint(0, 256, (3, 41))
    per_position = loss_by_position(model, windows)
    assert per_position.shape == (40,) and per_position.dtype == torch.float64
    assert model.training, "the model's mode is restored"
    model.eval()
    logits, loss = model(windows[:, :-1], windows[:, 1:])
    assert per_position.mean().item() == pytest.approx(loss.item(), rel=1e-5)
    by_hand = F.cross_entropy(logits[:, 7].double(), windows[:, 8], reduction="mean")
    assert per_position[7].item() == pytest.approx(by_hand.item(), rel=1e-9)
    # causal: the loss at position t does not depend on tokens after t + 1
    changed = windows.clone()
    changed[:, 30:] = torch.randint(0, 256, (3, 11))
    assert torch.allclose(loss_by_position(model, changed)[:29], per_position[:29], atol=1e-6)


def test_rope_extension_matches_the_methods():
    d, base, L = 32, 10000.0, 128
    for T in (64, 128, 300, 1024):
        s = max(1.0, T / L)
        expected = {
            "none": (rope_inv_freq(d, base), 1.0),
            "PI": (rope_inv_freq_linear(d, base, s), 1.0),
            "NTK": (rope_inv_freq_ntk(d, base, s), 1.0),
            "dynamic NTK": (rope_inv_freq_dynamic_ntk(d, base, T, L, 2.0), 1.0),
            "YaRN": yarn_inv_freq_and_temperature(d, base, s, L),
        }
        for method in EXTENSIONS:
            inv, scaling = rope_extension(method, d, base, L, T)
            assert torch.equal(inv, expected[method][0]) and scaling == expected[method][1]
    assert rope_extension("YaRN", d, base, L, 8 * L)[1] == pytest.approx(0.1 * math.log(8) + 1)
    with pytest.raises(ValueError, match="method"):
        rope_extension("LongRoPE", d, base, L, 256)


def test_position_models():
    torch.manual_seed(0)
    idx = torch.randint(0, 256, (2, 40))
    for position in ("rope", "alibi", "none", "learned"):
        model = position_model(position, 40, n_layers=2, d_model=32).eval()
        out = model(idx)[0]
        changed = idx.clone()
        changed[:, 25:] = (changed[:, 25:] + 1) % 256
        assert torch.allclose(model(changed)[0][:, :25], out[:, :25], atol=1e-5), position
    learned = position_model("learned", 40)
    with pytest.raises(ValueError, match="learned table"):
        learned(torch.zeros(1, 41, dtype=torch.long))
    rope = position_model("rope", 40, n_layers=1, d_model=32).eval()
    long_idx = torch.randint(0, 256, (1, 300))
    plain = rope(long_idx)[0]
    with rope_speeds(rope, rope_inv_freq(8), 1.0):  # the default speeds, given explicitly
        assert torch.allclose(rope(long_idx)[0], plain, atol=1e-5)
    with rope_speeds(rope, rope_inv_freq_linear(8, scale=4.0), 1.2):
        assert not torch.equal(rope(long_idx)[0], plain)
    assert torch.equal(rope(long_idx)[0], plain), "rope_speeds puts the original speeds back"
    with pytest.raises(ValueError, match="RoPE"):
        with rope_speeds(position_model("alibi", 40), None):
            pass
    calls = []

    def my_rope(x, positions, **kwargs):  # a student's apply_rope, used by every layer
        calls.append(kwargs["inv_freq"])
        return apply_rope(x, positions, **kwargs)

    use_position_functions(rope, {"apply_rope": my_rope})
    assert torch.equal(rope(long_idx)[0], plain) and len(calls) == 2  # q and k, one layer
    with pytest.raises(ValueError, match="fns"):
        use_position_functions(rope, {"rope": my_rope})


@pytest.mark.parametrize("position", ["alibi", "rope"])
def test_attention_is_the_written_formula(position):
    """ALiBi: softmax(q k^T / sqrt(d) + alibi_bias) v. RoPE at given speeds and scaling:
    q and k rotated by apply_rope(inv_freq=..., attention_scaling=...), then causal attention."""
    from toolkit.position import alibi_bias, apply_rope
    torch.manual_seed(1)
    model = position_model(position, 16, n_layers=1, d_model=32, n_heads=4).eval()
    attn = model.blocks[0].attn
    x, pos = torch.randn(1, 10, 32), torch.arange(10)
    inv_freq, scaling = rope_inv_freq_linear(8, scale=3.0), 1.3
    with torch.no_grad():
        if position == "rope":
            attn.inv_freq, attn.attention_scaling = inv_freq, scaling
        out = attn(x, pos)
        q = attn.q_proj(x).view(1, 10, 4, 8).transpose(1, 2)
        k = attn.k_proj(x).view(1, 10, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
        v = attn.v_proj(x).view(1, 10, 2, 8).transpose(1, 2).repeat_interleave(2, dim=1)
        if position == "rope":
            q = apply_rope(q, pos, inv_freq=inv_freq, attention_scaling=scaling)
            k = apply_rope(k, pos, inv_freq=inv_freq, attention_scaling=scaling)
            bias = torch.zeros(10, 10).masked_fill(torch.ones(10, 10).triu(1).bool(), -math.inf)
        else:
            bias = alibi_bias(4, 10)
        w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(8) + bias, dim=-1)
        expected = attn.o_proj((w @ v).transpose(1, 2).reshape(1, 10, 32))
    assert torch.allclose(out, expected, atol=1e-5)


def test_the_position_models_layers_equal_their_homes():
    """The copies that 02 needs before 05 is unlocked compute what the course's layers do:
    SwiGLUFeedForward is toolkit.ffn.SwiGLU (same names, same output), RMSNormGain is
    toolkit.norm.RMSNorm."""
    from toolkit.ffn import SwiGLU
    from toolkit.long_context import RMSNormGain, SwiGLUFeedForward
    from toolkit.norm import RMSNorm

    torch.manual_seed(2)
    copy, home = SwiGLUFeedForward(12, 20), SwiGLU(12, 20)
    assert copy.state_dict().keys() == home.state_dict().keys()
    home.load_state_dict(copy.state_dict())
    x = torch.randn(2, 5, 12)
    assert torch.allclose(copy(x), home(x), atol=1e-6)

    norm_copy, norm_home = RMSNormGain(12, eps=1e-5), RMSNorm(12, eps=1e-5)
    with torch.no_grad():
        norm_copy.weight.uniform_(0.5, 1.5)
    assert norm_copy.state_dict().keys() == norm_home.state_dict().keys()
    norm_home.load_state_dict(norm_copy.state_dict())
    assert torch.allclose(norm_copy(x), norm_home(x), atol=1e-6)


def test_the_measurement_is_cached_by_settings_and_code(tmp_path, monkeypatch):
    """The lecture's table: measured once per machine, read back after; a change to the
    settings or to the code that measures measures again."""
    from toolkit.long_context import ExperimentConfig, cached_measurement, experiment

    monkeypatch.setenv("TRANSFORMERS_COURSE_CACHE", str(tmp_path))
    calls = []

    def fake_measure(models, train_len, progress=True):
        calls.append(train_len)
        return {"loss": {"rope": torch.arange(4.0) + len(calls), "learned": None},
                "passkey": {"rope": {(1, 0.5): 0.5, (8, 0.9): None}}, "train_len": train_len}

    monkeypatch.setattr(experiment, "measure", fake_measure)
    small = ExperimentConfig(train_len=16)
    first = cached_measurement({}, small, progress=False)
    again = cached_measurement({}, small, progress=False)
    assert calls == [16]
    assert torch.equal(again["loss"]["rope"], first["loss"]["rope"])
    assert again["passkey"] == first["passkey"] and again["loss"]["learned"] is None
    cached_measurement({}, ExperimentConfig(train_len=32), progress=False)
    assert calls == [16, 32]
    monkeypatch.setattr(experiment, "_measurement_code_key", lambda: "changed")
    assert torch.equal(cached_measurement({}, small, progress=False)["loss"]["rope"],
                       torch.arange(4.0) + 3)
    assert calls == [16, 32, 16]
