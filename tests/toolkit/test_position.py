"""Tests for toolkit.position: properties first, then agreement with Hugging Face.

Property checks are written as small functions returning True/False so that the
same check can be shown to *reject* a known-wrong implementation (the syllabus's
"doubled exponent" sinusoid and "interleaved pairs + rotate_half" RoPE).
"""

from __future__ import annotations

import math

import pytest
import torch

from toolkit import position as P

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tiny tensors: one intra-op thread avoids thread start-up/contention costs."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(scope="module")
def hf_rope():
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    def config(rope_parameters: dict, head_dim: int, max_position_embeddings: int):
        return LlamaConfig(
            hidden_size=4 * head_dim,
            num_attention_heads=4,
            head_dim=head_dim,
            max_position_embeddings=max_position_embeddings,
            rope_parameters=dict(rope_parameters),
        )

    return config, ROPE_INIT_FUNCTIONS


# --------------------------------------------------------------------------- #
# Sinusoidal                                                                   #
# --------------------------------------------------------------------------- #


def sinusoid_shift_ok(table_fn, n: int = 48, d: int = 16) -> bool:
    """PE(p + k) == M_k PE(p) for all p and several k, M_k from the spec's frequencies."""
    pe = table_fn(n, d).to(F64)
    for k in (1, 5, 17):
        m = P.sinusoidal_shift_matrix(k, d, dtype=F64)
        if not torch.allclose(pe[k:], pe[:-k] @ m.T, atol=1e-9):
            return False
    return True


def sinusoid_gram_relative_ok(table_fn, n: int = 48, d: int = 16) -> bool:
    """PE(m) . PE(n) depends only on m - n: the Gram matrix is constant along diagonals."""
    pe = table_fn(n, d).to(F64)
    gram = pe @ pe.T
    return torch.allclose(gram[1:, 1:], gram[:-1, :-1], atol=1e-9)


def doubled_exponent_sinusoid(n: int, d: int) -> torch.Tensor:
    """The circulating bug: ``dim`` already holds 2i, and the code doubles it again."""
    dim = torch.arange(0, d, 2, dtype=F64)
    angles = torch.arange(n, dtype=F64)[:, None] / 10000 ** (2 * dim / d)
    pe = torch.empty(n, d, dtype=F64)
    pe[:, 0::2], pe[:, 1::2] = torch.sin(angles), torch.cos(angles)
    return pe


def test_sinusoidal_matches_the_formula_entry_by_entry():
    n, d = 7, 10
    pe = P.sinusoidal_encoding(n, d, dtype=F64)
    assert pe.shape == (n, d) and P.sinusoidal_encoding(n, d).dtype == torch.float32
    for p in range(n):
        for i in range(d // 2):
            angle = p / 10000 ** (2 * i / d)
            assert pe[p, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-12)
            assert pe[p, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-12)


def test_sinusoidal_shift_and_relative_properties_hold():
    table = lambda n, d: P.sinusoidal_encoding(n, d, dtype=F64)
    assert sinusoid_shift_ok(table)
    assert sinusoid_gram_relative_ok(table)


def test_doubled_exponent_sinusoid_is_rejected():
    # Its dot products are still relative (any sinusoid table is), so the Gram check
    # alone cannot see the bug; the shift matrix built from the spec's frequencies can.
    assert sinusoid_gram_relative_ok(doubled_exponent_sinusoid)
    assert not sinusoid_shift_ok(doubled_exponent_sinusoid)


def test_shift_matrices_are_rotations_that_compose():
    d = 12
    m3, m4 = (P.sinusoidal_shift_matrix(k, d, dtype=F64) for k in (3, 4))
    assert torch.allclose(m3 @ m4, P.sinusoidal_shift_matrix(7, d, dtype=F64), atol=1e-12)
    assert torch.allclose(P.sinusoidal_shift_matrix(-3, d, dtype=F64), m3.T, atol=1e-12)
    assert torch.allclose(m3 @ m3.T, torch.eye(d, dtype=F64), atol=1e-12)


# --------------------------------------------------------------------------- #
# Learned absolute                                                             #
# --------------------------------------------------------------------------- #


def test_learned_embedding_lookup_and_errors():
    emb = P.LearnedPositionalEmbedding(max_seq_len=8, d_model=4)
    assert emb.weight.shape == (8, 4)
    assert torch.equal(emb(5), emb.weight[:5])
    assert torch.equal(emb(3, offset=5), emb.weight[5:8])
    pos = torch.tensor([[0, 1, 2], [4, 5, 6]])
    assert emb(pos).shape == (2, 3, 4) and torch.equal(emb(pos)[1], emb.weight[4:7])
    with pytest.raises(ValueError, match="max_seq_len=8"):
        emb(9)
    with pytest.raises(ValueError, match="max_seq_len=8"):
        emb(4, offset=5)
    with pytest.raises(ValueError, match="max_seq_len=8"):
        emb(torch.arange(9))
    with pytest.raises(ValueError, match="max_seq_len=8"):
        emb(torch.tensor([-1, 0]))
    with pytest.raises(ValueError, match="integer"):
        emb(torch.arange(3.0))


# --------------------------------------------------------------------------- #
# RoPE properties                                                              #
# --------------------------------------------------------------------------- #

D = 16


def rope_relative_ok(rope_fn, d: int = D, n: int = 200, seed: int = 0) -> bool:
    """<R_m q, R_n k> == q^T R_(n-m) k == <R_(m+c) q, R_(n+c) k> for many random m, n, c."""
    g = _gen(seed)
    q = torch.randn(1, 1, n, d, generator=g, dtype=F64)
    k = torch.randn(1, 1, n, d, generator=g, dtype=F64)
    m = torch.randint(0, 2000, (n,), generator=g)
    p = torch.randint(0, 2000, (n,), generator=g)
    c = torch.randint(-500, 500, (n,), generator=g)
    lhs = (rope_fn(q, m) * rope_fn(k, p)).sum(-1)
    offset_only = (q * rope_fn(k, p - m)).sum(-1)
    shifted = (rope_fn(q, m + c) * rope_fn(k, p + c)).sum(-1)
    return bool(
        torch.allclose(lhs, offset_only, atol=1e-9) and torch.allclose(lhs, shifted, atol=1e-9)
    )


def interleaved_pairs_with_rotate_half(x, positions):
    """The circulating bug: interleaved angle layout, but the half-split rotation."""
    inv = P.rope_inv_freq(x.shape[-1], dtype=F64)
    cos, sin = P.rope_cos_sin(positions, inv, "interleaved")
    return x * cos + P.rotate_half(x) * sin


def half_pairs_with_rotate_interleaved(x, positions):
    inv = P.rope_inv_freq(x.shape[-1], dtype=F64)
    cos, sin = P.rope_cos_sin(positions, inv, "half")
    return x * cos + P.rotate_interleaved(x) * sin


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_scores_depend_only_on_offset(layout):
    assert rope_relative_ok(lambda x, p: P.apply_rope(x, p, layout=layout))
    # also with a rescaled spectrum (YaRN) and a different base
    inv, _ = P.yarn_inv_freq_and_temperature(D, 500000.0, 8.0, 256)
    assert rope_relative_ok(lambda x, p: P.apply_rope(x, p, layout=layout, inv_freq=inv.to(F64)))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_preserves_norms(layout):
    x = torch.randn(2, 3, 5, D, generator=_gen(1), dtype=F64)
    y = P.apply_rope(x, torch.arange(100, 105), layout=layout)
    assert torch.allclose(x.norm(dim=-1), y.norm(dim=-1), atol=1e-12)


@pytest.mark.parametrize(
    "wrong", [interleaved_pairs_with_rotate_half, half_pairs_with_rotate_interleaved]
)
def test_mixed_layout_rope_is_rejected(wrong):
    assert not rope_relative_ok(wrong)


def test_rotations_are_quarter_turns():
    x = torch.randn(3, D, generator=_gen(2))
    assert torch.equal(P.rotate_half(P.rotate_half(x)), -x)
    assert torch.equal(P.rotate_interleaved(P.rotate_interleaved(x)), -x)
    perm = P.interleaved_to_half_permutation(D)
    assert torch.equal(P.rotate_interleaved(x)[..., perm], P.rotate_half(x[..., perm]))


def test_layouts_agree_after_permuting_projection_rows():
    d_model, T = 24, 9
    g = _gen(3)
    x = torch.randn(2, T, d_model, generator=g, dtype=F64)
    w_q = torch.randn(D, d_model, generator=g, dtype=F64)  # one head's q_proj rows
    w_k = torch.randn(D, d_model, generator=g, dtype=F64)
    perm = P.interleaved_to_half_permutation(D)
    assert sorted(perm.tolist()) == list(range(D))
    pos = torch.arange(T) + 37

    def scores(wq, wk, layout):
        q = P.apply_rope((x @ wq.T)[:, None], pos, layout=layout)  # (B, 1, T, D)
        k = P.apply_rope((x @ wk.T)[:, None], pos, layout=layout)
        return q @ k.transpose(-1, -2), q

    s_int, q_int = scores(w_q, w_k, "interleaved")
    s_half, q_half = scores(w_q[perm], w_k[perm], "half")
    assert torch.allclose(s_int, s_half, atol=1e-10)
    assert torch.allclose(q_int[..., perm], q_half, atol=1e-12)
    # without the permutation the two layouts give different scores
    assert not torch.allclose(s_int, scores(w_q, w_k, "half")[0], atol=1e-3)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_with_cache_offset_equals_slicing_the_full_sequence(layout):
    T = 20
    x = torch.randn(2, 3, T, D, generator=_gen(4))
    full = P.apply_rope(x, torch.arange(T), layout=layout)
    for start in (1, 7, 19):
        step = P.apply_rope(x[:, :, start:], torch.arange(start, T), layout=layout)
        assert torch.allclose(step, full[:, :, start:], atol=1e-6)
    # (B, T) positions: each row with its own offset (left padding) equals its own call
    pos = torch.stack([torch.arange(T), torch.arange(T) + 5])
    batched = P.apply_rope(x, pos, layout=layout)
    for b in range(2):
        alone = P.apply_rope(x[b : b + 1], pos[b], layout=layout)
        assert torch.allclose(batched[b : b + 1], alone, atol=1e-6)


def test_rope_cos_sin_shapes_and_layouts():
    inv = P.rope_inv_freq(8)
    cos, sin = P.rope_cos_sin(torch.arange(5), inv, "half")
    assert cos.shape == sin.shape == (5, 8)
    assert torch.equal(cos[:, :4], cos[:, 4:])
    cos_i, _ = P.rope_cos_sin(torch.arange(5)[None].repeat(3, 1), inv, "interleaved")
    assert cos_i.shape == (3, 1, 5, 8) and torch.equal(cos_i[0, 0, :, 0::2], cos[:, :4])


def test_rope_inv_freq_values():
    inv = P.rope_inv_freq(64, 10000.0, dtype=F64)
    assert inv[0] == 1.0
    assert inv[-1].item() == pytest.approx(10000.0 ** (-62 / 64), rel=1e-12)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: P.apply_rope(torch.zeros(1, 1, 4, 7), torch.arange(4)), "even"),
        (lambda: P.apply_rope(torch.zeros(1, 1, 4, 8), torch.arange(4), layout="gptj"), "layout"),
        (lambda: P.apply_rope(torch.zeros(1, 1, 4, 8), torch.arange(5)), "positions"),
        (lambda: P.apply_rope(torch.zeros(1, 1, 4, 8), torch.arange(4), inv_freq=torch.ones(3)),
         "inv_freq"),
        (lambda: P.sinusoidal_encoding(4, 5), "d_model"),
        (lambda: P.rope_inv_freq_linear(8, 10000.0, 0.5), "scale"),
        (lambda: P.longrope_inv_freq(8, 10000.0, [1.0, 1.0]), "rescale_factors"),
        (lambda: P.alibi_slopes(0), "n_heads"),
        (lambda: P.alibi_bias(4, 5, 3), "n_keys"),
        (lambda: P.yarn_inv_freq_and_temperature(8, 1e4, 2.0, 64, 1, 32), "beta_slow"),
    ],
)
def test_bad_arguments_raise_value_error_naming_them(call, match):
    with pytest.raises(ValueError, match=match):
        call()


# --------------------------------------------------------------------------- #
# RoPE against Hugging Face                                                    #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize(
    "rope_parameters",
    [
        {"rope_type": "default", "rope_theta": 10000.0},
        {"rope_type": "default", "rope_theta": 500000.0},
        {
            "rope_type": "yarn",
            "rope_theta": 10000.0,
            "factor": 4.0,
            "original_max_position_embeddings": 512,
        },
    ],
)
def test_apply_rope_matches_hf_llama(hf_rope, rope_parameters):
    from transformers.models.llama.modeling_llama import (
        LlamaRotaryEmbedding,
        apply_rotary_pos_emb,
        rotate_half,
    )

    config, _ = hf_rope
    d, T = 32, 11
    rotary = LlamaRotaryEmbedding(config(rope_parameters, d, 2048))
    q, k = torch.randn(2, 2, 4, T, d, generator=_gen(5))
    pos = torch.stack([torch.arange(T), torch.arange(T) + 100])
    cos, sin = rotary(q, pos)
    q_hf, k_hf = apply_rotary_pos_emb(q, k, cos, sin)
    base = rope_parameters["rope_theta"]
    if rope_parameters["rope_type"] == "yarn":
        inv, scaling = P.yarn_inv_freq_and_temperature(d, base, 4.0, 512)
    else:
        inv, scaling = P.rope_inv_freq(d, base), 1.0
    assert scaling == pytest.approx(rotary.attention_scaling)
    for ours_in, theirs in ((q, q_hf), (k, k_hf)):
        ours = P.apply_rope(ours_in, pos, inv_freq=inv, attention_scaling=scaling)
        assert torch.allclose(ours, theirs, atol=1e-5)
    assert torch.equal(P.rotate_half(q), rotate_half(q))


def test_apply_rope_interleaved_matches_hf_gptj(hf_rope):
    from transformers.models.gptj.modeling_gptj import (
        apply_rotary_pos_emb,
        create_sinusoidal_positions,
        rotate_every_two,
    )

    d, T = 16, 9
    x = torch.randn(2, T, 3, d, generator=_gen(6))  # GPT-J rotates in (B, T, H, d)
    pos = torch.stack([torch.arange(T), torch.arange(T) + 40])
    sincos = create_sinusoidal_positions(64, d)[pos]  # (B, T, d): [sin | cos]
    sin, cos = sincos.split(d // 2, dim=-1)
    theirs = apply_rotary_pos_emb(x, sin, cos)
    ours = P.apply_rope(x.transpose(1, 2), pos, layout="interleaved").transpose(1, 2)
    assert torch.allclose(ours, theirs, atol=1e-5)
    assert torch.equal(P.rotate_interleaved(x), rotate_every_two(x))


@pytest.mark.parametrize(
    "d, base, scale", [(32, 10000.0, 2.0), (64, 500000.0, 8.0), (128, 1e6, 3.5)]
)
def test_linear_scaling_matches_hf_and_divides_positions(hf_rope, d, base, scale):
    config, fns = hf_rope
    cfg = config({"rope_type": "linear", "rope_theta": base, "factor": scale}, d, 1024)
    hf_inv, hf_scaling = fns["linear"](cfg, None)
    ours = P.rope_inv_freq_linear(d, base, scale)
    assert torch.allclose(ours, hf_inv, rtol=1e-6) and hf_scaling == 1.0
    x = torch.randn(1, 2, 6, d, generator=_gen(7), dtype=F64)
    pos = torch.arange(300, 306)
    by_freq = P.apply_rope(x, pos, inv_freq=P.rope_inv_freq_linear(d, base, scale, dtype=F64))
    by_pos = P.apply_rope(x, pos.to(F64) / scale, base=base)
    assert torch.allclose(by_freq, by_pos, atol=1e-10)


@pytest.mark.parametrize("d, scale", [(32, 2.0), (64, 4.0), (128, 16.0)])
def test_ntk_keeps_fastest_band_and_interpolates_slowest(hf_rope, d, scale):
    plain = P.rope_inv_freq(d, dtype=F64)
    ntk = P.rope_inv_freq_ntk(d, 10000.0, scale, dtype=F64)
    assert ntk[0] == plain[0]
    assert ntk[-1].item() == pytest.approx(plain[-1].item() / scale, rel=1e-12)
    assert bool((ntk <= plain).all()) and bool((ntk >= plain / scale - 1e-15).all())
    # static NTK with scale s == HF "dynamic" with factor 1 at length s * L
    config, fns = hf_rope
    L = 256
    cfg = config({"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 1.0}, d, L)
    hf_inv, _ = fns["dynamic"](cfg, None, seq_len=int(scale * L))
    assert torch.allclose(P.rope_inv_freq_ntk(d, 10000.0, scale), hf_inv, rtol=1e-5)


@pytest.mark.parametrize("factor", [2.0, 4.0, 8.0])
def test_dynamic_ntk_is_plain_inside_trained_length_and_matches_hf(hf_rope, factor):
    config, fns = hf_rope
    d, L, base = 64, 512, 10000.0
    cfg = config({"rope_type": "dynamic", "rope_theta": base, "factor": factor}, d, L)
    plain = P.rope_inv_freq(d, base)
    for seq_len in (1, 100, L):
        assert torch.equal(P.rope_inv_freq_dynamic_ntk(d, base, seq_len, L, factor), plain)
    for seq_len in (1, 100, L, L + 1, 2 * L, 7 * L + 3):
        ours = P.rope_inv_freq_dynamic_ntk(d, base, seq_len, L, factor)
        hf_inv, _ = fns["dynamic"](cfg, None, seq_len=seq_len)
        assert torch.allclose(ours, hf_inv, rtol=1e-5), seq_len
    assert not torch.allclose(P.rope_inv_freq_dynamic_ntk(d, base, 2 * L, L, factor), plain)


YARN_CASES = [
    # d, base, s, L_train, beta_fast, beta_slow, truncate
    (64, 10000.0, 4.0, 2048, 32, 1, True),
    (128, 10000.0, 16.0, 4096, 32, 1, True),
    (128, 1e6, 8.0, 32768, 32, 1, True),
    (64, 10000.0, 4.0, 2048, 32, 1, False),
    (64, 10000.0, 2.5, 1024, 16, 2, False),
    (32, 100.0, 4.0, 100000, 32, 1, True),  # ramp end clamped to d - 1, as in HF
    (16, 10000.0, 1.0, 512, 32, 1, True),
]


@pytest.mark.parametrize("d, base, s, L, beta_fast, beta_slow, truncate", YARN_CASES)
def test_yarn_matches_hf(hf_rope, d, base, s, L, beta_fast, beta_slow, truncate):
    config, fns = hf_rope
    params = {
        "rope_type": "yarn",
        "rope_theta": base,
        "factor": s,
        "original_max_position_embeddings": L,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
        "truncate": truncate,
    }
    hf_inv, hf_factor = fns["yarn"](config(params, d, int(s * L)), None)
    inv, factor = P.yarn_inv_freq_and_temperature(
        d, base, s, L, beta_fast, beta_slow, truncate=truncate
    )
    assert torch.allclose(inv, hf_inv, rtol=1e-5)
    assert factor == pytest.approx(hf_factor, rel=1e-12)
    assert factor == pytest.approx(0.1 * math.log(s) + 1 if s > 1 else 1.0)


@pytest.mark.parametrize("ramp", ["index", "ratio"])
def test_yarn_keeps_fast_bands_and_interpolates_slow_ones(ramp):
    d, base, s, L = 128, 10000.0, 8.0, 4096
    theta = P.rope_inv_freq(d, base, dtype=F64)
    r = P.yarn_band_ratios(d, base, L)
    inv, _ = P.yarn_inv_freq_and_temperature(d, base, s, L, truncate=False, ramp=ramp)
    inv = inv.to(F64)
    fast, slow, mid = r >= 32, r <= 1, (r > 1) & (r < 32)
    assert fast.any() and slow.any() and mid.any()
    assert torch.allclose(inv[fast], theta[fast], rtol=1e-6)
    assert torch.allclose(inv[slow], theta[slow] / s, rtol=1e-6)
    assert bool((inv[mid] < theta[mid]).all() and (inv[mid] > theta[mid] / s).all())
    gamma = (inv - theta / s) / (theta - theta / s)  # 1 = kept, 0 = interpolated
    if ramp == "ratio":  # the paper's equation: linear in r
        assert torch.allclose(gamma[mid], (r[mid] - 1) / 31, atol=1e-5)
    else:  # HF / reference code: linear in the band index, i.e. in log r
        slopes = gamma[mid].diff()
        assert torch.allclose(slopes, slopes[:1].expand_as(slopes), atol=1e-5)
    # HF's default truncate=True widens the ramp by less than one band on each side
    inv_t, _ = P.yarn_inv_freq_and_temperature(d, base, s, L)
    step = base ** (2 / d)  # r shrinks by this factor from one band to the next
    assert torch.allclose(inv_t[r >= 32 * step].to(F64), theta[r >= 32 * step], rtol=1e-6)
    assert torch.allclose(inv_t[r <= 1 / step].to(F64), theta[r <= 1 / step] / s, rtol=1e-6)


def test_yarn_temperature_scales_logits_by_its_square():
    s = 16.0
    inv, mscale = P.yarn_inv_freq_and_temperature(32, 10000.0, s, 1024)
    q, k = torch.randn(2, 1, 1, 7, 32, generator=_gen(8), dtype=F64)
    pos = torch.arange(7)
    inv = inv.to(F64)
    plain = P.apply_rope(q, pos, inv_freq=inv) @ P.apply_rope(k, pos, inv_freq=inv).mT
    tempered = (
        P.apply_rope(q, pos, inv_freq=inv, attention_scaling=mscale)
        @ P.apply_rope(k, pos, inv_freq=inv, attention_scaling=mscale).mT
    )
    assert torch.allclose(tempered, plain * (0.1 * math.log(s) + 1) ** 2, atol=1e-10)
    # the circulating claim "logits times sqrt(1 + 0.1 ln s)" is a different number
    assert mscale**2 != pytest.approx(math.sqrt(1 + 0.1 * math.log(s)), rel=1e-3)


def test_longrope_matches_hf(hf_rope):
    config, fns = hf_rope
    d, L, s = 32, 1024, 4.0
    g = _gen(9)
    short = (1 + torch.rand(d // 2, generator=g)).tolist()
    long = (1 + 8 * torch.rand(d // 2, generator=g)).tolist()
    params = {
        "rope_type": "longrope",
        "rope_theta": 10000.0,
        "factor": s,
        "short_factor": short,
        "long_factor": long,
        "original_max_position_embeddings": L,
    }
    cfg = config(params, d, int(s * L))
    for seq_len, factors in ((L, short), (L + 1, long), (int(s * L), long)):
        hf_inv, hf_factor = fns["longrope"](cfg, None, seq_len=seq_len)
        assert torch.allclose(P.longrope_inv_freq(d, 10000.0, factors), hf_inv, rtol=1e-6)
    assert P.longrope_attention_factor(s, L) == pytest.approx(hf_factor, rel=1e-12)
    assert torch.equal(P.longrope_inv_freq(d, 10000.0, [1.0] * (d // 2)), P.rope_inv_freq(d))


@pytest.mark.parametrize("d, L, s, base, phi3_style", [
    (32, 1024, 4.0, 10000.0, False),
    (96, 4096, 32.0, 10000.0, True),   # Phi-3-mini-128k: 4k -> 128k, factor from the lengths
    (64, 2048, 8.0, 500000.0, True),
    (16, 300, 2.5, 10000.0, False),
])
def test_longrope_switch_and_attention_factor_match_hf(hf_rope, d, L, s, base, phi3_style):
    """The short/long switch on the length and sqrt(1 + ln s / ln L), against HF's init."""
    config, fns = hf_rope
    g = _gen(d + L)
    short = (1 + 0.5 * torch.rand(d // 2, generator=g)).tolist()
    long = (1 + 20 * torch.rand(d // 2, generator=g)).sort().values.tolist()
    params = {"rope_type": "longrope", "rope_theta": base, "short_factor": short,
              "long_factor": long, "original_max_position_embeddings": L}
    if not phi3_style:
        params["factor"] = s  # Phi-3 configs leave it out: HF takes max / original
    cfg = config(params, d, int(s * L))
    for seq_len in (1, L // 2, L - 1, L, L + 1, 2 * L + 7, int(s * L)):
        hf_inv, hf_factor = fns["longrope"](cfg, None, seq_len=seq_len)
        inv, factor = P.longrope_inv_freq_and_attention_factor(d, base, short, long, seq_len, L, s)
        assert torch.allclose(inv, hf_inv, rtol=1e-6, atol=0), seq_len
        assert factor == pytest.approx(hf_factor, rel=1e-12), seq_len
        assert (seq_len > L) == (not torch.allclose(inv, P.longrope_inv_freq(d, base, short)))
    _, one = P.longrope_inv_freq_and_attention_factor(d, base, short, long, 2 * L, L, 1.0)
    assert one == 1.0
    with pytest.raises(ValueError, match="seq_len"):
        P.longrope_inv_freq_and_attention_factor(d, base, short, long, 0, L, s)


# --------------------------------------------------------------------------- #
# ALiBi                                                                        #
# --------------------------------------------------------------------------- #


def naive_slopes(n: int) -> torch.Tensor:
    """The bug for non-power-of-two heads: the power-of-two formula applied blindly."""
    return torch.tensor([2 ** (-8 * h / n) for h in range(1, n + 1)])


def test_alibi_slopes_powers_of_two_and_the_non_power_rule():
    assert torch.equal(P.alibi_slopes(8), torch.tensor([2.0**-k for k in range(1, 9)]))
    # 12 heads: the 8 slopes for 8 heads, then slopes 1, 3, 5, 7 of the 16-head sequence
    expected = [2.0**-k for k in range(1, 9)] + [2.0 ** (-k / 2) for k in (1, 3, 5, 7)]
    assert torch.allclose(P.alibi_slopes(12), torch.tensor(expected), rtol=1e-7)
    assert not torch.allclose(naive_slopes(12), P.alibi_slopes(12))


def test_alibi_matches_hf_bloom():
    pytest.importorskip("transformers")
    from transformers.models.bloom.modeling_bloom import build_alibi_tensor

    T = 10
    for n in range(1, 41):
        hf = build_alibi_tensor(torch.ones(1, T), n, torch.float32).view(n, 1, T)
        assert torch.allclose(P.alibi_bias_key_only(n, T), hf, rtol=1e-6), n
        assert torch.allclose(P.alibi_slopes(n), hf[:, 0, 1], rtol=1e-6), n
        if n & (n - 1):  # not a power of two
            assert not torch.allclose(naive_slopes(n), hf[:, 0, 1], rtol=1e-6), n


def test_alibi_bias_values_masking_and_cache_alignment():
    H, T = 4, 6
    m = P.alibi_slopes(H)
    causal = P.alibi_bias(H, T)
    i, j = 4, 1
    assert causal[:, i, j].tolist() == pytest.approx((-m * (i - j)).tolist())
    assert torch.isneginf(causal[:, 1, 2]).all() and (causal.diagonal(dim1=1, dim2=2) == 0).all()
    both = P.alibi_bias(H, T, causal=False)
    assert torch.equal(both, both.transpose(1, 2)) and both[:, 1, 4].tolist() == pytest.approx(
        (-3 * m).tolist()
    )
    # with a KV cache the queries are the last rows of the full matrix
    assert torch.equal(P.alibi_bias(H, 2, 9), P.alibi_bias(H, 9)[:, -2:])


def test_alibi_key_only_form_gives_same_attention_for_causal_rows():
    H, T = 6, 9
    scores = torch.randn(H, T, T, generator=_gen(10))
    full = torch.softmax(scores + P.alibi_bias(H, T), dim=-1)
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
    key_only = (scores + P.alibi_bias_key_only(H, T)).masked_fill(future, float("-inf"))
    assert torch.allclose(full, torch.softmax(key_only, dim=-1), atol=1e-6)
    # the shift argument needs the causal structure: bidirectional -m|i-j| is not m*j + const
    bidir = torch.softmax(scores + P.alibi_bias(H, T, causal=False), dim=-1)
    assert not torch.allclose(bidir, torch.softmax(scores + P.alibi_bias_key_only(H, T), -1))


# --------------------------------------------------------------------------- #
# T5 relative position bias                                                   #
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (16, 64), (64, 300), (8, 20)])
def test_t5_buckets_match_hf(bidirectional, num_buckets, max_distance):
    pytest.importorskip("transformers")
    from transformers.models.t5.modeling_t5 import T5Attention

    rel = torch.arange(-700, 700)[None, :] + torch.arange(3)[:, None]
    ours = P.t5_relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    hf = T5Attention._relative_position_bucket(rel, bidirectional, num_buckets, max_distance)
    assert torch.equal(ours, hf)
    assert ours.min() >= 0 and ours.max() == num_buckets - 1


def test_t5_buckets_exact_near_then_logarithmic():
    rel = -torch.arange(0, 200)  # keys in the past
    b = P.t5_relative_position_bucket(rel, bidirectional=True)
    assert b[:8].tolist() == list(range(8))  # one bucket per distance below 32/2/2 = 8
    assert (b.diff() >= 0).all() and (b[128:] == 15).all()
    assert P.t5_relative_position_bucket(torch.tensor([3]), True).item() == 16 + 3


@pytest.mark.parametrize("is_decoder, past", [(False, 0), (True, 0), (True, 5)])
def test_t5_bias_module_matches_hf_compute_bias(is_decoder, past):
    pytest.importorskip("transformers")
    from transformers import T5Config
    from transformers.models.t5.modeling_t5 import T5Attention

    cfg = T5Config(d_model=16, d_kv=4, num_heads=4, is_decoder=is_decoder, d_ff=32)
    hf = T5Attention(cfg, has_relative_attention_bias=True, layer_idx=0)
    ours = P.T5RelativePositionBias(4, 32, 128, bidirectional=not is_decoder)
    ours.load_state_dict({"relative_attention_bias.weight": hf.relative_attention_bias.weight})
    T_q, T_k = 3, past + 3
    expected = hf.compute_bias(T_q, T_k, past_seen_tokens=past)
    got = ours(T_q, T_k, query_offset=past)
    assert got.shape == (1, 4, T_q, T_k) and torch.equal(got, expected)
