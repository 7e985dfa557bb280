"""BERT's masking recipe, token by token: the masked-LM playground.

:func:`mlm_masking_playground` shows a sentence as ``[CLS] ... [SEP]``, masked by a
masking function (yours or the toolkit's). Each token is a box: grey if it can never be
chosen (a special token), white if it was not selected this time, and for the selected
ones what it became: ``[MASK]`` (orange), a random word (red), or itself (green). The
lower panel counts the outcomes over 2,000 draws of the same sentence against what the
recipe promises: 15% selected, of those 80 / 10 / 10.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from functools import cache

import torch
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle
from torch import Tensor

from toolkit.data import load_text
from toolkit.mlm import IGNORE_INDEX, WordVocab, mask_tokens, pair_inputs
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

OUTCOMES = ("special", "not selected", "[MASK]", "random", "unchanged")
OUTCOME_COLORS = {"special": "lightgrey", "not selected": "white", "[MASK]": "tab:orange",
                  "random": "tab:red", "unchanged": "tab:green"}
#: The masking function the playground calls; a student's own replaces it through ``fns``.
TOOLKIT_FUNCTIONS = {"mask_tokens": mask_tokens}
DEFAULT_SENTENCE = "def mean(data): return sum(data) / len(data) if data else 0.0"


@cache
def course_vocab() -> WordVocab:
    """The word vocabulary of the course corpus (words seen at least 3 times)."""
    return WordVocab.from_text(load_text(), 3)


def masking_outcomes(original: Tensor, inputs: Tensor, labels: Tensor,
                     special_ids: Sequence[int], mask_token_id: int) -> list[str]:
    """What happened at each position of one ``(T,)`` sequence: one of :data:`OUTCOMES`."""
    out = []
    for o, i, label in zip(original.tolist(), inputs.tolist(), labels.tolist()):
        if o in special_ids:
            out.append("special")
        elif label == IGNORE_INDEX:
            out.append("not selected")
        elif i == mask_token_id:
            out.append("[MASK]")
        elif i == o:
            out.append("unchanged")
        else:
            out.append("random")
    return out


def outcome_shares(original: Tensor, inputs: Tensor, labels: Tensor, special_ids: Sequence[int],
                   mask_token_id: int) -> dict[str, float]:
    """Over many draws ``(N, T)``: the share of non-special tokens selected, and of the
    selected ones the shares that became ``[MASK]``, a random id, or stayed."""
    special = torch.isin(original, torch.as_tensor(list(special_ids)))
    selected = labels != IGNORE_INDEX
    n_sel = max(int(selected.sum()), 1)
    return {
        "selected": float(selected.sum()) / max(int((~special).sum()), 1),
        "[MASK]": float((selected & (inputs == mask_token_id)).sum()) / n_sel,
        "random": float((selected & (inputs != mask_token_id) & (inputs != original)).sum())
        / n_sel,
        "unchanged": float((selected & (inputs == original)).sum()) / n_sel,
    }


def plot_mlm_masking(tokens: Sequence[str], new_tokens: Sequence[str], outcomes: Sequence[str],
                     shares: dict[str, float] | None = None, per_row: int = 10) -> Figure:
    """Token boxes coloured by outcome (original above, model input below), and the shares."""
    if not len(tokens) == len(new_tokens) == len(outcomes):
        raise ValueError("tokens, new_tokens and outcomes must have the same length")
    rows = max(1, -(-len(tokens) // per_row))
    fig = Figure(figsize=(10, 1.1 * rows + (2.2 if shares else 0.4)), layout="constrained")
    axes = fig.subplots(2, 1, height_ratios=[1.1 * rows, 2.0]) if shares else [fig.add_subplot()]
    ax = axes[0]
    for k, (tok, new, outcome) in enumerate(zip(tokens, new_tokens, outcomes)):
        r, c = divmod(k, per_row)
        ax.add_patch(Rectangle((c, -r - 0.9), 0.95, 0.85, facecolor=OUTCOME_COLORS[outcome],
                               edgecolor="black", lw=0.6))
        ax.text(c + 0.47, -r - 0.3, textwrap.shorten(tok, 10, placeholder=".."), ha="center",
                va="center", fontsize=8)
        if outcome not in ("special", "not selected"):
            ax.text(c + 0.47, -r - 0.65, "-> " + textwrap.shorten(new, 9, placeholder=".."),
                    ha="center", va="center", fontsize=7, weight="bold")
    ax.set_xlim(-0.1, per_row)
    ax.set_ylim(-rows - 0.05, 0.05)
    ax.axis("off")
    handles = [Rectangle((0, 0), 1, 1, facecolor=OUTCOME_COLORS[o], edgecolor="black")
               for o in OUTCOMES]
    ax.legend(handles, OUTCOMES, ncol=5, fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, 1.25 if rows == 1 else 1.1), frameon=False)
    if shares:
        bar = axes[1]
        labels = ["selected\n(of non-special)", "[MASK]\n(of selected)", "random\n(of selected)",
                  "unchanged\n(of selected)"]
        measured = [shares["selected"], shares["[MASK]"], shares["random"], shares["unchanged"]]
        expected = [shares.get("expected_selected", 0.15), 0.8, 0.1, 0.1]
        bar.bar([i - 0.2 for i in range(4)], measured, 0.4, label="measured, 2,000 draws",
                color=["tab:grey", "tab:orange", "tab:red", "tab:green"])
        bar.bar([i + 0.2 for i in range(4)], expected, 0.4, label="the recipe", color="white",
                edgecolor="black", hatch="//")
        bar.set_xticks(range(4), labels, fontsize=8)
        bar.set_ylim(0, 1)
        bar.legend(fontsize=8)
        bar.grid(alpha=0.3, axis="y")
    return fig


def message_figure(text: str) -> Figure:
    """A small figure that shows ``text`` (what went wrong) in place of a plot."""
    fig = Figure(figsize=(9.5, 1.2))
    fig.text(0.01, 0.5, textwrap.fill(text, 110), va="center", fontsize=9, color="tab:red")
    return fig


def masking_example(sentence: str, mask_fn: Callable = mask_tokens,
                    vocab: WordVocab | None = None, seed: int = 0,
                    mlm_probability: float = 0.15, draws: int = 2000):
    """One masking of ``sentence`` by ``mask_fn``, and the outcome shares over ``draws``.

    Returns:
        ``(tokens, new_tokens, outcomes, shares)``: the original and the masked tokens of
        ``[CLS] sentence [SEP]``, :func:`masking_outcomes` of this draw, and
        :func:`outcome_shares` of ``draws`` more (with ``"expected_selected"``).
    """
    vocab = course_vocab() if vocab is None else vocab
    ids = pair_inputs(vocab.encode(sentence), None, len(vocab.tokenize(sentence)) + 2)["input_ids"]
    args = (vocab.special_ids, vocab.mask_id, vocab.vocab_size, mlm_probability)
    inputs, labels = mask_fn(ids[None], *args, generator=torch.Generator().manual_seed(seed))
    outcomes = masking_outcomes(ids, inputs[0], labels[0], vocab.special_ids, vocab.mask_id)
    many = ids[None].repeat(draws, 1)
    m_inputs, m_labels = mask_fn(many, *args, generator=torch.Generator().manual_seed(seed + 1))
    shares = outcome_shares(many, m_inputs, m_labels, vocab.special_ids, vocab.mask_id)
    shares["expected_selected"] = mlm_probability
    return ([vocab.itos[i] for i in ids.tolist()], [vocab.itos[i] for i in inputs[0].tolist()],
            outcomes, shares)


def mlm_masking_playground(sentence: str = DEFAULT_SENTENCE, vocab: WordVocab | None = None,
                           *, fns=None):
    """A sentence, a seed and a probability; shows what ``mask_tokens`` does to each token.

    Args:
        sentence: the initial text (words missing from the vocabulary become ``[UNK]``).
        vocab: default: the course corpus's vocabulary.
        fns: your own masking function in place of the toolkit's, called as
            ``mask_tokens(input_ids, special_ids, mask_token_id, vocab_size,
            mlm_probability, generator=...)`` and returning ``(inputs, labels)``:
            ``fns={"mask_tokens": mask_tokens}``. An error it raises on some setting is
            shown in place of the figure.
    """
    f = widget_functions("mlm_masking_playground", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("mlm_masking_playground")
    import ipywidgets as w

    vocab = course_vocab() if vocab is None else vocab
    controls = {
        "sentence": w.Text(style=LABEL_STYLE, value=sentence, description="sentence",
                           layout=w.Layout(width="70%")),
        "seed": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=50, description="seed"),
        "mlm_probability": w.FloatSlider(style=LABEL_STYLE, value=0.15, min=0.05, max=0.5,
                                         step=0.05, description="mlm_probability"),
    }
    last: dict[str, str] = {}

    def draw(sentence, seed, mlm_probability):
        try:
            tokens, new, outcomes, shares = masking_example(sentence or ".", f.mask_tokens,
                                                            vocab, seed, mlm_probability)
        except NotImplementedError:
            raise  # not written yet: live_figure says which exercise
        except Exception as exc:  # a student's function that fails on this setting
            last["note"] = ""
            return message_figure(f"your masking function raised {type(exc).__name__}: {exc}")
        last["note"] = (f"{sum(o not in ('special', 'not selected') for o in outcomes)} of "
                        f"{sum(o != 'special' for o in outcomes)} ordinary tokens selected "
                        "this time")
        return plot_mlm_masking(tokens, new, outcomes, shares)

    c = list(controls.values())
    return live_figure(controls, draw, lambda **_: last["note"], rows=[c[:1], c[1:]],
                       functions=f)
