"""The MQAR experiment, measured: recall against the number of pairs, and the state it costs.

Draws what :func:`toolkit.hybrid.experiment.measure` returns: on the left each model's
recall at every number of key-value pairs, with chance (a guess among the values)
marked; on the right the numbers each model keeps per sequence to go on generating, against
the context length (:func:`toolkit.hybrid.model.state_numbers`): an attention layer's
cache grows with every token, a Mamba layer's state does not. The slider moves the
context length that the note reads out.
"""

from __future__ import annotations

from matplotlib.figure import Figure

from toolkit.hybrid.model import state_numbers
from toolkit.widgets.display import LABEL_STYLE, headless_placeholder, is_headless, live_figure

#: Context lengths the state panel spans (tokens).
CONTEXTS = tuple(2**k for k in range(4, 18))


def _colour(pattern: str) -> str:
    if "M" not in pattern:
        return "tab:blue"  # pure attention
    return "tab:orange" if "A" not in pattern else "tab:green"  # pure Mamba / hybrid


def _state(results: dict, pattern: str, seq_len: int) -> int:
    return state_numbers(pattern, seq_len, results["d_model"], results["d_state"])


def plot_recall(results: dict, seq_len: int = 4096) -> Figure:
    """Recall by number of pairs (left) and state per sequence by context length (right).

    Args:
        results: :func:`toolkit.hybrid.experiment.measure`'s dict.
        seq_len: the context length marked on the right.
    """
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be an int >= 1, got {seq_len!r}")
    fig = Figure(figsize=(11, 4.2), layout="constrained")
    ax_recall, ax_state = fig.subplots(1, 2)
    for pattern, recall in results["recall"].items():
        pairs = list(recall)
        ax_recall.plot(pairs, [recall[n] for n in pairs], "o-", color=_colour(pattern), lw=2,
                       label=f"{pattern} ({results['parameters'][pattern]:,} parameters)")
        ax_state.loglog(CONTEXTS, [_state(results, pattern, T) for T in CONTEXTS],
                        color=_colour(pattern), lw=2, label=pattern)
    chance = 2 / results["vocab_size"]
    ax_recall.axhline(chance, color="grey", ls=":", lw=1)
    ax_recall.text(ax_recall.get_xlim()[0], chance, " chance", va="bottom", fontsize=8)
    ax_recall.set_xscale("log", base=2)
    ax_recall.set(xlabel="key-value pairs in the sequence", ylabel="recall at the queries",
                  ylim=(0, 1.05), title="multi-query associative recall, equal size")
    ax_recall.legend(fontsize=8)
    ax_state.axvline(seq_len, color="grey", lw=1)
    ax_state.set(xlabel="context length (tokens)", ylabel="numbers kept per sequence",
                 title="what generating the next token needs")
    ax_state.legend(fontsize=8)
    return fig


def recall_explorer(results: dict):
    """The context length at which the models' states are compared."""
    if is_headless():
        return headless_placeholder("recall_explorer")
    import ipywidgets as w

    controls = {"seq_len": w.SelectionSlider(style=LABEL_STYLE, options=list(CONTEXTS),
                                             value=4096, description="context length")}

    def note(seq_len, **_):
        parts = ", ".join(f"<b>{p}</b> {_state(results, p, seq_len):,}"
                          for p in results["recall"])
        return f"Numbers kept per sequence after {seq_len:,} tokens: {parts}."

    def draw(**values):
        return plot_recall(results, **values)

    return live_figure(controls, draw, note, tight=True)
