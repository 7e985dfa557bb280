"""Hidden checks for Exercise 5: ``mla_cache_bytes`` and the two paths of MLA.

The student's ``MultiHeadLatentAttention`` is loaded with the weights of
:class:`toolkit.mla.MultiHeadLatentAttention` (RMSNorm weights randomised, so that every
piece matters) and compared with it on the explicit and the absorbed path, and when
decoding through a :class:`toolkit.mla.LatentKVCache`.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.mla import MultiHeadLatentAttention, mla_cache_bytes

pytestmark = pytest.mark.grade_cell("test_mla")

FACTOR2 = "MLA cache counted with a factor 2 (the latent serves K and V)"
ABSORB = "Absorbed MLA applies W_UK where W_UV belongs"

TOL = dict(atol=2e-5, rtol=1e-4)  # float32 modules
SMALL = {"d_model": 24, "n_heads": 3, "d_head": 8, "d_latent": 12, "d_rope": 4}
WIDE = {**SMALL, "d_q_latent": 10, "d_value": 6}  # query latent, d_value != d_head


def _randn(*shape, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _reference(init: dict, seed: int) -> MultiHeadLatentAttention:
    torch.manual_seed(seed)
    ref = MultiHeadLatentAttention(**init).eval()
    with torch.no_grad():
        for module in ref.modules():
            if isinstance(module, nn.RMSNorm):
                module.weight.uniform_(0.5, 1.5)
    return ref


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _forward(submission, init, ref, x, **kwargs):
    got = submission.module("MultiHeadLatentAttention", x, init=init, state=_state(ref), **kwargs)
    return expect_tensor(got, shape=x.shape, name=f"MultiHeadLatentAttention(x, {kwargs})")


@pytest.mark.pitfall(FACTOR2)
def test_mla_cache_bytes(submission):
    """DeepSeek-V2 (60 layers, d_c 512, d_R 64): 69,120 bytes per token in fp16."""
    cases = (((60, 512, 64, 1), {}), ((60, 512, 64, 4096), {"batch": 2}),
             ((60, 512, 64, 1), {"bytes_per_element": 6 / 8}), ((2, 5, 2, 3), {}))
    for args, kwargs in cases:
        label = f"mla_cache_bytes{args}" + (f" with {kwargs}" if kwargs else "")
        got = submission.call("mla_cache_bytes", *args, **kwargs)
        if isinstance(got, bool) or not isinstance(got, (int, float)):
            raise CheckFailure(f"{label} should be a number, got {type(got).__name__}")
        expected = mla_cache_bytes(*args, **kwargs)
        if got == 2 * expected:
            raise CheckFailure(f"{label} = {got:,}, twice the expected {expected:,}: MLA caches "
                               "one latent per token that serves keys and values (no factor 2)")
        if abs(got - expected) > 1e-9 * max(1, expected):
            raise CheckFailure(f"{label} = {got:,}, expected {expected:,} "
                               "(layers x (d_c + d_R) x tokens x batch x bytes)")


@pytest.mark.weight(2)
def test_explicit_path_matches_reference(submission):
    """absorb=False rebuilds per-head keys and values and equals the reference."""
    for init, seed in ((SMALL, 1), (WIDE, 2)):
        ref = _reference(init, seed)
        x = _randn(2, 5, init["d_model"], seed=seed + 10)
        got = _forward(submission, init, ref, x)
        with torch.no_grad():
            expected = ref(x)
        assert_close(got, expected, **TOL, name=f"the explicit path with {init}",
                     hint="k^C = W_UK c and v = W_UV c per head; q = [q^C ; q^R], "
                          "k = [k^C ; k^R] (k_r expanded to every head); scale = self.scale")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ABSORB)
def test_absorbed_path_matches_reference(submission):
    """absorb=True attends over the latents directly and equals the explicit reference."""
    for init, seed in ((SMALL, 3), (WIDE, 4)):
        ref = _reference(init, seed)
        x = _randn(2, 6, init["d_model"], seed=seed + 10)
        got = _forward(submission, init, ref, x, absorb=True)
        with torch.no_grad():
            expected = ref(x)
        assert_close(got, expected, **TOL, name=f"the absorbed path with {init}",
                     hint="q_lat = W_UK^T q^C; queries [q_lat ; q^R], keys [c ; k^R], values c; "
                          "then W_UV (not W_UK) on the attended latents")


@pytest.mark.pitfall(ABSORB)
def test_paths_agree_without_causal_mask(submission):
    """Both paths agree with each other, also with causal=False."""
    ref = _reference(SMALL, 5)
    x = _randn(1, 4, SMALL["d_model"], seed=15)
    explicit = _forward(submission, SMALL, ref, x, causal=False)
    absorbed = _forward(submission, SMALL, ref, x, causal=False, absorb=True)
    with torch.no_grad():
        expected = ref(x, causal=False)
    assert_close(explicit, expected, **TOL, name="the explicit path with causal=False")
    assert_close(absorbed, explicit, **TOL, name="the absorbed path vs your explicit path")


def test_latent_cache_decoding(submission):
    """Decoding token by token through the latent cache (absorbed) equals the full pass."""
    ref = _reference(SMALL, 6)
    x = _randn(2, 6, SMALL["d_model"], seed=16)
    code = (
        "_m = MultiHeadLatentAttention(**inputs['init']).eval()\n"
        "_m.load_state_dict(inputs['state'])\n"
        "_cache = LatentKVCache()\n"
        "_x = inputs['x']\n"
        "with torch.no_grad():\n"
        "    _outs = [_m(_x[:, :2], cache=_cache, absorb=True)]\n"
        "    _outs += [_m(_x[:, t:t + 1], cache=_cache, absorb=True) for t in range(2, 6)]\n"
        "result = torch.cat(_outs, dim=1)\n"
    )
    got = submission.run("from toolkit.mla import LatentKVCache\n" + code, init=SMALL,
                         state=_state(ref), x=x)
    with torch.no_grad():
        expected = ref(x)
    assert_close(got, expected, **TOL, name="decoding through the latent cache",
                 hint="use `mask` (it carries the cache offset) and attend over all cached latents")
