"""Headless tests for toolkit.widgets.seq2seq: the maps are right, plots render, widgets build."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from toolkit.seq2seq import (  # noqa: E402
    EncDecConfig,
    EncoderDecoder,
    NumberTokenizer,
    beam_search_one,
    greedy_decode,
)
from toolkit.widgets import display as D  # noqa: E402
from toolkit.widgets import seq2seq as S  # noqa: E402

TOKENIZER = NumberTokenizer()


@pytest.fixture
def interactive(monkeypatch):
    monkeypatch.delenv(D.HEADLESS_ENV, raising=False)


def tiny_model(seed=0):
    torch.manual_seed(seed)
    return EncoderDecoder(EncDecConfig(vocab_size=TOKENIZER.vocab_size, d_model=16, n_heads=2,
                                       d_ff=32, n_decoder_layers=3)).eval()


def test_cross_attention_maps_are_the_layers_weights():
    """Row t of each map is the softmax over the real input tokens, and equals what the
    cross-attention layer computes (checked through its output)."""
    model = tiny_model()
    src = torch.tensor([TOKENIZER.encode("words: 4213") + [0, 0]])
    out = greedy_decode(model, src, 6)[0]
    maps = S.cross_attention_maps(model, src, out)
    assert maps.shape == (3, 2, out.numel(), src.size(1))
    torch.testing.assert_close(maps.sum(-1), torch.ones(3, 2, out.numel()))
    assert maps[..., -2:].abs().max() == 0  # padding never read
    layer = model.decoder_layers[0].cross_attn
    seen = {}
    layer.register_forward_hook(lambda m, args, result: seen.update(x=args[0], y=result))
    memory, mask = model.encode(src)
    from toolkit.seq2seq import shift_right
    with torch.no_grad():
        model.decode(shift_right(out[None]), memory, mask)
        v = layer.split_heads(layer.v_proj(memory))  # (1, H, S, d_head)
        heads = maps[0][None].double() @ v.double()  # (1, H, n, d_head)
        expected = layer.o_proj(heads.transpose(1, 2).reshape(1, out.numel(), -1).float())
    torch.testing.assert_close(expected, seen["y"], rtol=1e-4, atol=1e-5)


def test_beam_steps_end_with_the_search():
    model = tiny_model(1)
    src = torch.tensor([TOKENIZER.encode("digits: seven thousand twelve")])
    steps = S.beam_steps(model, src, 3, 5, 1.0)
    assert len(steps) == 5
    final = [(s, t.tolist()) for s, t in beam_search_one(model, src, 3, 5, 1.0)]
    assert steps[-1] == final
    assert all(len(hyps) <= 3 and [s for s, _ in hyps] == sorted((s for s, _ in hyps),
                                                                 reverse=True) for hyps in steps)


def test_plots_render():
    fig = S.plot_cross_attention(torch.rand(3, 4).softmax(-1), list("abcd"), list("xyz"))
    assert D.figure_to_png(fig, dpi=40).startswith(b"\x89PNG")
    fig = S.plot_beams([[(-0.5, [5, 6])], [(-0.7, [5, 6, 1]), (-0.9, [4, 1])]], TOKENIZER)
    assert D.figure_to_png(fig, dpi=40).startswith(b"\x89PNG")


def test_builders_draw_with_the_students_functions(interactive):
    model = tiny_model(2)
    calls = []

    def my_greedy(*args, **kwargs):
        calls.append("greedy")
        return greedy_decode(*args, **kwargs)

    def my_beam(*args, **kwargs):
        calls.append("beam")
        return beam_search_one(*args, **kwargs)

    for widget in (S.cross_attention_explorer(model, TOKENIZER, fns={"greedy_decode": my_greedy}),
                   S.beam_explorer(model, TOKENIZER, fns={"beam_search_one": my_beam})):
        assert isinstance(widget, w.VBox)
        images = [c for c in widget.children if isinstance(c, w.Image)]
        assert images and bytes(images[0].value).startswith(b"\x89PNG")
    assert {"greedy", "beam"} <= set(calls)


def test_headless_placeholders(monkeypatch):
    monkeypatch.setenv(D.HEADLESS_ENV, "1")
    model = tiny_model()
    assert not isinstance(S.cross_attention_explorer(model, TOKENIZER), w.VBox)
    assert not isinstance(S.beam_explorer(model, TOKENIZER), w.VBox)
