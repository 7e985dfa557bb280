"""toolkit.hybrid: the MQAR generator and metric, the hybrid model, the experiment's plumbing."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from toolkit.attention import MultiHeadAttention
from toolkit.hybrid import (
    IGNORE,
    CausalAttentionMixer,
    HybridLM,
    load_hybrid,
    mqar_batch,
    parameter_count,
    recall_accuracy,
    save_hybrid,
    state_numbers,
)
from toolkit.hybrid.experiment import (
    MQARConfig,
    measure,
    results_table,
    train_on_mqar,
    train_recall_model,
)
from toolkit.ssm import MambaMixer

V = 32


def batch(B=64, n=6, m=None, seed=0):
    return mqar_batch(B, n, V, n_queries=m, generator=torch.Generator().manual_seed(seed))


def test_format_pairs_then_queries():
    inputs, targets = batch(n=6, m=4)
    assert inputs.shape == targets.shape == (64, 2 * 6 + 2 * 4)
    assert inputs.dtype == targets.dtype == torch.int64
    keys, values = inputs[:, 0:12:2], inputs[:, 1:12:2]
    assert (keys < V // 2).all() and (keys >= 0).all()
    assert (values >= V // 2).all() and (values < V).all()
    queries, answers = inputs[:, 12::2], inputs[:, 13::2]
    for b in range(64):
        lookup = dict(zip(keys[b].tolist(), values[b].tolist()))
        assert len(lookup) == 6, "the keys of a sequence are distinct"
        assert len(set(queries[b].tolist())) == 4, "the queried keys are distinct"
        for q, a in zip(queries[b].tolist(), answers[b].tolist()):
            assert lookup[q] == a, "a query is a key of the pairs, followed by its value"


def test_targets_only_at_query_keys():
    inputs, targets = batch(n=5, m=3)
    scored = targets != IGNORE
    expected = torch.zeros_like(scored)
    expected[:, 10::2] = True  # positions 2n + 2i
    assert torch.equal(scored, expected)
    t = scored.nonzero()
    # the target at a query key is the next input token, its value
    assert torch.equal(targets[scored], inputs[t[:, 0], t[:, 1] + 1])


def test_queries_default_to_every_key_once_and_batches_vary():
    inputs, _ = batch(n=8)
    assert inputs.shape[1] == 32
    assert torch.equal(inputs[:, 0:16:2].sort(-1).values, inputs[:, 16::2].sort(-1).values)
    assert not torch.equal(batch(seed=0)[0], batch(seed=1)[0])
    assert torch.equal(batch(seed=3)[0], batch(seed=3)[0])
    # every key and every value occurs somewhere: the sampling covers the ranges
    many, _ = mqar_batch(512, 4, V, generator=torch.Generator().manual_seed(0))
    assert set(many[:, 0:8:2].unique().tolist()) == set(range(V // 2))
    assert set(many[:, 1:8:2].unique().tolist()) == set(range(V // 2, V))


@pytest.mark.parametrize("kwargs", [dict(n_pairs=V // 2 + 1), dict(n_pairs=4, n_queries=5),
                                    dict(n_pairs=0), dict(n_pairs=4, vocab_size=31)])
def test_bad_arguments(kwargs):
    args = dict(batch_size=2, vocab_size=V) | kwargs
    with pytest.raises(ValueError):
        mqar_batch(**args)


def test_recall_counts_query_positions_only():
    inputs, targets = batch(B=4, n=4)
    logits = torch.zeros(4, 16, V)
    scored = targets != IGNORE
    # right at every query, and wrong at every other position (which must not count)
    logits[scored] = F.one_hot(targets[scored], V).float()
    assert recall_accuracy(logits, targets) == 1.0
    first = scored.nonzero()[:4]  # 4 of the 16 queries wrong
    logits[first[:, 0], first[:, 1]] = F.one_hot(torch.zeros(4, dtype=torch.long), V).float()
    assert recall_accuracy(logits, targets) == pytest.approx(12 / 16)
    with pytest.raises(ValueError):
        recall_accuracy(logits, torch.full_like(targets, IGNORE))
    with pytest.raises(ValueError):
        recall_accuracy(logits[:, :-1], targets)


@pytest.mark.parametrize("pattern", ["AA", "MM", "MA", "AM", "MAMM"])
def test_hybrid_is_causal(pattern):
    torch.manual_seed(0)
    model = HybridLM(V, pattern, d_model=32, n_heads=4, d_state=8, max_seq_len=24).eval()
    ids = torch.randint(V, (2, 20))
    changed = ids.clone()
    changed[:, 12:] = torch.randint(V, (2, 8))
    with torch.no_grad():
        a, b = model(ids), model(changed)
    assert a.shape == (2, 20, V)
    assert torch.allclose(a[:, :12], b[:, :12], atol=1e-6)
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_pattern_builds_its_layers_in_order():
    model = HybridLM(V, "MAMM", d_model=32)
    kinds = [type(layer.mixer) for layer in model.layers]
    assert kinds == [MambaMixer, CausalAttentionMixer, MambaMixer, MambaMixer]
    assert isinstance(model.layers[1].mixer, MultiHeadAttention)
    assert model.layers[0].mixer.d_inner == 32  # expand = 1
    for bad in ("", "AXM", "am", None):
        with pytest.raises(ValueError):
            HybridLM(V, bad)
    with pytest.raises(ValueError):
        HybridLM(V, "AA", max_seq_len=8)(torch.zeros(1, 9, dtype=torch.long))


def test_layer_is_prenorm_residual():
    torch.manual_seed(0)
    model = HybridLM(V, "MA", d_model=32)
    x = torch.randn(2, 5, 32)
    for layer in model.layers:
        assert torch.allclose(layer(x), x + layer.mixer(layer.norm(x)))


@pytest.mark.parametrize("depth", [2, 4])
def test_equal_size_across_patterns(depth):
    counts = {p: parameter_count(HybridLM(64, p, d_model=64, d_state=16))
              for p in ("A" * depth, "M" * depth, "MA" * (depth // 2), "M" * (depth - 1) + "A")}
    assert max(counts.values()) / min(counts.values()) < 1.01, counts


def test_state_numbers():
    assert state_numbers("AA", 100, d_model=8) == 2 * 2 * 8 * 100
    assert state_numbers("MM", 100, d_model=8, d_state=16) == state_numbers("MM", 5, 8, 16) \
        == 2 * 8 * (16 + 4)
    assert state_numbers("MA", 10, 8, 16) == 2 * 8 * 10 + 8 * 20
    cache = MambaMixer(8, 16, expand=1).empty_cache(1)
    assert cache.conv_state.numel() + cache.ssm_state.numel() == 8 * (16 + 4)


def test_tiny_training_run_learns_above_chance():
    torch.manual_seed(0)
    cfg = MQARConfig(vocab_size=16, train_pairs=(2,), steps=60, batch_size=32, d_model=32,
                     max_seq_len=8, max_lr=1e-2)
    model = train_recall_model("AA", cfg, progress=False)
    results = measure({"AA": model}, cfg, eval_pairs=(2,))
    chance = 2 / cfg.vocab_size  # a guess among the values
    assert results["recall"]["AA"][2] > 3 * chance
    assert "AA" in results_table(results)


def test_mamba_layers_run_the_scan_they_are_given():
    from toolkit.ssm import selective_scan, selective_scan_parallel

    calls = []

    def counting_scan(*args, **kwargs):
        calls.append(1)
        return selective_scan_parallel(*args[:6])

    torch.manual_seed(0)
    default = HybridLM(V, "MAM", d_model=16, n_heads=2, d_state=4).eval()
    given = HybridLM(V, "MAM", d_model=16, n_heads=2, d_state=4, scan=counting_scan).eval()
    given.load_state_dict(default.state_dict())
    ids = torch.randint(V, (2, 9))
    with torch.no_grad():
        assert torch.allclose(given(ids), default(ids), atol=1e-5)
    assert len(calls) == 2  # one per Mamba layer
    # the cache comes from the given scan's state too
    _, cache = MambaMixer(16, 4, expand=1, scan=selective_scan)(torch.randn(1, 3, 16),
                                                                return_cache=True)
    assert cache.ssm_state.shape == (1, 16, 4)


def test_train_on_mqar_uses_the_batches_it_is_given_and_learns():
    """The short run of assignment 06: above chance on 2 pairs, and every batch comes from
    ``batch_fn`` (a student's ``mqar_batch``), seeded by ``seed``."""
    drawn = []

    def counting_batch(*args, **kwargs):
        drawn.append(args[1])
        return mqar_batch(*args, **kwargs)

    torch.manual_seed(0)
    model = HybridLM(16, "AA", d_model=32, n_heads=4, max_seq_len=8)
    trained = train_on_mqar(model, 60, (2,), 16, batch_fn=counting_batch)
    assert drawn == [2] * 60 and not trained.training
    x, y = mqar_batch(256, 2, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        assert recall_accuracy(trained(x), y) > 3 * (2 / 16)


def test_a_saved_hybrid_loads_into_the_same_function(tmp_path):
    torch.manual_seed(0)
    arguments = dict(vocab_size=V, pattern="MA", d_model=16, n_heads=2, d_state=4, max_seq_len=12)
    model = HybridLM(**arguments).eval()
    path = str(tmp_path / "hybrid.safetensors")
    save_hybrid(model, path, **arguments)
    loaded = load_hybrid(path)
    assert loaded.pattern == "MA" and not loaded.training
    ids = torch.randint(V, (2, 12))
    with torch.no_grad():
        assert torch.equal(loaded(ids), model(ids))
    with pytest.raises(ValueError, match="missing \\['max_seq_len'\\]"):
        save_hybrid(model, path, **{k: v for k, v in arguments.items() if k != "max_seq_len"})
    with pytest.raises(ValueError, match="unknown \\['dropout'\\]"):
        save_hybrid(model, path, **arguments, dropout=0.1)
