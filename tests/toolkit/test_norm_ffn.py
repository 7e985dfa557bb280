"""toolkit.norm and toolkit.ffn against PyTorch (and Hugging Face's LlamaMLP)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.ffn import (
    GEGLU,
    GLU,
    FeedForward,
    ReGLU,
    SwiGLU,
    gelu_exact,
    gelu_tanh,
    swiglu_hidden_dim,
)
from toolkit.norm import LayerNorm, RMSNorm


def _x(*shape, seed=0, scale=3.0, shift=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale + shift


# ---------------------------------------------------------------- normalisation


@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_matches_torch(bias):
    d = 24
    ours, ref = LayerNorm(d, eps=1e-5, bias=bias), torch.nn.LayerNorm(d, eps=1e-5, bias=bias)
    with torch.no_grad():
        ours.weight.copy_(_x(d, seed=1))
        ref.weight.copy_(ours.weight)
        if bias:
            ours.bias.copy_(_x(d, seed=2))
            ref.bias.copy_(ours.bias)
    x = _x(3, 5, d)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    # The state dict uses PyTorch's names, so it loads straight into nn.LayerNorm.
    ref2 = torch.nn.LayerNorm(d, eps=1e-5, bias=bias)
    ref2.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ours(x), ref2(x), atol=1e-5, rtol=1e-5)


def test_layernorm_uses_biased_variance():
    # With d = 2 the biased and unbiased variances differ by a factor 2.
    x = torch.tensor([[0.0, 2.0]])
    out = LayerNorm(2, eps=0.0)(x)
    torch.testing.assert_close(out, torch.tensor([[-1.0, 1.0]]))  # var = 1, not 2


def test_rmsnorm_matches_torch():
    d = 24
    ours, ref = RMSNorm(d, eps=1e-6), torch.nn.RMSNorm(d, eps=1e-6)
    with torch.no_grad():
        ours.weight.copy_(_x(d, seed=3))
        ref.weight.copy_(ours.weight)
    x = _x(2, 7, d)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)
    # Formula: x / sqrt(mean(x^2) + eps) * gamma
    manual = x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * ours.weight
    torch.testing.assert_close(ours(x), manual, atol=1e-5, rtol=1e-5)


def test_norm_properties_and_parameter_counts():
    d = 16
    x = _x(4, d)
    ln, rms = LayerNorm(d), RMSNorm(d)
    # LayerNorm ignores a per-token shift; RMSNorm does not centre.
    torch.testing.assert_close(ln(x + 5.0), ln(x), atol=1e-4, rtol=1e-4)
    assert not torch.allclose(rms(x + 5.0), rms(x), atol=1e-3)
    # Both ignore a positive per-token rescaling.
    torch.testing.assert_close(rms(7.0 * x), rms(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ln(7.0 * x), ln(x), atol=1e-4, rtol=1e-4)
    assert sum(p.numel() for p in ln.parameters()) == 2 * d
    assert sum(p.numel() for p in rms.parameters()) == d


def test_norm_bad_input():
    with pytest.raises(ValueError, match="d_model"):
        LayerNorm(0)
    with pytest.raises(ValueError, match="d_model"):
        RMSNorm(-3)
    with pytest.raises(ValueError, match="last dimension"):
        RMSNorm(8)(torch.zeros(2, 7))


# ---------------------------------------------------------------- activations


def test_gelu_matches_torch():
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    torch.testing.assert_close(gelu_exact(x), F.gelu(x, approximate="none"))
    torch.testing.assert_close(gelu_tanh(x), F.gelu(x, approximate="tanh"))
    # The approximation is close but not equal.
    diff = (gelu_exact(x) - gelu_tanh(x)).abs().max()
    assert 0 < diff < 1e-3


# ---------------------------------------------------------------- feed-forward


def test_swiglu_hidden_dim_llama():
    assert swiglu_hidden_dim(4096) == 11008  # LLaMA-7B
    assert swiglu_hidden_dim(4096, multiple_of=1) == 10922  # int(8 * 4096 / 3)
    assert swiglu_hidden_dim(5120) == 13824  # LLaMA-13B
    assert SwiGLU(64, multiple_of=32).d_ff == 192  # int(170.67) = 170 -> 192
    with pytest.raises(ValueError, match="multiple_of"):
        swiglu_hidden_dim(64, multiple_of=0)


def test_feedforward_formula_and_size():
    d = 12
    ffn = FeedForward(d, activation="gelu")
    assert ffn.fc1.out_features == 4 * d
    assert sum(p.numel() for p in ffn.parameters()) == 8 * d * d + 4 * d + d
    x = _x(2, 3, d)
    manual = F.linear(F.gelu(F.linear(x, ffn.fc1.weight, ffn.fc1.bias)), ffn.fc2.weight,
                      ffn.fc2.bias)  # W2 act(W1 x + b1) + b2
    torch.testing.assert_close(ffn(x), manual, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="activation"):
        FeedForward(d, activation="swish!")


def test_feedforward_dropouts_sit_where_they_say():
    """``hidden_dropout`` drops hidden units before fc2 (PyTorch's encoder layer, T5);
    ``dropout`` drops outputs after fc2 (GPT-2). Same seed, same masks as the formula."""
    d, h = 8, 16
    torch.manual_seed(0)
    ffn = FeedForward(d, h, activation="relu", dropout=0.2, hidden_dropout=0.4).train()
    x = _x(3, 5, d)
    torch.manual_seed(7)
    got = ffn(x)
    torch.manual_seed(7)
    hidden = F.dropout(F.relu(ffn.fc1(x)), 0.4, training=True)  # first draw: hidden units
    expected = F.dropout(ffn.fc2(hidden), 0.2, training=True)  # second draw: outputs
    torch.testing.assert_close(got, expected)
    assert not torch.equal(got, ffn.eval()(x)), "the dropouts were active in training"
    plain = FeedForward(d, h, activation="relu", bias=False).train()  # T5's wo(relu(wi x))
    assert [n for n, _ in plain.named_parameters()] == ["fc1.weight", "fc2.weight"]
    manual = F.linear(F.relu(F.linear(x, plain.fc1.weight)), plain.fc2.weight)  # W2 relu(W1 x)
    torch.testing.assert_close(plain(x), manual)
    with pytest.raises(ValueError, match="dropout"):
        FeedForward(d, hidden_dropout=1.0)


@pytest.mark.parametrize(
    "cls, act",
    [
        (GLU, torch.sigmoid),
        (ReGLU, F.relu),
        (GEGLU, lambda z: F.gelu(z, approximate="none")),
        (SwiGLU, F.silu),
    ],
)
def test_glu_family(cls, act):
    d, h = 10, 14
    m = cls(d, d_ff=h)
    assert all(p.dim() == 2 for p in m.parameters())  # no biases by default
    x = _x(3, d)
    manual = m.down_proj(act(m.gate_proj(x)) * m.up_proj(x))
    torch.testing.assert_close(m(x), manual)


def test_swiglu_parameter_parity():
    d = 96
    classic = sum(p.numel() for p in FeedForward(d, bias=False).parameters())  # 8 d^2
    gated = sum(p.numel() for p in SwiGLU(d, multiple_of=1).parameters())  # 3 d (8d/3)
    assert abs(gated - classic) / classic < 0.01


def test_swiglu_matches_hf_llama_mlp():
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaMLP

    d, h = 16, 48
    cfg = transformers.LlamaConfig(
        hidden_size=d, intermediate_size=h, hidden_act="silu", num_attention_heads=2,
        num_key_value_heads=2,
    )
    ref = LlamaMLP(cfg)
    ours = SwiGLU(d, d_ff=h)
    ours.load_state_dict(ref.state_dict())  # same parameter names
    x = _x(2, 5, d)
    torch.testing.assert_close(ours(x), ref(x), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- where eps sits


@pytest.mark.parametrize("scale, eps", [(1e-3, 1e-2), (1e-4, 1e-1), (1e-5, 1e-6)])
def test_norms_match_torch_on_tiny_inputs_and_large_eps(scale, eps):
    """Tiny activations with a large eps: only eps inside the square root matches torch."""
    d = 8
    x = _x(3, 4, d, seed=4, scale=scale, shift=scale).double()
    ln, ref_ln = LayerNorm(d, eps=eps).double(), torch.nn.LayerNorm(d, eps=eps).double()
    rms, ref_rms = RMSNorm(d, eps=eps).double(), torch.nn.RMSNorm(d, eps=eps).double()
    with torch.no_grad():
        for ours, ref in ((ln, ref_ln), (rms, ref_rms)):
            ours.weight.copy_(_x(d, seed=5))
            ref.load_state_dict(ours.state_dict())
    torch.testing.assert_close(ln(x), ref_ln(x), atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(rms(x), ref_rms(x), atol=1e-12, rtol=1e-10)
    # eps added outside the root gives different numbers here.
    outside = x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * rms.weight
    if eps > scale**2:
        assert not torch.allclose(rms(x), outside, rtol=0.1)


def test_rmsnorm_keeps_float64_and_squares_half_precision_in_float32():
    d = 16
    rms = RMSNorm(d)
    x64 = _x(2, d, seed=6).double()
    torch.testing.assert_close(rms.double()(x64), torch.nn.RMSNorm(d, eps=1e-6).double()(x64),
                               atol=1e-14, rtol=1e-12)
    # 300^2 overflows fp16 (max 65504): computing the statistic in fp16 would give inf -> 0.
    x16 = torch.full((1, d), 300.0, dtype=torch.float16)
    out = RMSNorm(d).half()(x16)
    assert out.dtype == torch.float16
    torch.testing.assert_close(out.float(), torch.ones(1, d), atol=1e-3, rtol=1e-3)
