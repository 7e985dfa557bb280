"""Who may attend to whom in each family: encoder, decoder and cross-attention patterns."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.masks import causal_mask, padding_mask
from toolkit.widgets.attention.heatmap import _labels
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

#: What the patterns are made of; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {"causal_mask": causal_mask, "padding_mask": padding_mask}

_FAMILY_PANELS = (
    ("encoder_self", "Encoder self-attention\n(bidirectional: BERT, encoder of T5)", "src", "src"),
    ("decoder_self", "Decoder self-attention\n(causal: GPT, decoder of T5)", "tgt", "tgt"),
    ("cross", "Cross-attention\n(decoder queries, encoder keys)", "tgt", "src"),
)


def _family_patterns(
    T_src: int, T_tgt: int, src_length: int | None = None, *, fns: dict | None = None
) -> dict[str, Tensor]:
    """:func:`toolkit.transformer.family_attention_patterns` made with the mask functions
    of ``fns`` (the student's ``causal_mask`` and ``padding_mask``, else the toolkit's).

    Returns:
        ``{"encoder_self": (T_src, T_src), "decoder_self": (T_tgt, T_tgt), "cross":
        (T_tgt, T_src)}``, bool, ``True`` = may attend.
    """
    f = widget_functions("plot_family_patterns", fns, TOOLKIT_FUNCTIONS)
    for name, value in (("T_src", T_src), ("T_tgt", T_tgt)):
        if not isinstance(value, int) or value <= 0:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")
    src_length = T_src if src_length is None else src_length
    if not 1 <= src_length <= T_src:
        raise ValueError(f"src_length must be in [1, T_src={T_src}], got {src_length}")
    src_keys = f.padding_mask(torch.tensor([src_length]), T_src)[0, 0, 0]  # (T_src,) real keys
    return {
        "encoder_self": src_keys.expand(T_src, T_src),  # every real key
        "decoder_self": f.causal_mask(T_tgt),  # j <= i
        "cross": src_keys.expand(T_tgt, T_src),  # every real source key
    }


def plot_family_patterns(
    T_src: int = 6,
    T_tgt: int = 4,
    src_length: int | None = None,
    *,
    src_tokens: Sequence[str] | None = None,
    tgt_tokens: Sequence[str] | None = None,
    fns: dict | None = None,
) -> Figure:
    """The three boolean attention patterns side by side (dark = may attend).

    Args:
        T_src, T_tgt: source and target lengths.
        src_length: real source tokens; the rest are padding (default: none).
        src_tokens, tgt_tokens: optional labels of lengths ``T_src`` / ``T_tgt``.
        fns: the student's ``causal_mask`` and ``padding_mask``, by name, in place of the
            toolkit's.

    Returns:
        a Figure with three panels, the patterns of
        :func:`toolkit.transformer.family_attention_patterns`.
    """
    patterns = _family_patterns(T_src, T_tgt, src_length, fns=fns)
    labels = {
        "src": _labels("src_tokens", src_tokens, T_src),
        "tgt": _labels("tgt_tokens", tgt_tokens, T_tgt),
    }
    fig = Figure(figsize=(11, 3.8), layout="constrained")
    axes = fig.subplots(1, 3)
    for ax, (key, title, rows, cols) in zip(axes, _FAMILY_PANELS):
        p = patterns[key]
        ax.imshow(p.float().numpy(), cmap="Blues", vmin=0, vmax=1.3)
        ax.set_xticks(range(p.size(1)), labels[cols], rotation=45, ha="right")
        ax.set_yticks(range(p.size(0)), labels[rows])
        ax.set_xlabel(f"key ({'source' if cols == 'src' else 'target'})")
        ax.set_ylabel(f"query ({'source' if rows == 'src' else 'target'})")
        ax.set_title(f"{title}\n{int(p.sum())} of {p.numel()} pairs", fontsize=9)
    fig.suptitle(
        "Dark = may attend. Encoder-only uses the left panel, decoder-only the "
        "middle one, encoder-decoder all three",
        fontsize=10,
    )
    return fig


def families_explorer(*, fns=None):
    """Sliders for source/target length and source padding over :func:`plot_family_patterns`.

    Args:
        fns: your own ``causal_mask`` and ``padding_mask`` in place of the toolkit's, e.g.
            ``fns={"causal_mask": causal_mask, "padding_mask": padding_mask}``.

    Returns:
        an ``ipywidgets.VBox`` (or an ``ipywidgets.HTML`` placeholder when headless).
    """
    f = widget_functions("families_explorer", fns, TOOLKIT_FUNCTIONS)
    if is_headless():
        return headless_placeholder("families_explorer")
    import ipywidgets as w

    controls = {
        "T_src": w.IntSlider(style=LABEL_STYLE, value=6, min=1, max=12, description="T_src"),
        "T_tgt": w.IntSlider(style=LABEL_STYLE, value=4, min=1, max=12, description="T_tgt"),
        "pad": w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=11, description="src padding"),
    }

    def sync_padding_limit(_change=None):
        controls["pad"].max = controls["T_src"].value - 1  # keep one real source token

    controls["T_src"].observe(sync_padding_limit, names="value")  # before the redraw
    sync_padding_limit()

    def draw(T_src, T_tgt, pad):
        return plot_family_patterns(T_src, T_tgt, T_src - min(pad, T_src - 1), fns=fns)

    return live_figure(controls, draw, functions=f)
