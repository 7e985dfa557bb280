"""Headless tests for toolkit.widgets.blocks (Assignment 05's widgets)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import ipywidgets as w  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from widget_testing import PNG_MAGIC  # noqa: E402
from widget_testing import control as _control  # noqa: E402
from widget_testing import image_widget as _image  # noqa: E402
from widget_testing import render as _render  # noqa: E402
from widget_testing import walk as _walk  # noqa: E402

from toolkit.ffn import GatedFeedForward  # noqa: E402
from toolkit.mlm import MASK_ID, WordVocab, mask_tokens  # noqa: E402
from toolkit.residual import PreLNBlock  # noqa: E402
from toolkit.widgets import blocks as K  # noqa: E402

VOCAB = WordVocab.from_text("def f ( x ) : return x + 1 if x else 0 " * 3, 1)


# ---------------------------------------------------------------- layers and gates


def test_plot_layer_scales_and_warmup_runs_render():
    scales = {"Post-LN": {"activation": torch.ones(4), "gradient": torch.rand(4)},
              "Pre-LN": {"activation": torch.arange(1.0, 5.0), "gradient": torch.rand(4)}}
    fig = K.plot_layer_scales(scales, "t")
    assert len(fig.axes) == 2
    _render(fig)
    runs = {"Post-LN, no warm-up": [2.8] * 30, "Pre-LN, warm-up": [2.0 - i / 20 for i in range(30)],
            "Post-LN, warm-up": [float("nan")] + [1.0] * 29}
    _render(K.plot_warmup_runs(runs, warmup_steps=10))
    with pytest.raises(ValueError, match="scales"):
        K.plot_layer_scales({})
    with pytest.raises(ValueError, match="runs"):
        K.plot_warmup_runs({})


@pytest.mark.parametrize("activation", K.GATE_ACTIVATIONS)
def test_gate_example_matches_the_formula(activation):
    example = K.gate_example(GatedFeedForward, activation, token=2, scale=3.0)
    assert example["gate"].shape == (24,)
    torch.testing.assert_close(example["product"], example["gate"] * example["value"])
    if activation == "relu":
        assert (example["gate"] >= 0).all() and (example["gate"] == 0).any()
    if activation == "sigmoid":
        assert ((example["gate"] > 0) & (example["gate"] < 1)).all()
    same = K.gate_example(GatedFeedForward, "silu", token=2, scale=3.0)
    torch.testing.assert_close(same["value"], example["value"])  # same weights for every gate
    _render(K.plot_glu_gates(example, "t"))
    with pytest.raises(ValueError, match="token"):
        K.gate_example(token=6)


def test_layer_scale_explorer_builds_and_redraws(interactive):
    widget = K.layer_scale_explorer(fns={"PreLNBlock": PreLNBlock})
    image = _image(widget)
    first = bytes(image.value)
    assert first.startswith(PNG_MAGIC)
    _control(widget, "blocks").value = 3
    assert bytes(image.value) != first


def test_layer_scale_explorer_draws_with_the_students_classes_alone(interactive,
                                                                   blocks_stubbed):
    """As with the student build while 05 is open: the toolkit's blocks and LayerNorm
    raise, and the explorer draws both layouts from the classes in ``fns``."""
    widget = K.layer_scale_explorer(fns={"PreLNBlock": blocks_stubbed,
                                         "PostLNBlock": blocks_stubbed,
                                         "LayerNorm": torch.nn.LayerNorm})
    notes = " ".join(c.value for c in _walk(widget) if isinstance(c, w.HTML))
    assert "toolkit's class" not in notes and "not written" not in notes
    assert _image(widget).layout.display != "none"
    assert bytes(_image(widget).value).startswith(PNG_MAGIC)


def test_glu_gate_explorer_takes_a_class_and_redraws(interactive):
    widget = K.glu_gate_explorer(fns={"GatedFeedForward": GatedFeedForward})
    image = _image(widget)
    first = bytes(image.value)
    _control(widget, "gate activation").value = "relu"
    assert bytes(image.value) != first


# ---------------------------------------------------------------- masking and distillation


def test_masking_outcomes_and_shares():
    ids = torch.tensor([2, 5, 6, 7, 8, 3])
    inputs = torch.tensor([2, MASK_ID, 6, 9, 8, 3])
    labels = torch.tensor([-100, 5, -100, 7, 8, -100])
    assert K.masking_outcomes(ids, inputs, labels, range(5), MASK_ID) == [
        "special", "[MASK]", "not selected", "random", "unchanged", "special"]
    shares = K.outcome_shares(ids[None], inputs[None], labels[None], range(5), MASK_ID)
    assert shares["selected"] == pytest.approx(3 / 4)
    assert shares["[MASK]"] == shares["random"] == shares["unchanged"] == pytest.approx(1 / 3)


def test_plot_mlm_masking_renders():
    tokens, new, outcomes, shares = K.masking_example("def f ( x ) : return x", mask_tokens,
                                                      VOCAB, 0, 0.3)
    assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and outcomes[0] == "special"
    assert 0.2 < shares["selected"] < 0.4  # 2,000 draws at 30%
    _render(K.plot_mlm_masking(tokens, new, outcomes, shares))
    _render(K.plot_mlm_masking(tokens, new, outcomes))
    with pytest.raises(ValueError, match="same length"):
        K.plot_mlm_masking(tokens, new[:-1], outcomes)


def test_plot_soft_targets_renders_and_uses_the_loss():
    calls = []

    def loss_fn(s, t, temperature):
        calls.append(temperature)
        return torch.tensor(1.0)

    _render(K.plot_soft_targets(K.TEACHER_LOGITS, K.STUDENT_LOGITS, 3.0, loss_fn=loss_fn))
    assert 3.0 in calls and len(calls) > 10
    with pytest.raises(ValueError, match="temperature"):
        K.plot_soft_targets(K.TEACHER_LOGITS, K.STUDENT_LOGITS, 0.0)


def test_mlm_masking_playground_takes_a_function_and_redraws(interactive):
    widget = K.mlm_masking_playground("def f ( x ) : return x", VOCAB,
                                      fns={"mask_tokens": mask_tokens})
    image = _image(widget)
    first = bytes(image.value)
    assert first.startswith(PNG_MAGIC)
    _control(widget, "seed").value = 3
    assert bytes(image.value) != first


def test_playground_shows_the_error_of_a_function_that_fails_on_some_setting(interactive):
    def picky(input_ids, *args, generator=None):  # works at 15%, fails above
        if args[-1] > 0.2:
            raise ValueError("mlm_probability too high for this student")
        return mask_tokens(input_ids, *args, generator=generator)

    widget = K.mlm_masking_playground("x + 1", VOCAB, fns={"mask_tokens": picky})
    image, first = _image(widget), bytes(_image(widget).value)
    _control(widget, "mlm_probability").value = 0.4  # the widget survives and says why
    assert bytes(image.value) != first and bytes(image.value).startswith(PNG_MAGIC)
    _render(K.message_figure("your masking function raised ValueError: too high"))


def test_temperature_explorer_redraws(interactive):
    widget = K.temperature_explorer()
    image = _image(widget)
    first = bytes(image.value)
    _control(widget, "temperature T").value = 8.0
    assert bytes(image.value) != first


@pytest.mark.parametrize("builder", [K.layer_scale_explorer, K.glu_gate_explorer,
                                     K.mlm_masking_playground, K.temperature_explorer])
def test_builders_are_placeholders_when_headless(headless, builder):
    widget = builder()
    assert isinstance(widget, w.HTML) and "skipped" in widget.value


class _UnwrittenBlock(PreLNBlock):
    def forward(self, x, mask=None):
        raise NotImplementedError("`PreLNBlock.forward` is not written yet (Exercise 3: the "
                                  "Pre-LN block)")


class _UnwrittenFFN(GatedFeedForward):
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("`GatedFeedForward.__init__` is not written yet (Exercise 2: "
                                  "the gated FFN)")


@pytest.mark.parametrize("build, name", [
    (lambda: K.layer_scale_explorer(fns={"PreLNBlock": _UnwrittenBlock}), "PreLNBlock.forward"),
    (lambda: K.glu_gate_explorer(fns={"GatedFeedForward": _UnwrittenFFN}),
     "GatedFeedForward.__init__"),
])
def test_a_class_with_an_unwritten_method_shows_which_one(interactive, build, name):
    """Not an exception: the widget keeps its controls and names the missing method."""
    widget = build()
    notes = " ".join(c.value for c in _walk(widget) if isinstance(c, w.HTML))
    assert f"needs <code>{name}</code>, which is not written yet" in notes
    assert _image(widget).layout.display == "none"


# ---------------------------------------------------------------- fine-tuning


@pytest.fixture(scope="module")
def finetuning_results():
    """A 2-layer classifier fine-tuned for a few steps on a toy task, measured as the
    notebook measures it."""
    from toolkit.bert import BertClassifier, BertConfig, TinyBert
    from toolkit.finetune import encode_pairs, finetuning_curve

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    pairs = [(torch.randint(5, VOCAB.vocab_size, (3,), generator=g).tolist(),
              torch.randint(5, VOCAB.vocab_size, (2,), generator=g).tolist()) for _ in range(12)]
    data = encode_pairs(pairs, 9)
    data["labels"] = torch.arange(12) % 2
    classifiers, curves = {}, {}
    for run in ("pre-trained", "from scratch"):
        classifiers[run] = BertClassifier(TinyBert(BertConfig(
            vocab_size=VOCAB.vocab_size, d_model=16, n_layers=2, n_heads=2, max_seq_len=9)), 2)
        curves[run] = finetuning_curve(classifiers[run], data, data, 6, every=2, batch_size=4)
    results = K.finetuning_results(classifiers, curves, data, [0, 1], VOCAB, ("even", "odd"))
    assert results["chance"] == 0.5
    return results


def test_plot_finetuning_renders_the_curves_and_the_cls_row(finetuning_results):
    curve = finetuning_results["curves"]["pre-trained"]
    assert curve["step"] == [0, 2, 4, 6] and len(curve["loss"]) == 6
    entry = finetuning_results["attention"]["from scratch"][1]
    assert entry["weights"].shape == (2, 2, 8) and len(entry["tokens"]) == 8  # 8 real tokens
    fig = K.plot_finetuning(finetuning_results, run="from scratch", example=1)
    assert len(fig.axes[0].get_lines()) == 2 * 2 + 1  # held-out and training per run, chance
    _render(fig)
    with pytest.raises(ValueError, match="run"):
        K.plot_finetuning(finetuning_results, run="distilled")
    with pytest.raises(ValueError, match="example"):
        K.plot_finetuning(finetuning_results, example=2)


def test_finetuning_explorer_redraws(interactive, finetuning_results):
    widget = K.finetuning_explorer(finetuning_results)
    image = _image(widget)
    first = bytes(image.value)
    assert first.startswith(PNG_MAGIC)
    _control(widget, "[CLS] attention of").value = "from scratch"
    assert bytes(image.value) != first


def test_finetuning_explorer_is_a_placeholder_when_headless(headless, finetuning_results):
    widget = K.finetuning_explorer(finetuning_results)
    assert isinstance(widget, w.HTML) and "skipped" in widget.value
