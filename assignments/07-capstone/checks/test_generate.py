"""Hidden checks for Exercise 5: ``generate`` with and without the KV cache.

The student's ``GPT`` is built in their kernel with the weights of a reference
:class:`toolkit.models.GPT` (float64, weights large enough that the next-token
distributions are far from flat) and decodes with their ``generate``. Cached and
uncached decoding must give exactly the same tokens, and the same tokens as
:func:`toolkit.generate.generate` on the reference model. A spy on ``model.forward``
checks that cached decoding really feeds one token per step at its absolute position.
Sampling checks use temperature 1 and no filters, so a wrong filter or temperature costs
points in Exercise 4, not here; the given ``sample_next_token`` still calls the student's
``apply_temperature``, so an unwritten one fails the sampling check here too.
"""

from __future__ import annotations

import pytest
import torch

from autograder.protocol.checklib import CheckFailure, assert_equal, expect_tensor
from toolkit.generate import generate
from toolkit.models import GPT, GPTConfig

pytestmark = pytest.mark.grade_cell("test_generate")

ROPE = "RoPE applied at position 0 for every new token"
CACHE = "Cached decoding re-runs the whole sequence"

CONFIG = GPTConfig.modern(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=40,
                          init_std=0.3, attention_backend="reference")  # the teaching path

# Runs in the student's kernel: their GPT with our weights, their generate.
RUN = """
import torch as _torch
from toolkit.models import GPTConfig as _GPTConfig

_model = GPT(_GPTConfig.from_dict(inputs["config"])).double()
_load_exercise_state(_model, inputs["state"], may_miss=("lm_head.weight",))
_model.eval()
_calls = []
_forward = _model.forward


def _spy(idx, targets=None, cache=None, start_pos=0):
    _calls.append([int(idx.size(1)), int(start_pos), cache is not None])
    return _forward(idx, targets, cache, start_pos)


_model.forward = _spy
result = []
for _kwargs in inputs["runs"]:
    _kwargs = dict(_kwargs)
    _seed = _kwargs.pop("seed", None)
    if _seed is not None:
        _kwargs["generator"] = _torch.Generator().manual_seed(_seed)
    _calls.clear()
    _out = generate(_model, inputs["prompt"], **_kwargs)
    result.append((_out.clone() if isinstance(_out, _torch.Tensor) else _out,
                   [list(c) for c in _calls]))
"""


def _reference(seed=0) -> GPT:
    torch.manual_seed(seed)
    return GPT(CONFIG).double().eval()


def _state(model) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _prompt(seed=1, batch=2, length=5) -> torch.Tensor:
    return torch.randint(0, CONFIG.vocab_size, (batch, length),
                         generator=torch.Generator().manual_seed(seed))


def _run(submission, ref, prompt, runs):
    got = submission.run(RUN, config=CONFIG.to_dict(), state=_state(ref), prompt=prompt, runs=runs)
    if not isinstance(got, tuple) or len(got) != len(runs):
        raise CheckFailure("could not read the results of your generate")
    return [(expect_tensor(out, name="generate's output"), [list(c) for c in calls])
            for out, calls in got]


def _expected(ref, prompt, seed=None, **kwargs):
    if seed is not None:
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    return generate(ref, prompt, **kwargs)


@pytest.mark.weight(3)
@pytest.mark.pitfall(ROPE)
def test_greedy_cached_equals_uncached(submission):
    """Greedy decoding of 30 tokens: cached = uncached = the reference tokens."""
    ref, prompt = _reference(2), _prompt(3)
    runs = [dict(max_new_tokens=30, temperature=0.0, use_cache=True),
            dict(max_new_tokens=30, temperature=0.0, use_cache=False)]
    (cached, _), (uncached, _) = _run(submission, ref, prompt, runs)
    expected = _expected(ref, prompt, max_new_tokens=30, temperature=0.0)
    for out, name in ((cached, "cached"), (uncached, "uncached")):
        if tuple(out.shape) != tuple(expected.shape):
            raise CheckFailure(f"{name} generate returned shape {tuple(out.shape)}, expected "
                               f"(B, T + max_new_tokens) = {tuple(expected.shape)}")
    if not torch.equal(cached, uncached):
        first = int((cached != uncached).any(0).nonzero()[0])
        if not torch.equal(uncached, expected):
            raise CheckFailure(
                "your uncached decoding already picks other tokens than the reference model "
                "does: the GPT itself computes other logits (Exercises 2 and 3), so fix what "
                "their checks report first")
        raise CheckFailure(
            f"uncached decoding is right, but cached decoding departs from it at position "
            f"{first}. Each decoding step must run the model on the new token at its absolute "
            "position start_pos = seq.size(1) - 1, with the cache of the prefill (and the cache "
            "itself must work: see Exercise 1's checks)")
    assert_equal(cached, expected, name="greedy tokens",
                 hint="prefill the prompt, then take the argmax of logits[:, -1] each step")


@pytest.mark.weight(2)
@pytest.mark.pitfall(ROPE)
def test_sampling_cached_equals_uncached(submission):
    """Sampling with the same generator: cached = uncached = the reference tokens."""
    ref, prompt = _reference(4), _prompt(5, batch=3)
    runs = [dict(max_new_tokens=25, temperature=1.0, seed=7, use_cache=True),
            dict(max_new_tokens=25, temperature=1.0, seed=7, use_cache=False)]
    (cached, _), (uncached, _) = _run(submission, ref, prompt, runs)
    if cached.shape == uncached.shape and not torch.equal(cached, uncached):
        raise CheckFailure("with the same generator, cached and uncached sampling disagree")
    expected = _expected(ref, prompt, max_new_tokens=25, temperature=1.0, seed=7)
    assert_equal(cached, expected, name="sampled tokens",
                 hint="pass generator (and temperature, top_k, top_p) to sample_next_token "
                      "once per step, on logits[:, -1]")


@pytest.mark.weight(2)
@pytest.mark.pitfall(CACHE)
def test_one_token_per_step(submission):
    """With the cache: one prefill, then one token per call at its absolute position."""
    ref, prompt = _reference(6), _prompt(8, length=4)
    (out, calls), = _run(submission, ref, prompt, [dict(max_new_tokens=6, temperature=0.0)])
    if not calls or calls[0] != [4, 0, True]:
        raise CheckFailure(f"the first model call was (T, start_pos, with cache) = "
                           f"{tuple(calls[0]) if calls else None}, expected the prefill (4, 0, "
                           "True): run the whole prompt once with the cache")
    steps = calls[1:]
    expected = [[1, 4 + i, True] for i in range(len(steps))]
    if steps != expected or len(steps) not in (5, 6):
        raise CheckFailure(f"after the prefill the model was called with (T, start_pos, with "
                           f"cache) = {[tuple(s) for s in steps]}; expected one new token per "
                           f"step at positions 4, 5, ...: {[tuple(s) for s in expected[:5]]}")
    assert_equal(out, _expected(ref, prompt, max_new_tokens=6, temperature=0.0),
                 name="greedy tokens")


def test_eos_pads_and_stops(submission):
    """A row that produced eos_token keeps producing it; decoding stops once every row has."""
    ref, prompt = _reference(9), _prompt(10, batch=2)
    free = _expected(ref, prompt, max_new_tokens=12, temperature=0.0)
    eos = int(free[0, prompt.size(1) + 2])  # row 0 reaches it at its third new token
    runs = [dict(max_new_tokens=12, temperature=0.0, eos_token=eos),
            dict(max_new_tokens=12, temperature=0.0, eos_token=eos, use_cache=False)]
    expected = _expected(ref, prompt, max_new_tokens=12, temperature=0.0, eos_token=eos)
    for (out, _), name in zip(_run(submission, ref, prompt, runs), ("cached", "uncached")):
        assert_equal(out, expected, name=f"{name} generate with eos_token",
                     hint="next_token = next_token.masked_fill(finished, eos_token); "
                          "finished |= next_token == eos_token; stop when finished.all()")


@pytest.mark.structural
def test_zero_new_tokens(submission):
    """max_new_tokens=0 returns the prompt, with or without the cache."""
    ref, prompt = _reference(11), _prompt(12)
    runs = [dict(max_new_tokens=0), dict(max_new_tokens=0, use_cache=False)]
    for out, _ in _run(submission, ref, prompt, runs):
        assert_equal(out, prompt, name="generate(..., max_new_tokens=0)")
