"""Beam search, step by step: the beams, their scores, and what the length penalty does."""

from __future__ import annotations

import torch
from matplotlib.figure import Figure

from toolkit.seq2seq import beam_search_one
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

TOOLKIT_FUNCTIONS = {"beam_search_one": beam_search_one}


@torch.no_grad()
def beam_steps(model, src, beam_width: int, max_new_tokens: int, length_penalty: float,
               *, fns=None) -> list[list[tuple[float, list[int]]]]:
    """The hypotheses a beam search holds after each step.

    Step ``t``'s list is what the search returns when stopped at ``t + 1`` tokens: its
    finished hypotheses ``(normalised score, tokens)``, best first (so the beams still
    running at ``t`` show as finished by the length limit).
    """
    f = widget_functions("beam_steps", fns, TOOLKIT_FUNCTIONS)
    return [[(score, tokens.tolist()) for score, tokens in
             f.beam_search_one(model, src, beam_width, t, length_penalty)]
            for t in range(1, max_new_tokens + 1)]


def plot_beams(steps, tokenizer, title: str = "") -> Figure:
    """One column per step; each hypothesis as text with its normalised score."""
    fig = Figure(figsize=(3.2 * min(len(steps), 5), 0.45 * max(map(len, steps)) + 1.2),
                 layout="constrained")
    shown = steps[-5:]  # the last five steps
    for col, hyps in enumerate(shown):
        ax = fig.add_subplot(1, len(shown), col + 1)
        ax.axis("off")
        ax.set_title(f"stopped at {len(steps) - len(shown) + col + 1} tokens", fontsize=8)
        for row, (score, tokens) in enumerate(hyps):
            words = " ".join(tokenizer.token_str(i) for i in tokens)
            ax.text(0, 1 - 0.12 * row, f"{score:7.3f}  {words}", fontsize=8, family="monospace",
                    color="tab:blue" if row == 0 else "black", va="top", transform=ax.transAxes)
    fig.suptitle(title, fontsize=9)
    return fig


def beam_explorer(model, tokenizer, text: str = "digits: seven thousand twelve", *, fns=None):
    """Beam width, length penalty and the hypotheses a beam search keeps, step by step.

    Args:
        model: a trained encoder-decoder.
        tokenizer: its tokenizer.
        text: the input; edit it in the box.
        fns: your ``beam_search_one`` in place of the toolkit's.

    Returns:
        an ``ipywidgets.VBox`` (a placeholder when headless).
    """
    f = widget_functions("beam_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("beam_explorer")
    import ipywidgets as w

    model.eval()
    controls = {
        "text": w.Text(value=text, description="input"),
        "beam_width": w.IntSlider(style=LABEL_STYLE, value=3, min=1, max=8, description="beams"),
        "length_penalty": w.FloatSlider(style=LABEL_STYLE, value=1.0, min=-2.0, max=3.0,
                                        step=0.25, description="length penalty"),
        "steps": w.IntSlider(style=LABEL_STYLE, value=8, min=1, max=16, description="tokens"),
    }

    def draw(text, beam_width, length_penalty, steps):
        src = torch.tensor([tokenizer.encode(text)])
        hyps = beam_steps(model, src, beam_width, steps, length_penalty,
                          fns={"beam_search_one": f.beam_search_one})
        return plot_beams(hyps, tokenizer, f"{beam_width} beams, score = sum log p / "
                          f"len^{length_penalty:g}; best in blue")

    def note(**_):
        return ("A positive length penalty favours longer hypotheses, a negative one shorter "
                "ones; with width 1 the search is greedy decoding.")

    return live_figure(controls, draw, note, functions=f)
