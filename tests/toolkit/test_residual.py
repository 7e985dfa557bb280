"""toolkit.residual (Post-LN / Pre-LN blocks) and toolkit.warmup (the warm-up experiment)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from toolkit.ffn import FeedForward, SwiGLU
from toolkit.norm import LayerNorm, RMSNorm
from toolkit.residual import EncoderStack, PostLNBlock, PreLNBlock, make_ffn, make_norm
from toolkit.warmup import layer_scales, sorting_batch, train_deep_stack, warmup_experiment

D, H, FF = 16, 4, 32


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _randomise_norms(module: nn.Module, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (LayerNorm, RMSNorm)):
                m.weight.copy_(1 + 0.3 * torch.randn(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.3 * torch.randn(m.bias.shape, generator=g))


def _torch_layer(ours, norm_first: bool) -> nn.TransformerEncoderLayer:
    """nn.TransformerEncoderLayer holding the weights of our block."""
    ref = nn.TransformerEncoderLayer(D, H, FF, dropout=0.0, activation="gelu", batch_first=True,
                                     norm_first=norm_first).eval()
    with torch.no_grad():
        attn = ours.self_attn
        ref.self_attn.in_proj_weight.copy_(torch.cat([attn.q_proj.weight, attn.k_proj.weight,
                                                      attn.v_proj.weight]))
        ref.self_attn.in_proj_bias.copy_(torch.cat([attn.q_proj.bias, attn.k_proj.bias,
                                                    attn.v_proj.bias]))
        ref.self_attn.out_proj.load_state_dict(attn.out_proj.state_dict())
        ref.linear1.load_state_dict(ours.ffn.fc1.state_dict())
        ref.linear2.load_state_dict(ours.ffn.fc2.state_dict())
        ref.norm1.load_state_dict(ours.norm1.state_dict())
        ref.norm2.load_state_dict(ours.norm2.state_dict())
    return ref


@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("cls, norm_first", [(PostLNBlock, False), (PreLNBlock, True)])
def test_blocks_equal_the_family_encoder_block(cls, norm_first, activation):
    """Two homes, one computation: with LayerNorm and the same weights, PostLNBlock and
    PreLNBlock are toolkit.transformer's EncoderBlock with norm_first=False / True (their
    state dicts differ only in the feed-forward's attribute, ``ffn`` against ``ff``)."""
    from toolkit.transformer import EncoderBlock

    torch.manual_seed(0)
    ours = cls(D, H, FF, ffn=activation).eval()
    _randomise_norms(ours)
    family = EncoderBlock(D, H, FF, norm_first=norm_first, activation=activation).eval()
    state = {k.replace("ffn.", "ff.", 1): v for k, v in ours.state_dict().items()}
    family.load_state_dict(state)  # strict: the same parameters under the same names
    x = _x(2, 5, D)
    keep = (torch.arange(5)[None, :] < torch.tensor([5, 3])[:, None])[:, None, None, :]
    with torch.no_grad():
        torch.testing.assert_close(ours(x, mask=keep), family(x, mask=keep), atol=1e-5,
                                   rtol=1e-5)


@pytest.mark.parametrize("cls, norm_first", [(PostLNBlock, False), (PreLNBlock, True)])
def test_blocks_match_torch_encoder_layer(cls, norm_first):
    torch.manual_seed(0)
    ours = cls(D, H, FF).eval()
    _randomise_norms(ours)
    ref = _torch_layer(ours, norm_first)
    x = _x(2, 5, D)
    lengths = torch.tensor([5, 3])
    keep = torch.arange(5)[None, :] < lengths[:, None]  # (B, T) True = real token
    with torch.no_grad():
        torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
        got = ours(x, mask=keep[:, None, None, :])
        expected = ref(x, src_key_padding_mask=~keep)  # PyTorch: True = padding
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-5)


def test_post_and_pre_ln_differ_and_pre_ln_keeps_the_identity_path():
    torch.manual_seed(0)
    pre = PreLNBlock(D, H, FF)
    post = PostLNBlock(D, H, FF)
    post.load_state_dict(pre.state_dict())
    x = _x(2, 4, D)
    assert not torch.allclose(pre(x), post(x), atol=1e-3)
    # With every sub-layer's output projection zeroed, a Pre-LN block is the identity,
    # a Post-LN block is LN(LN(x)).
    with torch.no_grad():
        for block in (pre, post):
            block.self_attn.out_proj.weight.zero_()
            block.self_attn.out_proj.bias.zero_()
            block.ffn.fc2.weight.zero_()
            block.ffn.fc2.bias.zero_()
    torch.testing.assert_close(pre(x), x)
    torch.testing.assert_close(post(x), post.norm2(post.norm1(x)))


def test_encoder_stack_final_norm_only_for_pre_ln():
    torch.manual_seed(0)
    pre = EncoderStack(3, D, H, FF, norm_first=True)
    post = EncoderStack(3, D, H, FF, norm_first=False)
    assert isinstance(pre.final_norm, LayerNorm) and isinstance(post.final_norm, nn.Identity)
    assert all(isinstance(b, PreLNBlock) for b in pre.layers)
    assert all(isinstance(b, PostLNBlock) for b in post.layers)
    _randomise_norms(pre)
    x = _x(2, 4, D)
    h = x
    for block in pre.layers:
        h = block(h)
    torch.testing.assert_close(pre(x), pre.final_norm(h))


def test_padding_never_reaches_real_tokens():
    torch.manual_seed(0)
    stack = EncoderStack(2, D, H, FF).eval()
    x = _x(1, 6, D)
    mask = torch.tensor([[True] * 4 + [False] * 2])[:, None, None, :]
    x2 = x.clone()
    x2[:, 4:] += 5.0  # change the padded positions only
    torch.testing.assert_close(stack(x, mask)[:, :4], stack(x2, mask)[:, :4])


def test_norm_and_ffn_choices():
    assert isinstance(make_norm("rmsnorm", D, 1e-6), RMSNorm)
    assert isinstance(make_ffn("swiglu", D, None), SwiGLU)
    assert make_ffn("gelu_tanh", D, 24).fc1.out_features == 24
    assert isinstance(make_ffn("relu", D, None), FeedForward)
    block = PreLNBlock(D, H, norm="rmsnorm", ffn="swiglu")
    assert isinstance(block.norm1, RMSNorm) and isinstance(block.ffn, SwiGLU)
    assert block(_x(2, 3, D)).shape == (2, 3, D)
    with pytest.raises(ValueError, match="norm"):
        make_norm("batchnorm", D, 1e-5)
    with pytest.raises(ValueError, match="ffn"):
        make_ffn("swish", D, None)
    with pytest.raises(ValueError, match="n_layers"):
        EncoderStack(0, D, H)
    with pytest.raises(ValueError, match="dropout"):
        PreLNBlock(D, H, dropout=1.0)


# ---------------------------------------------------------------- the warm-up experiment


def test_sorting_batch():
    x, y = sorting_batch(4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16)
    assert torch.equal(y, x.sort(1).values)


def test_layer_scales_show_the_post_ln_problem():
    post, pre = layer_scales("post", 6), layer_scales("pre", 6)
    for s in (post, pre):
        assert s["activation"].shape == s["gradient"].shape == (6,)
        assert torch.isfinite(s["gradient"]).all() and (s["gradient"] > 0).all()
    # Post-LN renormalises after every block: RMS 1. Pre-LN's stream is a growing sum.
    torch.testing.assert_close(post["activation"], torch.ones(6), atol=1e-3, rtol=0)
    assert (pre["activation"].diff() > 0).all()
    # Post-LN's gradients are larger, and largest near the output; Pre-LN's are not.
    assert post["gradient"][-1] > 1.3 * pre["gradient"][-1]
    assert post["gradient"][-1] > post["gradient"][0]
    assert pre["gradient"][-1] <= pre["gradient"][0] * 1.05


def test_layer_scales_leave_the_global_rng_alone():
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    layer_scales("pre", 2, 16)
    assert torch.equal(torch.rand(3), expected)


def test_train_deep_stack_is_reproducible_and_learns():
    kwargs = dict(steps=30, lr=3e-3, n_layers=2, d_model=32)
    a = train_deep_stack("pre", 0, **kwargs)
    b = train_deep_stack("pre", 0, **kwargs)
    assert a == b and len(a) == 30
    assert a[0] == pytest.approx(math.log(16), rel=0.25)  # starts near chance
    assert sum(a[-5:]) / 5 < a[0]
    seen = []
    train_deep_stack("post", 5, steps=3, n_layers=1, d_model=16,
                     callback=lambda step, loss: seen.append(step))
    assert seen == [0, 1, 2]
    with pytest.raises(ValueError, match="warmup_steps"):
        train_deep_stack("pre", -1)
    with pytest.raises(ValueError, match="layout"):
        layer_scales("middle")


def test_warmup_experiment_stops_at_once_on_an_unwritten_block():
    """A student's Pre-LN block that cannot run yet fails before any (Post-LN) training."""
    seen = []

    class Unwritten(PreLNBlock):
        def forward(self, x, mask=None):
            raise NotImplementedError("`PreLNBlock.forward` is not written yet (Exercise 3)")

    with pytest.raises(NotImplementedError, match="not written yet"):
        warmup_experiment(10, pre_ln_block=Unwritten, callback=lambda s, loss: seen.append(s))
    assert seen == []


def test_the_experiment_uses_only_the_classes_it_is_given(blocks_stubbed):
    """The student build of the toolkit stubs LayerNorm and the blocks while assignment 05
    is open: with a notebook's own classes, neither the explorer's measurements nor the
    warm-up runs may build one of the toolkit's."""
    own = dict(pre_ln_block=blocks_stubbed, post_ln_block=blocks_stubbed, norm=nn.LayerNorm)
    for layout in ("pre", "post"):
        assert layer_scales(layout, 2, 16, **own)["gradient"].shape == (2,)
    runs = warmup_experiment(2, steps=3, n_layers=2, d_model=16, **own)
    assert sorted(runs) == ["Post-LN, no warm-up", "Post-LN, warm-up", "Pre-LN, no warm-up",
                            "Pre-LN, warm-up"]
    assert all(len(losses) == 3 for losses in runs.values())
    with pytest.raises(NotImplementedError, match="toolkit's class"):
        layer_scales("pre", 2, 16, pre_ln_block=blocks_stubbed, post_ln_block=blocks_stubbed)
