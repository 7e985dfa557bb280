"""Hidden checks for Exercise 3: ``PreLNBlock.forward`` and ``EncoderStack``'s final norm.

The student's block (built from their own ``LayerNorm``, the given attention and MLP) is
loaded with the weights of :class:`toolkit.residual.PreLNBlock`, norms randomised so that
where they sit matters, and compared with it; then probed for the property that defines
Pre-LN: with every sub-layer silenced, the block is exactly the identity.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from autograder.protocol.trusted import SubmissionError
from toolkit.norm import LayerNorm, RMSNorm
from toolkit.residual import EncoderStack, PostLNBlock, PreLNBlock

pytestmark = pytest.mark.grade_cell("test_pre_ln_block")

POST = "Post-LN where Pre-LN was asked"
STREAM = "Pre-LN that normalises the residual stream itself"
FINAL = "Pre-LN stack without the final norm"
CONFIG = "Final norm fixed instead of built from the stack's norm and eps"
D, H, FF = 16, 4, 32
INIT = {"d_model": D, "n_heads": H, "d_ff": FF}
TOL = dict(atol=2e-5, rtol=1e-4)  # float32 modules


def _randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _reference(cls, *args, seed=0, **kwargs):
    torch.manual_seed(seed)
    module = cls(*args, **kwargs).eval()
    g = torch.Generator().manual_seed(seed + 100)
    with torch.no_grad():  # norms that are not the identity, so their place matters
        for m in module.modules():
            if isinstance(m, (LayerNorm, RMSNorm)):
                m.weight.copy_(1 + 0.5 * torch.randn(m.weight.shape, generator=g))
                if getattr(m, "bias", None) is not None:
                    m.bias.copy_(0.5 * torch.randn(m.bias.shape, generator=g))
    return module


def _state(module):
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


@pytest.mark.weight(3)
@pytest.mark.pitfall(POST)
def test_block_matches_reference(submission):
    """PreLNBlock(16, 4, 32) with loaded weights: x + Attn(LN(x)), then x + FFN(LN(x))."""
    ref = _reference(PreLNBlock, D, H, FF, seed=1)
    x = _randn(2, 5, D, seed=2)
    got = submission.module("PreLNBlock", x, init=INIT, state=_state(ref))
    expect_tensor(got, shape=x.shape, name="PreLNBlock(x)")
    post = PostLNBlock(D, H, FF).eval()
    post.load_state_dict(ref.state_dict())
    with torch.no_grad():
        expected, as_post = ref(x), post(x)
    if torch.allclose(got, as_post, **TOL):
        raise CheckFailure("your PreLNBlock computes the Post-LN layout LN(x + F(x)): in Pre-LN "
                           "each sub-layer reads norm(x) and its output is added to x unchanged")
    assert_close(got, expected, **TOL, name="PreLNBlock(x)",
                 hint="x = x + dropout1(self_attn(norm1(x), mask=mask)); "
                      "x = x + dropout2(ffn(norm2(x)))")


@pytest.mark.pitfall(POST)
def test_block_passes_the_mask(submission):
    """The key-padding mask reaches the attention: padded keys change nothing."""
    ref = _reference(PreLNBlock, D, H, FF, seed=3)
    x = _randn(2, 6, D, seed=4)
    mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])[:, None, None, :]
    try:
        got = submission.module("PreLNBlock", x, init=INIT, state=_state(ref), mask=mask)
    except SubmissionError as exc:
        if "Bool" in str(exc) and "self_attn" in str(exc):
            raise CheckFailure("the mask reached self_attn as its second positional argument, "
                               "which is x_kv (the keys and values): pass it by name, "
                               "self.self_attn(..., mask=mask)") from None
        raise
    with torch.no_grad():
        assert_close(got, ref(x, mask=mask), **TOL, name="PreLNBlock(x, mask=padding)",
                     hint="pass mask=mask to self.self_attn")


@pytest.mark.weight(2)
@pytest.mark.pitfall(STREAM)
@pytest.mark.property
def test_identity_path(submission):
    """With the attention and FFN output projections zeroed, the block returns x exactly."""
    ref = _reference(PreLNBlock, D, H, FF, seed=5)
    with torch.no_grad():
        for linear in (ref.self_attn.out_proj, ref.ffn.fc2):
            linear.weight.zero_()
            linear.bias.zero_()
    x = _randn(2, 4, D, seed=6) * 3 + 1
    got = expect_tensor(submission.module("PreLNBlock", x, init=INIT, state=_state(ref)),
                        shape=x.shape, name="PreLNBlock(x) with silent sub-layers")
    if not torch.allclose(got, x, atol=1e-6):
        raise CheckFailure("with sub-layers that output zeros, a Pre-LN block must return its "
                           "input unchanged: the residual stream is never normalised, only each "
                           "sub-layer's *input* (x + F(norm(x)), not norm(x) + F(norm(x)))")


def test_dropout_on_each_sublayer_output(submission):
    """In training, dropout acts on each sub-layer's output before the addition: the same
    weights and the same random seed give the reference's output exactly."""
    ref = _reference(PreLNBlock, D, H, FF, dropout=0.3, seed=15)
    x = _randn(2, 4, D, seed=16)
    code = ("import torch as _torch\n"
            "_block = PreLNBlock(**inputs['init'])\n"
            "_load_exercise_state(_block, inputs['state'])\n"
            "_block.train()\n"
            "_torch.manual_seed(inputs['dropout_seed'])\n"
            "result = _block(inputs['x'])\n")
    got = expect_tensor(submission.run(code, init={**INIT, "dropout": 0.3}, state=_state(ref),
                                       x=x, dropout_seed=17),
                        shape=x.shape, name="PreLNBlock(dropout=0.3) in training mode")
    with torch.no_grad():
        ref.train()
        torch.manual_seed(17)
        expected = ref(x)
        ref.eval()
        without_dropout = ref(x)
    if torch.allclose(got.detach(), without_dropout, **TOL):
        raise CheckFailure("in training mode with dropout=0.3 your block gives the output of "
                           "evaluation mode: apply self.dropout1 to the attention's output and "
                           "self.dropout2 to the FFN's, before adding them to x")
    assert_close(got.detach(), expected, **TOL, name="PreLNBlock(dropout=0.3) in training mode",
                 hint="x = x + dropout1(self_attn(norm1(x), mask=mask)); "
                      "x = x + dropout2(ffn(norm2(x))): dropout on each sub-layer's output, "
                      "never on the sum")


def test_rmsnorm_swiglu_block(submission):
    """A LLaMA-style block (norm='rmsnorm', ffn='swiglu') built from your parts."""
    init = {**INIT, "norm": "rmsnorm", "ffn": "swiglu", "eps": 1e-6}
    ref = _reference(PreLNBlock, D, H, FF, "rmsnorm", "swiglu", 0.0, 1e-6, seed=7)
    x = _randn(2, 3, D, seed=8)
    got = submission.module("PreLNBlock", x, init=init, state=_state(ref))
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="PreLNBlock(norm='rmsnorm', ffn='swiglu')(x)")


@pytest.mark.weight(2)
@pytest.mark.pitfall(FINAL)
def test_pre_ln_stack_ends_with_a_norm(submission):
    """EncoderStack(2 blocks, norm_first=True): the blocks, then final_norm."""
    init = {"n_layers": 2, **INIT, "norm_first": True}
    ref = _reference(EncoderStack, 2, D, H, FF, norm_first=True, seed=9)
    x = _randn(2, 5, D, seed=10)
    state = _state(ref)
    try:
        got = submission.module("EncoderStack", x, init=init, state=state)
    except Exception as exc:
        if "final_norm" in str(exc) and "layers." not in str(exc):  # only the final norm
            raise CheckFailure("EncoderStack(norm_first=True) has no final_norm parameters: a "
                               "Pre-LN stack ends with make_norm(norm, d_model, eps)") from None
        raise
    with torch.no_grad():
        h = x
        for layer in ref.layers:
            h = layer(h)
        expected = ref.final_norm(h)
    if torch.allclose(got, h, **TOL):
        raise CheckFailure("the Pre-LN stack returns the raw residual stream: apply final_norm "
                           "after the last block")
    assert_close(got, expected, **TOL, name="EncoderStack(norm_first=True)(x)",
                 hint="run every block, then self.final_norm")


@pytest.mark.pitfall(CONFIG)
def test_llama_stack_final_norm_follows_the_config(submission):
    """EncoderStack(norm='rmsnorm', ffn='swiglu', eps=0.5): the final norm is an RMSNorm with
    the stack's eps, like every norm inside the blocks."""
    init = {"n_layers": 2, **INIT, "norm_first": True, "norm": "rmsnorm", "ffn": "swiglu",
            "eps": 0.5}
    ref = _reference(EncoderStack, 2, D, H, FF, norm_first=True, norm="rmsnorm", ffn="swiglu",
                     eps=0.5, seed=13)
    x = _randn(2, 5, D, seed=14)
    try:
        got = submission.module("EncoderStack", x, init=init, state=_state(ref))
    except Exception as exc:
        if "final_norm" in str(exc) and "layers." not in str(exc):
            raise CheckFailure("with norm='rmsnorm' the stack's final_norm has other parameters "
                               "than an RMSNorm: build it with make_norm(norm, d_model, eps)"
                               ) from None
        raise
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="EncoderStack(norm='rmsnorm', eps=0.5)(x)",
                     hint="final_norm = make_norm(norm, d_model, eps): the stack's own norm "
                          "and eps, not fixed ones")


# Runs in the student's kernel: the class of the stack's final norm, and the class the
# notebook's make_norm builds for the same settings.
FINAL_NORM_KIND = """
_stack = EncoderStack(**inputs["init"])
_init = inputs["init"]
result = [type(_stack.final_norm).__name__,
          type(make_norm(_init["norm"], _init["d_model"], _init["eps"])).__name__]
"""


@pytest.mark.structural
@pytest.mark.pitfall(CONFIG)
def test_llama_stack_final_norm_is_the_configured_kind(submission):
    """EncoderStack(norm='rmsnorm'): the final norm is the class make_norm builds for it (read
    from the built stack, so a fixed LayerNorm shows as what it is)"""
    init = {"n_layers": 2, **INIT, "norm_first": True, "norm": "rmsnorm", "ffn": "swiglu",
            "eps": 0.5}
    got, expected = submission.run(FINAL_NORM_KIND, init=init)
    if got != expected:
        raise CheckFailure(f"with norm='rmsnorm' the stack's final_norm is a {got}; build it "
                           f"with make_norm(norm, d_model, eps), which gives a {expected}")


def test_post_ln_stack_has_no_final_norm(submission):
    """EncoderStack(norm_first=False): Post-LN blocks and an identity final norm."""
    init = {"n_layers": 2, **INIT, "norm_first": False}
    ref = _reference(EncoderStack, 2, D, H, FF, norm_first=False, seed=11)
    x = _randn(1, 4, D, seed=12)
    got = submission.module("EncoderStack", x, init=init, state=_state(ref))
    with torch.no_grad():
        assert_close(got, ref(x), **TOL, name="EncoderStack(norm_first=False)(x)",
                     hint="a Post-LN stack's final_norm is nn.Identity()")


@pytest.mark.structural
@pytest.mark.pitfall(FINAL)
def test_stack_parameter_names(submission):
    """A Pre-LN stack has final_norm.weight and final_norm.bias; a Post-LN stack has none."""
    for norm_first in (True, False):
        expected = sorted(EncoderStack(1, D, H, FF, norm_first=norm_first).state_dict())
        got = submission.module_state("EncoderStack", init={"n_layers": 1, **INIT,
                                                            "norm_first": norm_first})
        if not isinstance(got, dict) or sorted(got) != expected:
            lacks = sorted(set(expected) - set(got or ()))
            extra = sorted(set(got or ()) - set(expected))
            raise CheckFailure(
                f"EncoderStack(norm_first={norm_first})'s parameters differ from the exercise's: "
                + "; ".join(([f"it lacks {lacks[:4]} (" + (
                    "a Pre-LN stack ends with final_norm = make_norm(norm, d_model, eps)"
                    if any(n.startswith("final_norm.") for n in lacks) else
                    "a plain tensor attribute is no parameter: use nn.Parameter") + ")"]
                             if lacks else [])
                            + ([f"it has {extra[:4]}, which the exercise does not name"]
                               if extra else [])))
