"""Watching a model choose a token: temperature, top-k and top-p on one distribution."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.generate import apply_temperature, top_k_filter, top_p_filter
from toolkit.widgets.display import (
    LABEL_STYLE,
    headless_placeholder,
    is_headless,
    live_figure,
    widget_functions,
)

KEPT_COLOR, CUT_COLOR = "tab:blue", "lightgrey"

#: The samplers' pieces; a student's own replace them through ``fns``.
TOOLKIT_FUNCTIONS = {
    "apply_temperature": apply_temperature,
    "top_k_filter": top_k_filter,
    "top_p_filter": top_p_filter,
}


def next_token_distribution(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    fns: dict | None = None,
) -> dict[str, Tensor]:
    """What the samplers do to one distribution.

    Args:
        logits: ``(V,)`` next-token logits.
        temperature, top_k, top_p: as in :func:`toolkit.generate.sample_next_token`
            (``top_k`` of ``None``/0 and ``top_p`` of ``None``/1 mean off).
        fns: the student's ``apply_temperature``, ``top_k_filter`` or ``top_p_filter``,
            by name, in place of the toolkit's.

    Returns:
        dict of ``(V,)`` tensors: ``probs`` (softmax after temperature, before the
        filters), ``kept`` (bool: survives top-k then top-p) and ``final`` (the
        renormalised distribution that is sampled; 0 where cut).
    """
    f = widget_functions("next_token_distribution", fns, TOOLKIT_FUNCTIONS)
    logits = torch.as_tensor(logits).detach().float().cpu()
    if logits.dim() != 1:
        raise ValueError(f"logits must be a 1-D (V,) vector, got shape {tuple(logits.shape)}")
    scaled = f.apply_temperature(logits, temperature)  # z / t
    filtered = scaled
    if top_k:
        filtered = f.top_k_filter(filtered, int(top_k))
    if top_p is not None and top_p < 1.0:
        filtered = f.top_p_filter(filtered, float(top_p))
    return {
        "probs": torch.softmax(scaled, dim=-1),
        "kept": torch.isfinite(filtered),
        "final": torch.softmax(filtered, dim=-1),
    }


def _token_labels(labels, V: int) -> Callable[[int], str]:
    if labels is None:
        return str
    if callable(labels):
        return labels
    labels = list(labels)
    if len(labels) != V:
        raise ValueError(f"labels has {len(labels)} entries, expected V = {V}")
    return lambda i: str(labels[i])


def _printable(s: str) -> str:
    """A tick label that shows whitespace and control characters."""
    if s == " ":
        return "sp"
    return s if s.isprintable() and s.strip() else repr(s)[1:-1]


def plot_next_token_distribution(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    *,
    labels: Sequence[str] | Callable[[int], str] | None = None,
    n_show: int = 20,
    ax=None,
    fns: dict | None = None,
) -> Figure:
    """Bar chart of the ``n_show`` most probable next tokens.

    Bars: probability after the temperature (blue = kept, grey = cut by top-k/top-p).
    Dots: the renormalised probability that is actually sampled.

    Args:
        logits: ``(V,)`` next-token logits.
        temperature, top_k, top_p: see :func:`next_token_distribution`.
        labels: token names, a list of ``V`` strings or a function ``id -> str``.
        n_show: how many of the most probable tokens to draw.
        ax: draw into these axes instead of a new figure.
        fns: see :func:`next_token_distribution`.
    """
    if n_show < 1:
        raise ValueError(f"n_show must be >= 1, got {n_show}")
    d = next_token_distribution(logits, temperature, top_k, top_p, fns=fns)
    V = d["probs"].numel()
    name = _token_labels(labels, V)
    order = torch.sort(d["probs"], descending=True, stable=True).indices[: min(n_show, V)]
    xs = list(range(len(order)))
    if ax is None:
        fig = Figure(figsize=(max(5.0, 0.35 * len(xs) + 1.5), 3.6), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    kept = d["kept"][order].tolist()
    ax.bar(
        xs,
        d["probs"][order].tolist(),
        color=[KEPT_COLOR if k else CUT_COLOR for k in kept],
        edgecolor="black",
        lw=0.5,
        label="after temperature (grey = cut)",
    )
    ax.plot(
        xs, d["final"][order].tolist(), "o", color="tab:red", ms=4, label="sampled (renormalised)"
    )
    ax.set_xticks(xs, [_printable(name(int(i))) for i in order], rotation=60, fontsize=8)
    ax.set_ylabel("probability")
    n_kept = int(d["kept"].sum())
    mass = float(d["probs"][d["kept"]].sum())
    ax.set_title(
        f"t = {temperature:.2g}, top-k = {top_k or 'off'}, top-p = {top_p or 'off'}: "
        f"{n_kept}/{V} tokens kept, {mass:.0%} of the mass",
        fontsize=9,
    )
    ax.set_ylim(0, max(1e-3, float(d["final"].max()), float(d["probs"].max())) * 1.1)
    ax.legend(fontsize=8)
    return fig


def _prompt_logits(model, tokenizer, prompt: str) -> Tensor:
    ids = tokenizer.encode(prompt) or [0]
    ids = ids[-model.config.max_seq_len :]
    was_training = model.training
    model.eval()
    with torch.no_grad():
        logits, _ = model(torch.tensor([ids]))
    model.train(was_training)
    return logits[0, -1]


def sampling_playground(
    model=None, tokenizer=None, prompt: str = "def ", logits=None, *, fns=None
):
    """Sliders for temperature, top-k and top-p over one next-token distribution.

    Args:
        model, tokenizer: a trained :class:`toolkit.models.GPT` and its tokenizer;
            the prompt box then recomputes the logits.
        prompt: initial prompt.
        logits: alternatively a fixed ``(V,)`` logit vector (no model needed).
        fns: your own ``apply_temperature``, ``top_k_filter`` and ``top_p_filter`` in
            place of the toolkit's, e.g. ``fns={"top_p_filter": top_p_filter}``.

    Returns:
        an ``ipywidgets.VBox`` (or a placeholder when headless).
    """
    f = widget_functions("sampling_playground", fns, TOOLKIT_FUNCTIONS)
    if model is None and logits is None:
        raise ValueError("pass a model and tokenizer, or logits")
    if model is not None and tokenizer is None:
        raise ValueError("tokenizer is needed with a model")
    if is_headless():
        return headless_placeholder("sampling_playground")
    import ipywidgets as w

    V = model.config.vocab_size if model is not None else torch.as_tensor(logits).numel()
    labels = getattr(tokenizer, "token_str", None)
    controls = {
        "prompt": w.Text(value=prompt, description="prompt", disabled=model is None),
        "temperature": w.FloatLogSlider(
            style=LABEL_STYLE,
            value=1.0,
            base=10,
            min=-1.3,
            max=0.7,
            step=0.02,
            description="temperature",
        ),
        "top_k": w.IntSlider(
            style=LABEL_STYLE, value=0, min=0, max=V, description="top-k (0=off)"
        ),
        "top_p": w.FloatSlider(
            style=LABEL_STYLE, value=1.0, min=0.01, max=1.0, step=0.01, description="top-p"
        ),
    }
    fixed = None if logits is None else torch.as_tensor(logits).float()
    last = {"prompt": None, "logits": None}  # the model runs only when the prompt changes

    def draw(prompt, temperature, top_k, top_p):
        if fixed is not None:
            z = fixed
        else:
            if last["prompt"] != prompt:
                last.update(prompt=prompt, logits=_prompt_logits(model, tokenizer, prompt))
            z = last["logits"]
        return plot_next_token_distribution(z, temperature, top_k, top_p, labels=labels, fns=fns)

    def note(**_):
        return "Order: temperature, then top-k, then top-p. The top token is never cut."

    c = list(controls.values())
    return live_figure(controls, draw, note, rows=[c[:1], c[1:]], functions=f)
