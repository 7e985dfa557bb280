"""Hidden checks for Exercise 7c: ``HybridLM``, the layer pattern of attention and Mamba.

The student's model is loaded with the weights of :class:`toolkit.hybrid.HybridLM` for
several patterns (a state dict loads only if the layers stand in the pattern's order) and
compared with it; then probed for causality. The toolkit's selective scan is switched off
while the checks run, so the student's model gets a scan written here (``scan=``), and a
mistake in their own ``selective_scan`` costs nothing in this exercise.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.hybrid import HybridLM

pytestmark = pytest.mark.grade_cell("test_hybrid_lm")

PATTERN = "Layer pattern ignored or reordered"
V, T = 24, 18
INIT = dict(vocab_size=V, d_model=16, n_heads=2, d_state=4, max_seq_len=20)


def _reference(pattern: str, seed: int) -> tuple[dict, HybridLM]:
    torch.manual_seed(seed)
    model = HybridLM(pattern=pattern, **INIT).eval()
    with torch.no_grad():
        for layer in model.layers:  # non-trivial norms, so a skipped norm shows
            layer.norm.weight.copy_(1 + 0.3 * torch.randn_like(layer.norm.weight))
        model.norm.weight.copy_(1 + 0.3 * torch.randn_like(model.norm.weight))
    return {k: v.detach().clone() for k, v in model.state_dict().items()}, model


# Runs in the student's kernel: their HybridLM with the checker's scan and our weights.
RUN = """
def _checker_scan(u, delta, A_log, B, C, D=None, state=None, return_state=False):
    A_bar = torch.exp(delta[..., None] * -torch.exp(A_log))
    Bu = delta[..., None] * B[:, :, None, :] * u[..., None]
    h = u.new_zeros(u.size(0), u.size(2), A_log.size(1)) if state is None else state
    ys = []
    for t in range(u.size(1)):
        h = A_bar[:, t] * h + Bu[:, t]
        ys.append((h * C[:, t, None, :]).sum(-1))
    y = torch.stack(ys, 1) + (0 if D is None else D * u)
    return (y, h) if return_state else y
_checked = HybridLM(**inputs["init"], scan=_checker_scan)
_checked.load_state_dict(inputs["state"])
_checked.eval()
with torch.no_grad():
    result = _checked(inputs["ids"])
"""


def _logits(submission, pattern: str, state: dict, ids: torch.Tensor) -> torch.Tensor:
    out = submission.run(RUN, init={**INIT, "pattern": pattern}, state=state, ids=ids)
    return expect_tensor(out, shape=(*ids.shape, V), dtype=torch.float32, name="logits")


def _ids(seed: int) -> torch.Tensor:
    return torch.randint(V, (2, T), generator=torch.Generator().manual_seed(seed))


@pytest.mark.weight(3)
@pytest.mark.pitfall(PATTERN)
@pytest.mark.parametrize("pattern", ["MA", "AM", "MAMM", "AMA"])
def test_matches_reference(submission, pattern):
    """HybridLM(pattern) with the reference's weights gives the reference's logits"""
    state, ref = _reference(pattern, seed=len(pattern))
    ids = _ids(1)
    out = _logits(submission, pattern, state, ids)
    with torch.no_grad():
        expected = ref(ids)
    assert_close(out, expected, atol=2e-5, rtol=1e-4,
                 hint="embed + pos_embed, then the layers in the pattern's order, norm, lm_head")


@pytest.mark.parametrize("pattern", ["AA", "MM"])
def test_pure_models(submission, pattern):
    """The pure patterns "AA" and "MM" match the reference too"""
    state, ref = _reference(pattern, seed=3)
    ids = _ids(2)
    out = _logits(submission, pattern, state, ids)
    with torch.no_grad():
        assert_close(out, ref(ids), atol=2e-5, rtol=1e-4, name="logits")


@pytest.mark.property
def test_causal(submission):
    """The logits at t do not depend on the tokens after t"""
    state, _ = _reference("MAM", seed=4)
    ids = _ids(3)
    changed = ids.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % V
    a = _logits(submission, "MAM", state, ids)
    b = _logits(submission, "MAM", state, changed)
    if not torch.allclose(a[:, :10], b[:, :10], atol=1e-5):
        raise CheckFailure("changing tokens from position 10 on changed the logits before it")


# Runs in the student's kernel: the kind of mixer each layer of their HybridLM holds, as a
# letter of the pattern ("A" an attention mixer, "M" a Mamba mixer, else the class's name).
KINDS = """
from toolkit.hybrid import CausalAttentionMixer as _Attention
from toolkit.ssm import MambaMixer as _Mamba
_built = HybridLM(**inputs["init"])
result = "".join("A" if isinstance(_layer.mixer, _Attention) else
                 "M" if isinstance(_layer.mixer, _Mamba) else
                 f"[{type(_layer.mixer).__name__}]" for _layer in _built.layers)
"""


@pytest.mark.structural
@pytest.mark.pitfall(PATTERN)
@pytest.mark.parametrize("pattern", ["MA", "MAMM"])
def test_layers_follow_the_pattern(submission, pattern):
    """One layer per letter, in the pattern's order: a CausalAttentionMixer for "A", a
    MambaMixer for "M" (read from the built model, so a mistaken order shows as what it is)"""
    kinds = submission.run(KINDS, init={**INIT, "pattern": pattern})
    if kinds != pattern:
        raise CheckFailure(f'HybridLM("{pattern}") builds its layers as "{kinds}" (A: '
                           "CausalAttentionMixer, M: MambaMixer, first layer first); build one "
                           "layer per letter of the pattern, in its order")
