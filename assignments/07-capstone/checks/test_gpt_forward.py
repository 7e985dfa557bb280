"""Hidden checks for Exercise 3: ``GPT`` (weight tying, ``unembed``, ``forward``).

The student's model is built in their kernel from a config we send, converted to
float64, loaded with the weights of :class:`toolkit.models.GPT` (randomised norms and
biases, so every piece matters) and compared with it: both recipes, the loss, a load
without ``lm_head.weight`` (what a checkpoint of a tied model holds), a square
``d_model == vocab_size`` model (where the wrong transpose runs), causality, word order
(a model without positions reads a bag of tokens), and cached decoding with the model's
own cache against the full forward pass.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_close, expect_tensor
from toolkit.models import GPT, GPTConfig

pytestmark = pytest.mark.grade_cell("test_gpt_forward")

LEAK = "Causal mask missing (future leaks)"
ROPE = "RoPE applied at position 0 for every new token"
TYING = "Weight tying with the wrong transpose"
NO_POSITIONS = "Positional encoding forgotten (the model reads a bag of tokens)"
NAMES = "Parameter names differ from the specification"
TOL = dict(atol=1e-6, rtol=1e-5)  # float64 model; RMSNorm computes its statistic in float32

# Runs in the student's kernel. `calls`: (idx, targets, start_pos, use_cache) in order; one
# cache from model.new_cache() is shared by the calls that use it.
RUN = """
import torch as _torch
from toolkit.models import GPTConfig as _GPTConfig

_model = GPT(_GPTConfig.from_dict(inputs["config"])).double()
_load_exercise_state(_model, inputs["state"], may_miss=("lm_head.weight",))
_model.eval()
_cache = _model.new_cache()
result = []
with _torch.no_grad():
    for _idx, _targets, _start, _use_cache in inputs["calls"]:
        _logits, _loss = _model(_idx, _targets, _cache if _use_cache else None, _start)
        result.append((_logits, _loss))
result = (result, int(_cache.length))
"""


def _config(recipe="modern", **kw) -> GPTConfig:
    # The toolkit's teaching path is the oracle (see test_attention._config).
    base = dict(vocab_size=96, d_model=32, n_layers=2, n_heads=4, max_seq_len=24, init_std=0.1,
                attention_backend="reference")
    base.update(kw)
    return GPTConfig.modern(**base) if recipe == "modern" else GPTConfig.classic(**base)


def _reference(config: GPTConfig, seed: int) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).double().eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:  # norm gains and biases: away from 1 and 0
                p.add_(0.2 * torch.randn_like(p))
    return model


def _state(model, drop_head=False) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()
            if not (drop_head and k == "lm_head.weight")}


def _ids(*shape, vocab, seed) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def _run(submission, config, state, calls):
    got = submission.run(RUN, config=config.to_dict(), state=state, calls=calls)
    if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[0], tuple)
            and len(got[0]) == len(calls)):
        raise CheckFailure("could not read the results of your GPT")
    outs, length = got
    logits = []
    for (lg, loss), (idx, targets, _, _) in zip(outs, calls):
        lg = expect_tensor(lg, shape=(*idx.shape, config.vocab_size), name="logits")
        if targets is not None:
            loss = expect_tensor(loss, name="loss")
            if loss.numel() != 1:
                raise CheckFailure(f"the loss should be a scalar, got shape {tuple(loss.shape)}")
        logits.append((lg.to(torch.float64), loss))
    return logits, length


def _expected(ref, idx, targets=None):
    with torch.no_grad():
        return ref(idx, targets)


def _check_matches(submission, config, seed, hint, drop_head=False):
    ref = _reference(config, seed)
    idx = _ids(2, 11, vocab=config.vocab_size, seed=seed + 1)
    targets = _ids(2, 11, vocab=config.vocab_size, seed=seed + 2)
    [(logits, loss)], _ = _run(submission, config, _state(ref, drop_head),
                               [(idx, targets, 0, False)])
    exp_logits, exp_loss = _expected(ref, idx, targets)
    assert_close(logits, exp_logits, **TOL, name="logits", hint=hint)
    assert_close(loss.reshape(()).to(torch.float64), exp_loss, **TOL, name="loss",
                 hint="F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=-100)")


@pytest.mark.weight(2)
def test_modern_logits_and_loss(submission):
    """Modern recipe: logits and loss equal the reference GPT's."""
    _check_matches(submission, _config("modern"), seed=1,
                   hint="x = wte(idx); every block gets (x, positions, cache, start_pos); "
                        "logits = unembed(ln_f(x))")


@pytest.mark.weight(2)
def test_classic_logits_and_loss(submission):
    """Classic recipe (learned positions added to the embeddings): logits and loss match."""
    _check_matches(submission, _config("classic"), seed=3,
                   hint="the classic recipe adds wpe(positions) to wte(idx) before the blocks")


def test_ignored_targets(submission):
    """Targets equal to -100 are left out of the mean loss."""
    config = _config("modern")
    ref = _reference(config, 5)
    idx = _ids(2, 9, vocab=config.vocab_size, seed=6)
    targets = _ids(2, 9, vocab=config.vocab_size, seed=7)
    targets[0, :4] = -100
    targets[1, 7:] = -100
    [(_, loss)], _ = _run(submission, config, _state(ref), [(idx, targets, 0, False)])
    assert_close(loss.reshape(()).to(torch.float64), _expected(ref, idx, targets)[1], **TOL,
                 name="loss with ignored targets", hint="pass ignore_index=-100 to F.cross_entropy")


@pytest.mark.pitfall(TYING)
@pytest.mark.structural
def test_head_shares_the_embedding(submission):
    """lm_head.weight is wte.weight: one Parameter, counted once."""
    code = """
from toolkit.models import GPTConfig as _GPTConfig, count_parameters as _count
_model = GPT(_GPTConfig.from_dict(inputs["config"]))
result = (_model.lm_head.weight is _model.wte.weight, _count(_model))
"""
    config = _config("modern")
    got = submission.run(code, config=config.to_dict())
    if not isinstance(got, tuple) or len(got) != 2:
        raise CheckFailure("could not inspect your GPT")
    if got[0] is not True:
        raise CheckFailure("lm_head.weight is not wte.weight: tie them by assigning the "
                           "Parameter itself (self.lm_head.weight = self.wte.weight), not a copy "
                           "or a transpose")
    from toolkit.models import count_parameters

    expected = count_parameters(GPT(config))
    if got[1] != expected:
        raise CheckFailure(f"your model has {got[1]:,} distinct parameters, expected {expected:,}")


@pytest.mark.pitfall(TYING)
def test_checkpoint_without_head(submission):
    """Loaded without lm_head.weight (as a tied checkpoint is stored), the logits still match."""
    _check_matches(submission, _config("modern"), seed=9, drop_head=True,
                   hint="the head must *be* the embedding, so loading wte.weight sets both")


@pytest.mark.weight(2)
@pytest.mark.pitfall(TYING)
def test_unembedding_transpose(submission):
    """A square model (d_model == vocab_size): logits are h @ E^T, not h @ E."""
    config = _config("modern", vocab_size=32, d_model=32)
    ref = _reference(config, 11)
    idx = _ids(2, 7, vocab=32, seed=12)
    [(logits, _)], _ = _run(submission, config, _state(ref), [(idx, None, 0, False)])
    captured = {}
    handle = ref.ln_f.register_forward_hook(lambda m, i, o: captured.setdefault("h", o))
    try:
        expected = _expected(ref, idx)[0]
    finally:
        handle.remove()
    if torch.allclose(logits, captured["h"] @ ref.wte.weight.detach(), **TOL):
        raise CheckFailure("your logits are h @ E: the unembedding must be W_U = E^T, "
                           "logits = h @ E^T, which is exactly lm_head(h) when tied")
    assert_close(logits, expected, **TOL, name="logits of a square model",
                 hint="unembed(h) = lm_head(h) = h @ E^T")


@pytest.mark.weight(2)
@pytest.mark.pitfall(LEAK)
@pytest.mark.property
def test_no_future_leak(submission):
    """Changing tokens at positions >= t never changes the logits before t."""
    config = _config("modern")
    ref = _reference(config, 13)
    idx = _ids(2, 12, vocab=config.vocab_size, seed=14)
    calls = [(idx, None, 0, False)]
    for t in (2, 6, 11):
        moved = idx.clone()
        moved[:, t:] = _ids(2, 12 - t, vocab=config.vocab_size, seed=15 + t)
        calls.append((moved, None, 0, False))
    (base, _), *others = _run(submission, config, _state(ref), calls)[0]
    for t, (logits, _) in zip((2, 6, 11), others):
        if not torch.allclose(logits[:, :t], base[:, :t], atol=1e-8):
            raise CheckFailure(f"changing the tokens from position {t} on changed the logits at "
                               f"positions before {t}: the model sees the future")


@pytest.mark.weight(2)
@pytest.mark.pitfall(NO_POSITIONS)
@pytest.mark.property
@pytest.mark.parametrize("recipe", ["classic", "modern"])
def test_word_order_matters(submission, recipe):
    """One block: reordering the earlier tokens changes the prediction at the last position."""
    # Without positions, a single causal block sees the tokens before the last one as a
    # set: attention is a weighted sum over them, and a sum does not care about order. So
    # the last position's logits cannot change when tokens 0 .. T-2 are reversed.
    # (With two blocks or more, the causal mask alone leaks some order: NoPE.)
    config = _config(recipe, n_layers=1)
    ref = _reference(config, 19)
    idx = _ids(2, 10, vocab=config.vocab_size, seed=20)
    reordered = idx.clone()
    reordered[:, :-1] = idx[:, :-1].flip(1)  # same tokens, earlier ones in reverse order
    expected_gap = (_expected(ref, reordered)[0] - _expected(ref, idx)[0])[:, -1].abs().max()
    if expected_gap < 1e-3:  # the check's own premise: the reference does see the order
        raise RuntimeError(f"the reference {recipe} model does not see word order")
    (base, _), (moved, _) = _run(submission, config, _state(ref),
                                 [(idx, None, 0, False), (reordered, None, 0, False)])[0]
    gap = (moved - base)[:, -1].abs().max()
    if gap < 1e-9:
        where = ("add the learned position vectors wpe(positions) to the token embeddings "
                 "before the blocks" if recipe == "classic" else
                 "rotate q and k by their positions (RoPE) in every attention layer")
        raise CheckFailure(
            f"{recipe} recipe, one block: reversing the tokens before the last one left the "
            "last position's logits unchanged. Your model cannot tell word order: it reads "
            f"a bag of tokens. {where[0].upper()}{where[1:]}")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ROPE)
@pytest.mark.parametrize("recipe", ["modern", "classic"])
def test_cached_forward_matches_full(submission, recipe):
    """Prefill, a chunk, then one token per call with model.new_cache() = one full forward pass."""
    config = _config(recipe)
    ref = _reference(config, 17)
    idx = _ids(2, 13, vocab=config.vocab_size, seed=18)
    spans = [(0, 5), (5, 8), (8, 9), (9, 10), (10, 11), (11, 12), (12, 13)]
    # First the whole sequence without a cache, to tell a forward bug from a cache bug.
    calls = [(idx, None, 0, False)] + [(idx[:, a:b], None, a, True) for a, b in spans]
    results, length = _run(submission, config, _state(ref), calls)
    (plain, _), outs = results[0], results[1:]
    got = torch.cat([lg for lg, _ in outs], dim=1)
    expected = _expected(ref, idx)[0]
    if not torch.allclose(got, expected, **TOL):
        where = (got - expected).abs().amax(dim=(0, 2)) > 1e-5
        first = int(where.nonzero()[0]) if where.any() else 0
        if not torch.allclose(plain, expected, **TOL):
            raise CheckFailure("the plain forward pass (no cache) already differs from the "
                               "reference: fix it first (see the other checks of this part)")
        if first < spans[0][1]:
            raise CheckFailure("without a cache your forward pass is right, but with one even "
                               "the prefill (the first call, start_pos=0) differs: "
                               "StaticKVCache.update (Exercise 1) must return the keys and "
                               "values of positions 0 .. start_pos + T - 1, and the attention "
                               "must use what it returns")
        raise CheckFailure(
            f"with a cache, the logits from position {first} on differ from the full forward "
            f"pass (largest difference {(got - expected).abs().max():.3g}). The tokens of a call "
            "sit at absolute positions start_pos .. start_pos + T - 1: use them for the "
            "positions (RoPE, wpe), not 0 .. T - 1")
    if length != 13:
        raise CheckFailure(f"after 13 positions, cache.length is {length}: set "
                           "cache.length = start_pos + T in forward")


@pytest.mark.structural
@pytest.mark.pitfall(NAMES)
def test_parameter_names(submission):
    """The state_dict has the specified names and shapes (wte, blocks.*, ln_f, lm_head)."""
    code = """
from toolkit.models import GPTConfig as _GPTConfig
_m = GPT(_GPTConfig.from_dict(inputs["config"]))
result = {k: [int(s) for s in v.shape] for k, v in _m.state_dict().items()}
"""
    for config in (_config("modern"), _config("classic")):
        got = submission.run(code, config=config.to_dict())
        expected = {k: list(v.shape) for k, v in GPT(config).state_dict().items()}
        got = {k: list(v) for k, v in got.items()} if isinstance(got, dict) else got
        if got != expected:
            missing = sorted(set(expected) - set(got or {}))[:5]
            extra = sorted(set(got or {}) - set(expected))[:5]
            raise CheckFailure(f"{config.recipe} GPT: parameters differ from the specification "
                               f"(missing {missing}, unexpected {extra})")
