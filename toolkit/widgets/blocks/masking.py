"""Widgets for BERT's objective and for distillation.

What each one is for
--------------------
* :func:`mlm_masking_playground`: a sentence as ``[CLS] ... [SEP]``, masked by a masking
  function (yours or the toolkit's). Each token is a box: grey if it can never be
  chosen (a special token), white if it was not selected this time, and for the
  selected ones what it became: ``[MASK]`` (orange), a random word (red), or itself
  (green). The lower panel counts the outcomes over 2,000 draws of the same sentence
  against what the recipe promises: 15% selected, of those 80 / 10 / 10.
* :func:`temperature_explorer`: a teacher's and a student's distributions over a few
  words, softened by the temperature ``T``. Low ``T`` leaves the teacher's top word
  alone; high ``T`` reveals the ranking of the others, the "dark knowledge" the student
  learns from. The right panel shows ``KL`` and ``T^2 KL`` against ``T``: without the
  ``T^2`` the soft loss (and its gradient) fades as ``T`` grows.

Pure ``plot_*`` functions return ``matplotlib.figure.Figure`` objects; builders return
ipywidgets (a placeholder when ``TOOLKIT_HEADLESS=1``).
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
from toolkit.distill import soft_target_loss
from toolkit.mlm import IGNORE_INDEX, WordVocab, mask_tokens, pair_inputs
from toolkit.widgets.display import LABEL_STYLE, figure_to_png, headless_placeholder, is_headless

OUTCOMES = ("special", "not selected", "[MASK]", "random", "unchanged")
OUTCOME_COLORS = {"special": "lightgrey", "not selected": "white", "[MASK]": "tab:orange",
                  "random": "tab:red", "unchanged": "tab:green"}
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


def _masking_view(sentence: str, mask_fn: Callable, vocab: WordVocab, seed: int,
                  mlm_probability: float):
    ids = pair_inputs(vocab.encode(sentence), None, len(vocab.tokenize(sentence)) + 2)["input_ids"]
    args = (vocab.special_ids, vocab.mask_id, vocab.vocab_size, mlm_probability)
    inputs, labels = mask_fn(ids[None], *args, generator=torch.Generator().manual_seed(seed))
    outcomes = masking_outcomes(ids, inputs[0], labels[0], vocab.special_ids, vocab.mask_id)
    many = ids[None].repeat(2000, 1)
    m_inputs, m_labels = mask_fn(many, *args, generator=torch.Generator().manual_seed(seed + 1))
    shares = outcome_shares(many, m_inputs, m_labels, vocab.special_ids, vocab.mask_id)
    shares["expected_selected"] = mlm_probability
    return ([vocab.itos[i] for i in ids.tolist()], [vocab.itos[i] for i in inputs[0].tolist()],
            outcomes, shares)


def mlm_masking_playground(mask_fn: Callable = mask_tokens, sentence: str = DEFAULT_SENTENCE,
                           vocab: WordVocab | None = None):
    """A sentence, a seed and a probability; shows what ``mask_fn`` does to each token.

    Args:
        mask_fn: called as ``mask_fn(input_ids, special_ids, mask_token_id, vocab_size,
            mlm_probability, generator=...)``, returning ``(inputs, labels)``: yours, or
            :func:`toolkit.mlm.mask_tokens`.
        sentence: the initial text (words missing from the vocabulary become ``[UNK]``).
        vocab: default: the course corpus's vocabulary.
    """
    if is_headless():
        return headless_placeholder("mlm_masking_playground")
    import ipywidgets as w

    vocab = course_vocab() if vocab is None else vocab
    text = w.Text(style=LABEL_STYLE, value=sentence, description="sentence",
                  layout=w.Layout(width="70%"))
    seed = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=50, description="seed")
    prob = w.FloatSlider(style=LABEL_STYLE, value=0.15, min=0.05, max=0.5, step=0.05,
                         description="mlm_probability")
    image = w.Image(format="png")
    note = w.HTML()

    def redraw(_change=None):
        try:
            tokens, new, outcomes, shares = _masking_view(text.value or ".", mask_fn, vocab,
                                                          seed.value, prob.value)
        except Exception as exc:  # a student's function that raises: say so, keep the widget
            note.value = f"<b>your masking function raised</b> {type(exc).__name__}: {exc}"
            return
        note.value = f"{sum(o not in ('special', 'not selected') for o in outcomes)} of " \
                     f"{sum(o != 'special' for o in outcomes)} ordinary tokens selected this time"
        image.value = figure_to_png(plot_mlm_masking(tokens, new, outcomes, shares))

    for control in (text, seed, prob):
        control.observe(redraw, names="value")
    redraw()
    return w.VBox([text, w.HBox([seed, prob]), note, image])


#: A made-up next-word example: "the cat sat on the ___".
EXAMPLE_WORDS = ("mat", "floor", "sofa", "roof", "table", "moon", "idea", "seven")
TEACHER_LOGITS = (6.0, 4.6, 4.1, 3.0, 2.7, 0.5, -1.0, -2.0)
STUDENT_LOGITS = (3.0, 3.2, 1.0, 2.5, 0.5, 1.5, 0.0, -0.5)


def plot_soft_targets(teacher_logits, student_logits, temperature: float,
                      words: Sequence[str] = EXAMPLE_WORDS,
                      loss_fn: Callable = soft_target_loss) -> Figure:
    """Teacher and student distributions at ``T``, and KL / T^2 KL against ``T``."""
    z_t = torch.as_tensor(teacher_logits, dtype=torch.float64)
    z_s = torch.as_tensor(student_logits, dtype=torch.float64)
    if z_t.shape != z_s.shape or z_t.dim() != 1 or len(words) != len(z_t):
        raise ValueError("teacher_logits, student_logits and words must be 1-D of one length")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    fig = Figure(figsize=(10, 3.6), layout="constrained")
    ax_p, ax_l = fig.subplots(1, 2, width_ratios=[1.4, 1])
    n = len(words)
    for offset, (z, label, color) in enumerate(((z_t, "teacher", "tab:blue"),
                                                (z_s, "student", "tab:orange"))):
        ax_p.bar([i + 0.4 * offset - 0.2 for i in range(n)],
                 torch.softmax(z / temperature, -1).numpy(), 0.4,
                 label=f"{label}, T = {temperature:.2g}", color=color)
    ax_p.plot(range(n), torch.softmax(z_t, -1).numpy(), "k_", ms=14, label="teacher, T = 1")
    ax_p.set_xticks(range(n), words, rotation=30)
    ax_p.set_ylabel("probability")
    ax_p.set_title('"the cat sat on the ___"')
    ax_p.legend(fontsize=8)
    temps = torch.logspace(-0.3, 1.3, 40).tolist()
    with_t2 = [float(loss_fn(z_s[None], z_t[None], t)) for t in temps]
    without = [v / t**2 for v, t in zip(with_t2, temps)]
    ax_l.plot(temps, with_t2, label="T^2 KL (the soft loss)")
    ax_l.plot(temps, without, "--", label="KL alone")
    current = float(loss_fn(z_s[None], z_t[None], temperature))
    ax_l.plot([temperature], [current], "ko")
    ax_l.set_xscale("log")
    ax_l.set_xlabel("temperature T")
    ax_l.set_title(f"soft loss at T = {temperature:.2g}: {current:.3f}")
    ax_l.grid(alpha=0.3)
    ax_l.legend(fontsize=8)
    return fig


def temperature_explorer(loss_fn: Callable = soft_target_loss, teacher_logits=TEACHER_LOGITS,
                         student_logits=STUDENT_LOGITS, words: Sequence[str] = EXAMPLE_WORDS):
    """A temperature slider over :func:`plot_soft_targets`.

    Args:
        loss_fn: ``loss_fn(student_logits, teacher_logits, T)`` returning ``T^2 KL``:
            yours, or :func:`toolkit.distill.soft_target_loss`.
    """
    if is_headless():
        return headless_placeholder("temperature_explorer")
    import ipywidgets as w

    temperature = w.FloatLogSlider(style=LABEL_STYLE, value=1.0, base=10, min=-0.3, max=1.3,
                                   step=0.05, description="temperature T")
    image = w.Image(format="png")
    note = w.HTML()

    def redraw(_change=None):
        try:
            fig = plot_soft_targets(teacher_logits, student_logits, temperature.value, words,
                                    loss_fn)
        except Exception as exc:
            note.value = f"<b>your loss function raised</b> {type(exc).__name__}: {exc}"
            return
        note.value = ""
        image.value = figure_to_png(fig)

    temperature.observe(redraw, names="value")
    redraw()
    return w.VBox([temperature, note, image])
