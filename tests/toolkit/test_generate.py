"""toolkit.generate: samplers, cached vs uncached decoding, beam search."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from toolkit.generate import (
    apply_temperature,
    beam_search,
    filter_logits,
    generate,
    greedy,
    sample_next_token,
    top_k_filter,
    top_p_filter,
)
from toolkit.generate.decoding import _beam_search_one
from toolkit.models import GPT, GPTConfig


def tiny_model(recipe: str = "modern", vocab: int = 29, seed: int = 0, max_seq_len: int = 96):
    torch.manual_seed(seed)
    build = GPTConfig.modern if recipe == "modern" else GPTConfig.classic
    model = GPT(build(vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, max_seq_len=max_seq_len))
    with torch.no_grad():  # larger logits than the 0.02 init, so decoding is not a coin toss
        model.wte.weight.mul_(20)
    return model.eval()


def prompt(B=2, T=5, vocab=29, seed=3):
    return torch.randint(vocab, (B, T), generator=torch.Generator().manual_seed(seed))


def _logits(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * 2


# ---------------------------------------------------------------- temperature


def test_temperature_limits():
    z = _logits(4, 50)
    cold = torch.softmax(apply_temperature(z, 1e-4), dim=-1)
    one_hot = torch.nn.functional.one_hot(z.argmax(-1), 50).float()
    torch.testing.assert_close(cold, one_hot)
    hot = torch.softmax(apply_temperature(z, 1e6), dim=-1)
    torch.testing.assert_close(hot, torch.full_like(hot, 1 / 50), atol=1e-5, rtol=0)
    # t = 0 in the sampler is exactly greedy
    assert torch.equal(sample_next_token(z, temperature=0.0), z.argmax(-1))
    for bad in (0.0, -1.0, float("inf")):
        with pytest.raises(ValueError, match="temperature"):
            apply_temperature(z, bad)


# ---------------------------------------------------------------- top-k


def test_top_k_keeps_exactly_k():
    z = _logits(6, 40)
    for k in (1, 3, 17, 39):
        out = top_k_filter(z, k)
        kept = torch.isfinite(out)
        assert (kept.sum(-1) == k).all()
        # the kept ones are the k largest, unchanged
        kth = z.topk(k, dim=-1).values[:, -1:]
        assert (z[kept] >= kth.expand_as(z)[kept]).all()
        assert torch.equal(out[kept], z[kept])
    assert torch.equal(top_k_filter(z, 40), z) and torch.equal(top_k_filter(z, 100), z)
    with pytest.raises(ValueError, match="k"):
        top_k_filter(z, 0)


def test_top_k_ties_are_deterministic():
    z = torch.tensor([[1.0, 3.0, 3.0, 3.0, 0.0, 3.0]])
    out = top_k_filter(z, 2)
    assert torch.isfinite(out).sum() == 2
    assert torch.isfinite(out[0]).nonzero().flatten().tolist() == [1, 2]  # lower ids first
    flat = top_k_filter(torch.zeros(1, 10), 4)
    assert torch.isfinite(flat[0]).nonzero().flatten().tolist() == [0, 1, 2, 3]


# ---------------------------------------------------------------- top-p


def _reference_top_p_count(probs: list[float], p: float) -> int:
    """Smallest n such that the n most probable tokens hold mass >= p."""
    s = sorted(probs, reverse=True)
    for n in range(1, len(s) + 1):
        if sum(s[:n]) >= p - 1e-12:
            return n
    return len(s)


def test_top_p_smallest_nucleus():
    probs = torch.tensor([0.05, 0.5, 0.15, 0.3], dtype=torch.float64)
    z = probs.log()[None]
    for p, n in [(0.3, 1), (0.5, 1), (0.51, 2), (0.75, 2), (0.81, 3), (0.96, 4), (1.0, 4)]:
        kept = torch.isfinite(top_p_filter(z, p))[0]
        assert int(kept.sum()) == n == _reference_top_p_count(probs.tolist(), p), p
        assert kept[1]  # the top token
    z = _logits(5, 30)
    for p in (0.2, 0.5, 0.9):
        kept = torch.isfinite(top_p_filter(z, p))
        for row in range(5):
            n = _reference_top_p_count(torch.softmax(z[row], -1).tolist(), p)
            assert int(kept[row].sum()) == n


def test_top_p_is_never_empty():
    z = _logits(8, 100)
    for p in (1e-12, 1e-6, 0.01):
        out = top_p_filter(z, p)
        kept = torch.isfinite(out)
        assert (kept.sum(-1) == 1).all()
        assert torch.equal(kept.float().argmax(-1), z.argmax(-1))  # the top token survives
    # also for a flat distribution (every token tied) and after top-k removed tokens
    flat = top_p_filter(torch.zeros(1, 7), 1e-9)
    assert torch.isfinite(flat).sum() == 1 and torch.isfinite(flat[0, 0])
    both = filter_logits(z, temperature=0.7, top_k=3, top_p=1e-9)
    assert (torch.isfinite(both).sum(-1) == 1).all()
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="p"):
            top_p_filter(z, bad)


def test_temperature_is_applied_before_top_p():
    z = torch.tensor([[2.0, 1.0, 0.0]])
    # t = 1: probs (0.665, 0.245, 0.090) -> two tokens for p = 0.7
    assert torch.isfinite(filter_logits(z, 1.0, top_p=0.7)).sum() == 2
    # t = 0.5 sharpens to (0.867, 0.117, 0.016) -> one token
    assert torch.isfinite(filter_logits(z, 0.5, top_p=0.7)).sum() == 1


def test_sampling_respects_filters_and_seed():
    z = _logits(1, 20).expand(4000, 20)
    g = torch.Generator().manual_seed(0)
    draws = sample_next_token(z, temperature=1.5, top_k=3, generator=g)
    assert set(draws.tolist()) == set(z[0].topk(3).indices.tolist())
    a = sample_next_token(z[:5], 1.0, generator=torch.Generator().manual_seed(7))
    b = sample_next_token(z[:5], 1.0, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    # frequencies follow softmax(z / t)
    freq = torch.bincount(sample_next_token(z, 1.0, generator=g), minlength=20) / len(z)
    torch.testing.assert_close(freq, torch.softmax(z[0], -1), atol=0.03, rtol=0)


# ---------------------------------------------------------------- decoding with a model


@pytest.mark.parametrize("recipe", ["classic", "modern"])
def test_cache_and_no_cache_generate_identical_tokens(recipe):
    model = tiny_model(recipe)
    idx = prompt()
    with_cache = greedy(model, idx, 30, use_cache=True)
    without = greedy(model, idx, 30, use_cache=False)
    assert with_cache.shape == (2, 35)
    assert torch.equal(with_cache, without)
    assert torch.equal(with_cache[:, :5], idx)
    kw = dict(temperature=0.9, top_k=10, top_p=0.95)
    a = generate(model, idx, 20, generator=torch.Generator().manual_seed(1), use_cache=True, **kw)
    b = generate(model, idx, 20, generator=torch.Generator().manual_seed(1), use_cache=False, **kw)
    assert torch.equal(a, b)


def test_greedy_is_the_argmax_loop():
    model = tiny_model()
    seq = prompt(1, 4)
    out = greedy(model, seq, 12)
    with torch.no_grad():
        for _ in range(12):
            seq = torch.cat([seq, model(seq)[0][:, -1].argmax(-1, keepdim=True)], dim=1)
    assert torch.equal(out, seq)


def test_eos_stops_and_pads():
    model = tiny_model()
    idx = prompt(2, 5)
    free = greedy(model, idx, 10)
    eos = int(free[0, 7])  # the third token row 0 generates
    out = greedy(model, idx, 10, eos_token=eos)
    first = (free[0, 5:] == eos).nonzero()[0].item()
    assert torch.equal(out[0, : 5 + first + 1], free[0, : 5 + first + 1])
    assert (out[0, 5 + first :] == eos).all()  # padded after EOS
    assert out.shape[1] <= 15


def test_generate_checks_lengths_and_restores_mode():
    model = tiny_model(max_seq_len=16)
    model.train()
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, prompt(1, 10), 7)
    out = generate(model, prompt(1, 10), 6, temperature=0)
    assert out.shape == (1, 16) and model.training


def test_beam_width_one_equals_greedy():
    model = tiny_model()
    idx = prompt(2, 5)
    beam = beam_search(model, idx, beam_width=1, max_new_tokens=20)
    assert torch.equal(beam, greedy(model, idx, 20))
    # Also when EOS is the greedy choice and the length penalty favours going on: one
    # beam run as a beam search would extend the runner-up; Hugging Face runs greedy.
    model = tiny_model(vocab=8)
    with torch.no_grad():  # peaked, varied logits, so the runner-up's path differs
        for p in model.parameters():
            p.normal_(std=0.5)
    idx = torch.tensor([[1, 2, 3]])
    eos = int(greedy(model, idx, 1)[0, -1])
    for alpha in (0.0, 1.0, 2.0):
        beam = beam_search(model, idx, 1, 6, length_penalty=alpha, eos_token=eos)
        assert torch.equal(beam, greedy(model, idx, 6, eos_token=eos)), alpha


def _sequence_logprob(model, prompt_ids, new_ids):
    seq = torch.cat([prompt_ids, new_ids[None]], dim=1)
    with torch.no_grad():
        logp = torch.log_softmax(model(seq)[0].double(), dim=-1)
    T = prompt_ids.size(1)
    return sum(logp[0, T - 1 + i, int(t)].item() for i, t in enumerate(new_ids))


def test_beam_search_exhaustive_when_wide_enough():
    vocab, n = 5, 3
    model = tiny_model(vocab=vocab, seed=2)
    with torch.no_grad():
        model.wte.weight.div_(10)  # flatter distributions: greedy is not optimal
    idx = prompt(1, 3, vocab=vocab)
    best = max(
        itertools.product(range(vocab), repeat=n),
        key=lambda s: _sequence_logprob(model, idx, torch.tensor(s)),
    )
    out = beam_search(model, idx, beam_width=vocab ** (n - 1), max_new_tokens=n, length_penalty=0)
    assert out[0, 3:].tolist() == list(best)
    narrow = beam_search(model, idx, beam_width=2, max_new_tokens=n, length_penalty=0)
    g = greedy(model, idx, n)
    assert _sequence_logprob(model, idx, narrow[0, 3:]) >= _sequence_logprob(model, idx, g[0, 3:])


def test_beam_scores_use_hf_length_penalty():
    model = tiny_model()
    idx = prompt(1, 4)
    eos = int(greedy(model, idx, 3)[0, -1])
    for alpha in (0.0, 1.0, 2.0):
        hyps = _beam_search_one(model, idx, 3, 6, alpha, eos)
        assert [h[0] for h in hyps] == sorted((h[0] for h in hyps), reverse=True)
        for score, new in hyps:
            expected = _sequence_logprob(model, idx, new) / len(new) ** alpha
            assert math.isclose(score, expected, rel_tol=1e-5, abs_tol=1e-6)
    out = beam_search(model, prompt(2, 4), 3, 6, eos_token=eos)
    assert out.shape[0] == 2
    with pytest.raises(ValueError, match="beam_width"):
        beam_search(model, idx, 0, 5)
