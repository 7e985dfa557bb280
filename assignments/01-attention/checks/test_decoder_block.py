"""Hidden checks for Exercise 4: the encoder-decoder ``DecoderBlock``.

The student's block is loaded with the weights of :class:`toolkit.transformer.DecoderBlock`
(LayerNorm weights randomised so that the order of residuals and norms matters) and
compared with it, in both layouts, then probed for the properties that define it:
causal self-attention, cross-attention that reads all of ``memory``, source padding.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.masks import padding_mask
from toolkit.transformer import DecoderBlock

pytestmark = pytest.mark.grade_cell("test_decoder_block")

LEAK = "Decoder self-attention without a causal mask"
CROSS = "Cross-attention takes keys and values from the decoder, not the encoder memory"
NAMES = "Parameter names differ from the specification"
LAYOUT = "Residual and LayerNorm order wrong (Post-LN vs Pre-LN)"

D_MODEL, N_HEADS, D_FF = 16, 4, 32
B, T_TGT, T_SRC = 2, 5, 7
TOL = dict(atol=2e-5, rtol=1e-4)


def _init(norm_first=False):
    return {"d_model": D_MODEL, "n_heads": N_HEADS, "d_ff": D_FF, "norm_first": norm_first}


def _randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _reference(norm_first=False, seed=0) -> DecoderBlock:
    torch.manual_seed(seed)
    block = DecoderBlock(**_init(norm_first)).eval()
    with torch.no_grad():
        for name, p in block.named_parameters():
            if name.startswith("norm"):  # LayerNorm starts at (1, 0): make it visible
                p.copy_((1.0 if name.endswith("weight") else 0.0) + 0.3 * torch.randn_like(p))
    return block


def _state(block) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in block.state_dict().items()}


def _inputs(seed=1):
    return _randn(B, T_TGT, D_MODEL, seed=seed), _randn(B, T_SRC, D_MODEL, seed=seed + 1)


def _run(submission, ref, x, memory, norm_first=False, **kwargs):
    out = submission.module("DecoderBlock", x, memory, init=_init(norm_first), state=_state(ref),
                            **kwargs)
    return expect_tensor(out, shape=(x.size(0), x.size(1), D_MODEL), name="DecoderBlock output")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names(submission):
    """Sub-modules are self_attn, cross_attn, ff, norm1..3 with the specified shapes."""
    expected = DecoderBlock(**_init()).state_dict()
    got = submission.module_state("DecoderBlock", init=_init())
    if not isinstance(got, dict):
        raise CheckFailure("could not read the parameters of your DecoderBlock")
    if sorted(got) != sorted(expected):
        missing, extra = sorted(set(expected) - set(got)), sorted(set(got) - set(expected))
        raise CheckFailure(f"DecoderBlock parameters differ from the specification: missing "
                           f"{missing[:6]}, unexpected {extra[:6]}")
    for name, tensor in expected.items():
        expect_tensor(got[name], shape=tensor.shape, name=f"parameter {name}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LAYOUT)
def test_post_ln_matches_reference(submission):
    """Post-LN block (norm_first=False) with target and source padding equals the reference."""
    ref = _reference(norm_first=False, seed=2)
    x, memory = _inputs(seed=3)
    self_mask = padding_mask(torch.tensor([5, 3]))  # (B, 1, 1, T_tgt): target padding
    memory_mask = padding_mask(torch.tensor([7, 4]))  # (B, 1, 1, T_src): source padding
    got = _run(submission, ref, x, memory, self_mask=self_mask, memory_mask=memory_mask)
    with torch.no_grad():
        expected = ref(x, memory, self_mask=self_mask, memory_mask=memory_mask)
    assert_close(got, expected, **TOL, name="DecoderBlock(norm_first=False)",
                 hint="x = norm1(x + SelfAttn(x)); x = norm2(x + CrossAttn(x, memory)); "
                      "x = norm3(x + FFN(x)), with the causal mask ANDed with self_mask")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LAYOUT)
def test_pre_ln_matches_reference(submission):
    """Pre-LN block (norm_first=True) equals the reference."""
    ref = _reference(norm_first=True, seed=4)
    x, memory = _inputs(seed=5)
    memory_mask = padding_mask(torch.tensor([6, 7]))
    got = _run(submission, ref, x, memory, norm_first=True, memory_mask=memory_mask)
    with torch.no_grad():
        expected = ref(x, memory, memory_mask=memory_mask)
    assert_close(got, expected, **TOL, name="DecoderBlock(norm_first=True)",
                 hint="x = x + SelfAttn(norm1(x)); x = x + CrossAttn(norm2(x), memory); "
                      "x = x + FFN(norm3(x)); memory itself is not normalised")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LEAK)
@pytest.mark.property
def test_no_future_leak(submission):
    """Changing target token t never changes the outputs at positions before t."""
    ref = _reference(seed=6)
    x, memory = _inputs(seed=7)
    base = _run(submission, ref, x, memory)
    for t in (1, 3):
        x2 = x.clone()
        x2[:, t:] += _randn(B, T_TGT - t, D_MODEL, seed=8 + t)
        moved = _run(submission, ref, x2, memory)
        if not torch.allclose(moved[:, :t], base[:, :t], atol=1e-5):
            raise CheckFailure(
                f"changing target tokens {t}.. changed the outputs at earlier positions (< {t}): "
                "the decoder sees the future. Build causal_mask(T_tgt) (query i sees j <= i), "
                "AND it with self_mask, and use it in the self-attention")
        if torch.allclose(moved[:, t:], base[:, t:], atol=1e-5):
            raise CheckFailure(f"changing target tokens {t}.. did not change their own outputs")


@pytest.mark.structural
@pytest.mark.weight(2)
@pytest.mark.pitfall(CROSS)
def test_cross_attention_reads_memory(submission):
    """Every target position reads all of memory (cross-attention is not causal)."""
    ref = _reference(seed=10)
    x, memory = _inputs(seed=11)
    base = _run(submission, ref, x, memory)
    memory2 = memory.clone()
    memory2[:, -1] += 2.0 * _randn(B, D_MODEL, seed=12)  # change the last source token only
    moved = _run(submission, ref, x, memory2)
    unchanged = [t for t in range(T_TGT) if torch.allclose(moved[:, t], base[:, t], atol=1e-6)]
    if unchanged:
        raise CheckFailure(
            f"changing the last source token did not change target positions {unchanged}: "
            "the cross-attention must take its keys and values from `memory` and must not "
            "be causal (every target position may read every source position)")


@pytest.mark.pitfall(CROSS)
@pytest.mark.property
def test_memory_mask_hides_source_padding(submission):
    """Source tokens hidden by memory_mask have no effect on the output."""
    ref = _reference(seed=13)
    x, memory = _inputs(seed=14)
    memory_mask = padding_mask(torch.tensor([4, 7]))  # sequence 0: source tokens 4..6 are padding
    base = _run(submission, ref, x, memory, memory_mask=memory_mask)
    memory2 = memory.clone()
    memory2[0, 4:] = _randn(3, D_MODEL, seed=15)
    moved = _run(submission, ref, x, memory2, memory_mask=memory_mask)
    if not torch.allclose(moved[0], base[0], atol=1e-6):
        raise CheckFailure("changing padded source tokens (hidden by memory_mask) changed the "
                           "output: pass memory_mask to the cross-attention")
    assert_close(moved[1], base[1], atol=1e-6, rtol=0, name="the output of the other sequence")


def test_non_causal_option(submission):
    """causal=False uses self_mask alone (here None: bidirectional self-attention)."""
    ref = _reference(seed=16)
    x, memory = _inputs(seed=17)
    got = _run(submission, ref, x, memory, causal=False)
    with torch.no_grad():
        expected = ref(x, memory, causal=False)
    assert_close(got, expected, **TOL, name="DecoderBlock(..., causal=False)",
                 hint="build the causal mask only when causal=True")
