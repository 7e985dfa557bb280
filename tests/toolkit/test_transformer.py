"""Tests for toolkit.transformer: blocks vs PyTorch's layers, causality, the families."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from toolkit.masks import causal_mask, padding_mask
from toolkit.transformer import (
    DecoderBlock,
    DecoderOnlyBlock,
    DecoderOnlyModel,
    EncoderBlock,
    EncoderDecoderModel,
    EncoderOnlyModel,
    EncoderOutput,
    family_attention_patterns,
)

D, H, FF = 16, 4, 32
F64 = torch.float64


def _copy_mha(ours, ref: nn.MultiheadAttention) -> None:
    ref.in_proj_weight.copy_(
        torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight])
    )
    ref.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    ref.out_proj.weight.copy_(ours.out_proj.weight)
    ref.out_proj.bias.copy_(ours.out_proj.bias)


def _copy_common(ours, ref) -> None:
    _copy_mha(ours.self_attn, ref.self_attn)
    ref.linear1.load_state_dict(ours.ff.fc1.state_dict())  # PyTorch's linear1 is our fc1
    ref.linear2.load_state_dict(ours.ff.fc2.state_dict())
    ref.norm1.load_state_dict(ours.norm1.state_dict())
    ref.norm2.load_state_dict(ours.norm2.state_dict())


def _randomise_norms(module: nn.Module) -> None:
    """LayerNorms start as the identity affine map; make them non-trivial."""
    for m in module.modules():
        if isinstance(m, nn.LayerNorm):
            nn.init.normal_(m.weight, 1.0, 0.2)
            nn.init.normal_(m.bias, 0.0, 0.2)


def _encoder_pair(norm_first: bool, activation: str, seed: int = 0):
    torch.manual_seed(seed)
    ours = EncoderBlock(D, H, FF, norm_first=norm_first, activation=activation).to(F64)
    with torch.no_grad():
        _randomise_norms(ours)
    ref = nn.TransformerEncoderLayer(
        D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).to(F64)
    with torch.no_grad():
        _copy_common(ours, ref)
    return ours, ref  # both stay in train mode: dropout is 0, and torch's fast path is off


def _decoder_pair(norm_first: bool, activation: str, seed: int = 0):
    torch.manual_seed(seed)
    ours = DecoderBlock(D, H, FF, norm_first=norm_first, activation=activation).to(F64)
    with torch.no_grad():
        _randomise_norms(ours)
    ref = nn.TransformerDecoderLayer(
        D, H, FF, dropout=0.0, activation=activation, batch_first=True, norm_first=norm_first
    ).to(F64)
    with torch.no_grad():
        _copy_common(ours, ref)
        _copy_mha(ours.cross_attn, ref.multihead_attn)
        ref.norm3.load_state_dict(ours.norm3.state_dict())
    return ours, ref


def _x(B=3, T=5, seed=1):
    return torch.randn(B, T, D, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ---------------------------------------------------------------------------
# Blocks vs torch
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_sub_layer_is_torchs_with_its_dropouts(activation):
    """The blocks' feed-forward sub-layer is toolkit.ffn.FeedForward, and in training, with
    the same seed, ``dropout2(ff(x))`` draws the same dropout masks at the same places as
    nn.TransformerEncoderLayer's ``dropout2(linear2(dropout(act(linear1(x)))))``."""
    from toolkit.ffn import FeedForward

    torch.manual_seed(0)
    ours = EncoderBlock(D, H, FF, activation=activation, dropout=0.25).train()
    assert isinstance(ours.ff, FeedForward) and ours.ff.activation == activation
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.25, activation=activation,
                                     batch_first=True).train()
    with torch.no_grad():
        _copy_common(ours, ref)
    x = torch.randn(2, 3, D)
    torch.manual_seed(1)
    expected = ref._ff_block(x)  # dropout2(linear2(dropout(activation(linear1(x)))))
    torch.manual_seed(1)
    got = ours.dropout2(ours.ff(x))
    torch.testing.assert_close(got, expected)
    assert (got == 0).any(), "dropout was active"


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_block_matches_torch(norm_first, activation):
    ours, ref = _encoder_pair(norm_first, activation)
    x = _x()
    torch.testing.assert_close(ours(x), ref(x))
    keep = padding_mask(torch.tensor([5, 2, 4]), 5)  # (B, 1, 1, T): True = real
    torch.testing.assert_close(ours(x, keep), ref(x, src_key_padding_mask=~keep[:, 0, 0]))


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_only_block_is_encoder_layer_with_causal_mask(norm_first):
    ours_enc, ref = _encoder_pair(norm_first, "relu")
    ours = DecoderOnlyBlock(D, H, FF, norm_first=norm_first).to(F64)
    ours.load_state_dict(ours_enc.state_dict())
    x = _x()
    expected = ref(x, src_mask=~causal_mask(5), is_causal=True)
    torch.testing.assert_close(ours(x), expected)
    torch.testing.assert_close(ours(x, causal=False), ref(x))
    keep = padding_mask(torch.tensor([5, 2, 4]), 5)
    expected = ref(x, src_mask=~causal_mask(5), src_key_padding_mask=~keep[:, 0, 0])
    torch.testing.assert_close(ours(x, keep), expected)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_block_matches_torch(norm_first, activation):
    ours, ref = _decoder_pair(norm_first, activation)
    x, memory = _x(T=4), _x(T=6, seed=2)
    tgt_mask = ~causal_mask(4)  # torch: True = NOT allowed
    torch.testing.assert_close(ours(x, memory), ref(x, memory, tgt_mask=tgt_mask))

    tgt_keep = padding_mask(torch.tensor([4, 3, 2]), 4)
    src_keep = padding_mask(torch.tensor([6, 1, 3]), 6)
    expected = ref(
        x, memory, tgt_mask=tgt_mask,
        tgt_key_padding_mask=~tgt_keep[:, 0, 0], memory_key_padding_mask=~src_keep[:, 0, 0],
    )
    torch.testing.assert_close(ours(x, memory, self_mask=tgt_keep, memory_mask=src_keep), expected)
    # causal=False: only self_mask is used.
    torch.testing.assert_close(ours(x, memory, causal=False), ref(x, memory))


# ---------------------------------------------------------------------------
# Causality
# ---------------------------------------------------------------------------


def _max_change_before(f, x: torch.Tensor, t: int) -> float:
    x2 = x.clone()
    # A random direction: adding a constant to every feature would be erased by LayerNorm.
    x2[:, t] += 3.0 * torch.randn(x.shape[-1], generator=torch.Generator().manual_seed(t),
                                  dtype=x.dtype)
    with torch.no_grad():
        return (f(x2)[:, :t] - f(x)[:, :t]).abs().max().item()


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_blocks_are_causal_exactly(norm_first):
    dec, _ = _decoder_pair(norm_first, "gelu")
    torch.manual_seed(0)
    gpt = DecoderOnlyBlock(D, H, FF, norm_first=norm_first).to(F64)
    x, memory = _x(T=6), _x(T=4, seed=2)
    for t in range(1, 6):
        assert _max_change_before(lambda h: dec(h, memory), x, t) == 0.0
        assert _max_change_before(gpt, x, t) == 0.0
    # Without the causal mask the future does reach the past.
    assert _max_change_before(lambda h: dec(h, memory, causal=False), x, 3) > 1e-6
    assert _max_change_before(lambda h: gpt(h, causal=False), x, 3) > 1e-6


def test_encoder_block_is_bidirectional():
    enc, _ = _encoder_pair(False, "relu")
    x = _x(T=6)
    assert _max_change_before(enc, x, 5) > 1e-6


def _tiny_seq2seq(norm_first=False):
    torch.manual_seed(0)
    return EncoderDecoderModel(
        vocab_size=20, d_model=D, n_heads=H, d_ff=FF, max_seq_len=16, norm_first=norm_first
    ).to(F64)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_decoder_future_target_never_changes_past_but_source_changes_all(norm_first):
    model = _tiny_seq2seq(norm_first)
    g = torch.Generator().manual_seed(3)
    src = torch.randint(0, 20, (2, 7), generator=g)
    tgt = torch.randint(0, 20, (2, 5), generator=g)
    with torch.no_grad():
        base = model(src, tgt)
        assert base.shape == (2, 5, 20)
        for t in range(1, 5):
            tgt2 = tgt.clone()
            tgt2[:, t] = (tgt2[:, t] + 1) % 20
            assert torch.equal(model(src, tgt2)[:, :t], base[:, :t])
        for s in range(7):
            src2 = src.clone()
            src2[:, s] = (src2[:, s] + 1) % 20
            change = (model(src2, tgt) - base).abs().amax(dim=-1)  # (B, T_tgt)
            assert (change > 1e-9).all(), f"changing source token {s} left a target unchanged"


def test_encoder_decoder_padded_source_is_invisible():
    model = _tiny_seq2seq()
    src = torch.tensor([[1, 2, 3, 4, 0, 0]])
    src_mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    tgt = torch.tensor([[5, 6, 7]])
    with torch.no_grad():
        base = model(src, tgt, attention_mask=src_mask)
        src2 = src.clone()
        src2[0, 4:] = 9
        torch.testing.assert_close(model(src2, tgt, attention_mask=src_mask), base)
        memory = model.encode(src, src_mask)
        torch.testing.assert_close(model.decode(tgt, memory, src_mask), base)


def test_encoder_decoder_shares_token_table():
    model = _tiny_seq2seq()
    assert model.encoder_embedding.token is model.decoder_embedding.token
    assert model.encoder_embedding.position is not model.decoder_embedding.position


# ---------------------------------------------------------------------------
# Families
# ---------------------------------------------------------------------------


def test_encoder_only_model_is_bidirectional_and_respects_padding():
    torch.manual_seed(0)
    model = EncoderOnlyModel(vocab_size=30, d_model=D, n_heads=H, max_seq_len=8).to(F64)
    ids = torch.randint(0, 30, (2, 6), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        out = model(ids)
        assert isinstance(out, EncoderOutput)
        hidden, logits = out
        assert hidden.shape == (2, 6, D) and logits.shape == (2, 6, 30)
        ids2 = ids.clone()
        ids2[:, -1] = (ids2[:, -1] + 1) % 30
        assert ((model(ids2).hidden_states[:, 0] - hidden[:, 0]).abs().max() > 1e-9)
        am = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1]])
        base = model(ids, am).hidden_states
        torch.testing.assert_close(model(ids2, am).hidden_states[0, :4], base[0, :4])


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_only_model_is_causal(norm_first):
    torch.manual_seed(0)
    model = DecoderOnlyModel(
        vocab_size=30, d_model=D, n_heads=H, max_seq_len=8, norm_first=norm_first
    ).to(F64)
    ids = torch.randint(0, 30, (2, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        base = model(ids)
        assert base.shape == (2, 8, 30)
        for t in range(1, 8):
            ids2 = ids.clone()
            ids2[:, t] = (ids2[:, t] + 1) % 30
            out = model(ids2)
            assert torch.equal(out[:, :t], base[:, :t])
            assert (out[:, t] - base[:, t]).abs().max() > 1e-9


def test_family_attention_patterns():
    p = family_attention_patterns(4, 3)
    assert list(p) == ["encoder_self", "decoder_self", "cross"]
    assert p["encoder_self"].shape == (4, 4) and p["encoder_self"].all()
    assert torch.equal(p["decoder_self"], torch.ones(3, 3, dtype=torch.bool).tril())
    assert p["cross"].shape == (3, 4) and p["cross"].all()
    p = family_attention_patterns(5, 2, src_length=3)
    expected_keys = torch.tensor([True, True, True, False, False])
    assert torch.equal(p["encoder_self"], expected_keys.expand(5, 5))
    assert torch.equal(p["cross"], expected_keys.expand(2, 5))


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build,match",
    [
        (lambda: EncoderBlock(D, H, FF, activation="swish"), "activation"),
        (lambda: EncoderBlock(D, 3, FF), "n_heads"),
        (lambda: DecoderBlock(D, H, 0), "d_ff"),
        (lambda: DecoderBlock(D, H, FF, dropout=1.0), "dropout"),
        (lambda: EncoderOnlyModel(10, n_layers=0), "n_layers"),
        (lambda: family_attention_patterns(0, 3), "T_src"),
        (lambda: family_attention_patterns(3, 3, src_length=4), "src_length"),
    ],
)
def test_bad_constructor_arguments_raise(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_bad_forward_inputs_raise():
    enc = EncoderBlock(D, H, FF)
    dec = DecoderBlock(D, H, FF)
    with pytest.raises(ValueError, match="x must have shape"):
        enc(torch.randn(2, 3, D + 1))
    with pytest.raises(ValueError, match="mask must be a bool"):
        enc(torch.randn(2, 3, D), torch.ones(3, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="memory"):
        dec(torch.randn(2, 3, D), torch.randn(2, 4))
    with pytest.raises(ValueError, match="memory batch size"):
        dec(torch.randn(2, 3, D), torch.randn(1, 4, D))
    gpt = DecoderOnlyModel(10, d_model=D, n_heads=H, max_seq_len=4)
    with pytest.raises(ValueError, match="max_seq_len"):
        gpt(torch.zeros(1, 5, dtype=torch.long))
    with pytest.raises(ValueError, match="input_ids"):
        gpt(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="attention_mask"):
        gpt(torch.zeros(1, 3, dtype=torch.long), torch.ones(1, 4))
