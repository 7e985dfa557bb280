"""Every widget builder draws with the student's own functions (``fns``) and never breaks on
an exercise that is not written yet: it says which function it needs instead."""

from __future__ import annotations

import inspect

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

import toolkit.attention  # noqa: E402
import toolkit.differential  # noqa: E402
import toolkit.distill  # noqa: E402
import toolkit.ffn  # noqa: E402
import toolkit.flash  # noqa: E402
import toolkit.gau  # noqa: E402
import toolkit.generate  # noqa: E402
import toolkit.gqa  # noqa: E402
import toolkit.linear_attention  # noqa: E402
import toolkit.masks  # noqa: E402
import toolkit.mla  # noqa: E402
import toolkit.mlm  # noqa: E402
import toolkit.moe  # noqa: E402
import toolkit.position  # noqa: E402
import toolkit.residual  # noqa: E402
import toolkit.rwkv  # noqa: E402
import toolkit.seq2seq  # noqa: E402
import toolkit.ssm  # noqa: E402
from autograder.workspace.release_steps import stub_message  # noqa: E402
from toolkit.data import ByteTokenizer  # noqa: E402
from toolkit.models import GPT, GPTConfig  # noqa: E402
from toolkit.widgets import attention as A  # noqa: E402
from toolkit.widgets import beyond as B  # noqa: E402
from toolkit.widgets import blocks as K  # noqa: E402
from toolkit.widgets import display as D  # noqa: E402
from toolkit.widgets import efficient as E  # noqa: E402
from toolkit.widgets import generation as G  # noqa: E402
from toolkit.widgets import position as P  # noqa: E402
from toolkit.widgets import seq2seq as S  # noqa: E402


def _tiny_models():
    torch.manual_seed(0)
    config = GPTConfig.modern(vocab_size=256, d_model=16, n_layers=1, n_heads=2, max_seq_len=32)
    return {"modern": GPT(config).eval()}


def _tiny_encoder_decoder():
    torch.manual_seed(0)
    return toolkit.seq2seq.EncoderDecoder(toolkit.seq2seq.EncDecConfig(
        vocab_size=toolkit.seq2seq.NumberTokenizer().vocab_size, d_model=16, n_heads=2,
        d_ff=32)).eval()


SEQ2SEQ = {"model": _tiny_encoder_decoder(), "tokenizer": toolkit.seq2seq.NumberTokenizer()}

# (builder, its other arguments, a function it calls, where the toolkit defines it)
CASES = [
    (A.attention_explorer, {}, "attention_weights", toolkit.attention),
    (A.families_explorer, {}, "causal_mask", toolkit.masks),
    (A.permutation_demo, {}, "scaled_dot_product_attention", toolkit.attention),
    (P.rope_spectrum_explorer, {}, "yarn_inv_freq_and_temperature", toolkit.position),
    (P.rope_rotation_explorer, {}, "apply_rope", toolkit.position),
    (P.score_vs_distance_explorer, {}, "sinusoidal_encoding", toolkit.position),
    (P.alibi_explorer, {}, "alibi_slopes", toolkit.position),
    (P.train_short_test_long_explorer, {}, "yarn_band_ratios", toolkit.position),
    (P.long_context_explorer, {}, "rope_inv_freq_dynamic_ntk", toolkit.position),
    (E.mask_gallery, {}, "band_mask", toolkit.masks),
    (E.kv_cache_calculator, {}, "kv_cache_bytes", toolkit.gqa),
    (E.linear_attention_explorer, {}, "causal_linear_attention", toolkit.linear_attention),
    (E.mla_explorer, {}, "mla_cache_bytes", toolkit.mla),
    (E.differential_explorer, {}, "differential_attention", toolkit.differential),
    (E.online_softmax_stepper, {"n": 8}, "online_softmax_trace", toolkit.flash),
    (E.attention_memory_explorer, {}, "attention_memory_bytes", toolkit.flash),
    (K.layer_scale_explorer, {}, "PreLNBlock", toolkit.residual),
    (K.glu_gate_explorer, {}, "GatedFeedForward", toolkit.ffn),
    (K.mlm_masking_playground, {"sentence": "def f ( x ) : return x"}, "mask_tokens",
     toolkit.mlm),
    (K.temperature_explorer, {}, "soft_target_loss", toolkit.distill),
    (B.router_load_explorer, {}, "load_balancing_loss", toolkit.moe),
    (B.ssm_kernel_explorer, {}, "discretize_zoh", toolkit.ssm),
    (B.rwkv_decay_explorer, {}, "wkv_recurrent", toolkit.rwkv),
    (B.mamba_selectivity_explorer, {}, "selective_scan", toolkit.ssm),
    (B.gau_explorer, {}, "GatedAttentionUnit", toolkit.gau),
    (B.decoding_cost_explorer, {}, "kv_cache_bytes", toolkit.gqa),
    (G.sampling_playground, {"logits": torch.linspace(2, -2, 12)}, "apply_temperature",
     toolkit.generate),
    (G.side_by_side_generation, {"models": None, "tokenizer": ByteTokenizer(),
                                 "max_new_tokens": 4}, "generate", toolkit.generate),
    (S.cross_attention_explorer, SEQ2SEQ, "greedy_decode", toolkit.seq2seq),
    (S.beam_explorer, SEQ2SEQ, "beam_search_one", toolkit.seq2seq),
]
IDS = [builder.__name__ for builder, *_ in CASES]


@pytest.fixture
def interactive(monkeypatch):
    monkeypatch.delenv(D.HEADLESS_ENV, raising=False)


def _build(builder, kwargs, **fns):
    if "models" in kwargs:
        kwargs = {**kwargs, "models": _tiny_models()}
    return builder(**kwargs, fns=fns or None)


def _stub(name: str, exercise: str = "Exercise 2a: masks"):
    """A function as a released notebook gives it: raising the named stub's message."""

    def stub(*args, **kwargs):
        raise NotImplementedError(stub_message(name, exercise))

    return stub


def _walk(widget):
    yield widget
    for child in getattr(widget, "children", ()):
        yield from _walk(child)


def _shown(widget) -> tuple[bytes | None, str]:
    """What the widget shows: its image's PNG (None when hidden) and all its HTML text."""
    images = [c for c in _walk(widget) if isinstance(c, w.Image)]
    png = next((bytes(i.value) for i in images if i.layout.display != "none"), None)
    return png, " ".join(c.value for c in _walk(widget) if isinstance(c, w.HTML))


@pytest.mark.parametrize(("builder", "kwargs", "name", "module"), CASES, ids=IDS)
def test_a_stub_shows_which_function_is_missing(interactive, builder, kwargs, name, module):
    widget = _build(builder, kwargs, **{name: _stub(name)})
    png, text = _shown(widget)
    assert png is None
    assert f"This widget needs <code>{name}</code>, which is not written yet (Exercise 2a: " \
           "masks)" in text


@pytest.mark.parametrize(("builder", "kwargs", "name", "module"), CASES, ids=IDS)
def test_the_reference_function_draws_what_the_default_draws(
    interactive, builder, kwargs, name, module
):
    default = _shown(_build(builder, kwargs))
    given = _shown(_build(builder, kwargs, **{name: getattr(module, name)}))
    assert given == default and "not written" not in default[1]
    assert default[0] is not None or builder is G.side_by_side_generation  # text, no image


@pytest.mark.parametrize(("builder", "kwargs", "name", "module"), CASES, ids=IDS)
def test_an_unknown_name_is_refused(interactive, builder, kwargs, name, module):
    with pytest.raises(ValueError, match=rf"{builder.__name__}: fns names 'atention_weights'"
                                         rf".*it takes .*{name}"):
        _build(builder, kwargs, atention_weights=_stub("atention_weights"))


def test_fns_is_checked_while_grading_too(monkeypatch):
    monkeypatch.setenv(D.HEADLESS_ENV, "1")
    with pytest.raises(ValueError, match="mask_gallery: fns must be a dict"):
        E.mask_gallery(fns=toolkit.masks.band_mask)
    with pytest.raises(ValueError, match=r"fns\['band_mask'\] must be a function"):
        E.mask_gallery(fns={"band_mask": torch.ones(3)})


def test_the_figure_appears_once_the_exercise_is_written(interactive):
    """A notebook's function is followed by name: running its cell again is enough."""
    notebook = {"__name__": "__main__"}
    exec(f"def band_mask(n, radius, *, device=None):\n"
         f"    raise NotImplementedError({stub_message('band_mask', 'Exercise 1')!r})",
         notebook)
    widget = E.mask_gallery(fns={"band_mask": notebook["band_mask"]})
    png, text = _shown(widget)
    assert png is None and "Write it and run its cell, then move a control" in text
    notebook["band_mask"] = toolkit.masks.band_mask  # the student runs the written cell
    next(c for c in _walk(widget) if getattr(c, "description", "") == "window").value = 5
    png, text = _shown(widget)
    assert png is not None and "not written" not in text


def test_a_function_the_widget_does_not_take_gets_no_fns_advice(interactive):
    def my_attention(q, k, v, mask=None):  # written, but calls an exercise that is not
        return _stub("attention_weights", "Exercise 1a: attention weights")(q, k, mask) @ v

    widget = A.permutation_demo(fns={"scaled_dot_product_attention": my_attention})
    _, text = _shown(widget)
    assert "needs <code>attention_weights</code>" in text
    assert text.split("(Exercise 1a: attention weights).")[1].startswith(
        " Write it and run this cell again.</div>")


def test_messages_for_the_student_toolkit():
    f = D.widget_functions("mask_gallery", None, E.mask_gallery.__globals__["TOOLKIT_FUNCTIONS"])
    left_out = NotImplementedError("`band_mask` is not written yet (assignment 03-efficient): x")
    assert D.unwritten_message(left_out, f) == (
        "This widget needs `band_mask`, which is not written yet (assignment 03-efficient). "
        "The toolkit you installed leaves it out until that assignment's solutions are "
        'unlocked: pass yours, `mask_gallery(fns={"band_mask": band_mask})`.')
    assert D.unwritten_message(NotImplementedError(), f) is None  # a bare one: not a stub's


def test_a_bare_not_implemented_error_is_not_hidden(interactive):
    def unfinished(*args, **kwargs):
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        E.mask_gallery(fns={"band_mask": unfinished})


def test_every_builder_is_tested_here_and_takes_fns():
    from toolkit.widgets import BUILDERS

    assert sorted(n for names in BUILDERS.values() for n in names) == sorted(IDS)
    for builder, *_ in CASES:
        assert inspect.signature(builder).parameters["fns"].kind == inspect.Parameter.KEYWORD_ONLY
