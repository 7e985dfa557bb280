"""Headless tests for the Assignment 06 widgets (MoE routing, SSM kernel, RWKV decay,
decoding cost): every plot renders, every builder builds and redraws, student functions
can be passed in (``fns``), and the numbers behind the pictures are right."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from widget_testing import image_bytes as _image  # noqa: E402
from widget_testing import render  # noqa: E402
from widget_testing import walk as _walk  # noqa: E402

from toolkit.gqa import kv_cache_bytes  # noqa: E402
from toolkit.moe import apply_capacity, load_balancing_loss, top_k_gating  # noqa: E402
from toolkit.rwkv import wkv_parallel  # noqa: E402
from toolkit.ssm import discretize_simplified  # noqa: E402
from toolkit.widgets.beyond import decoding_cost as DC  # noqa: E402
from toolkit.widgets.beyond import gau as GA  # noqa: E402
from toolkit.widgets.beyond import moe as M  # noqa: E402
from toolkit.widgets.beyond import rwkv as R  # noqa: E402
from toolkit.widgets.beyond import selectivity as SE  # noqa: E402
from toolkit.widgets.beyond import ssm as S  # noqa: E402
from toolkit.widgets.display import HEADLESS_ENV  # noqa: E402

BUILDERS = [M.router_load_explorer, S.ssm_kernel_explorer, R.rwkv_decay_explorer,
            DC.decoding_cost_explorer, SE.mamba_selectivity_explorer, GA.gau_explorer]


def test_balancing_loss_prevents_collapse():
    without = M.simulate_router(alpha=0.0, steps=30)
    balanced = M.simulate_router(alpha=1.0, steps=30)
    share = lambda r: r["load"][-1].max().item() / r["load"][-1].sum().item()  # noqa: E731
    assert share(balanced) < share(without)
    assert balanced["balance_loss"][-1] < without["balance_loss"][-1]
    render(M.plot_router_load(without, balanced, capacity_factor=1.0, alpha=1.0))


def test_router_simulation_uses_the_given_functions():
    calls = []

    def gating(logits, k, gating):
        calls.append("gating")
        return top_k_gating(logits, k, gating)

    def balance(logits, k):
        calls.append("balance")
        return load_balancing_loss(logits, k)

    M.simulate_router(steps=2, fns={"top_k_gating": gating, "load_balancing_loss": balance})
    assert calls == ["gating", "balance"] * 2


def test_dropped_assignments_are_the_overflow_of_each_expert():
    """The red part of a bar: what apply_capacity drops, counted per expert."""
    run = M.simulate_router(n_experts=4, k=2, steps=20)
    n_tokens, k = run["indices"].shape
    capacity = 100  # the load is uneven without the balancing loss: some experts overflow
    kept, n_dropped = apply_capacity(run["indices"], 4, capacity)
    dropped = torch.bincount(run["indices"][~kept], minlength=4)
    assert n_dropped > 0
    assert torch.equal(dropped, (run["load"][-1] - capacity).clamp(min=0))


def test_memory_horizon_and_impulse_response():
    assert S.memory_horizon(0.1, -1.0) == 47  # ln(0.01) / -0.1 = 46.05 -> 47
    r = S.ssm_impulse_response(0.1, a=1.0, n_state=2, length=30)
    A_bar = torch.exp(0.1 * r["A"])
    B_bar = (A_bar - 1) / r["A"]
    torch.testing.assert_close(r["kernel"][5], (A_bar**5 * B_bar).sum())
    with pytest.raises(ValueError, match="A < 0"):
        S.memory_horizon(0.1, 1.0)
    traces = S.selective_forgetting(0.05, a=0.5, reset_at=20)
    assert traces["selective"][25] < 0.1 * traces["lti"][25]  # the large step wiped the pulse
    # Even for the slider's smallest |A| the reset step keeps at most 1% of the state.
    traces = S.selective_forgetting(0.05, a=0.01, reset_at=20)
    kept = traces["selective"][20] / traces["lti"][20]
    assert traces["reset_delta"] > 400 and kept <= 0.0101, kept
    render(S.plot_ssm_kernel(0.2, 0.3))
    render(S.plot_ssm_kernel(0.2, 0.3, fns={"discretize_zoh": discretize_simplified}))


def test_wkv_trace_is_the_marked_tokens_share():
    w_ = R.channel_decays(0.01, 2.0, 4)
    trace = R.wkv_trace(w_, u=0.5, mark_at=3, k_mark=1.0, length=12)
    assert torch.equal(trace[:3], torch.zeros(3, 4))
    slow, fast = trace[-1, 0], trace[-1, -1]
    assert slow > fast  # the slow channel remembers the marked token longer
    torch.testing.assert_close(
        trace, R.wkv_trace(w_, 0.5, 3, 1.0, 12, fns={"wkv_recurrent": wkv_parallel}))
    render(R.plot_rwkv_decay())


def test_selectivity_keeps_the_marked_token_and_lti_does_not():
    s = SE.selective_states(selectivity=4.0, bias=-1.0, a=1.0, length=40, mark_at=10)
    assert s["delta"][10] > 10 * s["delta"][:10].max()  # the marked token's large step
    assert torch.allclose(s["kept"], torch.exp(-s["delta"]))
    assert s["selective"][30] > 0.5 * s["selective"][10] > 0  # still held 20 tokens later
    assert s["lti"][30].abs() < 0.2 * s["selective"][30]
    flat = SE.selective_states(selectivity=0.0, length=40, mark_at=10)
    torch.testing.assert_close(flat["selective"], flat["lti"])  # no selectivity: an LTI scan


def test_gau_internals_match_the_unit():
    from toolkit.gau import GatedAttentionUnit

    for causal in (False, True):
        parts = GA.gau_internals(T=7, causal=causal, seed=3)
        assert parts["A"].shape == (7, 7) and parts["U"].shape == (7, 16)
        assert (parts["A"] >= 0).all()
        if causal:
            assert torch.equal(parts["A"].triu(1), torch.zeros(7, 7, dtype=torch.float64))
        same = GA.gau_internals(T=7, causal=causal, seed=3,
                                fns={"GatedAttentionUnit": GatedAttentionUnit})
        torch.testing.assert_close(same["out"], parts["out"])
    bidirectional = GA.gau_internals(T=7, causal=False, seed=3)["A"]
    assert not torch.allclose(bidirectional, bidirectional.T)  # own scales, offsets for Q, K


def test_decoding_costs():
    costs = DC.decoding_costs([1024, 4096], d_model=512, n_layers=2, n_heads=8, n_kv_heads=2,
                              bytes_per_element=2)
    attention = costs["attention + KV cache"]["bytes"]
    assert attention == [2 * 2 * 2 * 64 * 1024 * 2, 2 * 2 * 2 * 64 * 4096 * 2]
    assert costs["Mamba"]["bytes"][0] == costs["Mamba"]["bytes"][1] == 2 * 1024 * 20 * 2
    assert costs["RWKV"]["flops"][0] == costs["RWKV"]["flops"][1]
    assert attention == [kv_cache_bytes(2, 2, 64, T, 1, 2) for T in (1024, 4096)]
    doubled = lambda *shape: 2 * kv_cache_bytes(*shape)  # noqa: E731
    by_student = DC.decoding_costs([1024], d_model=512, n_layers=2, n_heads=8, n_kv_heads=2,
                                   fns={"kv_cache_bytes": doubled})
    assert by_student["attention + KV cache"]["bytes"] == [2 * attention[0]]
    measured = {"Mamba": {1024: (1e-3, 100), 4096: (1e-3, 100)}}
    render(DC.plot_decoding_costs([1024, 4096], measured=measured))


@pytest.mark.parametrize("builder", BUILDERS)
def test_builders_redraw(interactive, builder):
    widget = builder()
    first = _image(widget)
    assert first.startswith(b"\x89PNG")
    control = next(c for c in _walk(widget) if isinstance(c, (w.IntSlider, w.SelectionSlider)))
    options = getattr(control, "options", None)
    control.value = options[0] if options else control.min
    assert _image(widget) != first


def test_builders_draw_with_the_student_functions(interactive):
    """A different function under the toolkit's name changes the figure."""
    zoh = _image(S.ssm_kernel_explorer())
    assert _image(S.ssm_kernel_explorer(fns={"discretize_zoh": discretize_simplified})) != zoh
    torch_wkv = _image(R.rwkv_decay_explorer(fns={"wkv_recurrent": wkv_parallel}))
    assert torch_wkv.startswith(b"\x89PNG")


@pytest.mark.parametrize("builder", BUILDERS)
def test_builders_are_placeholders_when_headless(monkeypatch, builder):
    monkeypatch.setenv(HEADLESS_ENV, "1")
    widget = builder()
    assert isinstance(widget, w.HTML) and "skipped" in widget.value
