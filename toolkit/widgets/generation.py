"""Widgets for the capstone: watching a model train, and watching it choose tokens.

What each one is for
--------------------
* :class:`LiveLossPlot`: a callback for :func:`toolkit.train.train` that redraws
  the training and validation loss every few steps while the cell runs. The
  dashed line is ``ln V``, the loss of a uniform guess: a model starts there
  and should quickly fall below it. A validation curve that turns up while the
  training curve keeps falling is over-fitting.
* :func:`sampling_playground`: the next-token distribution of a prompt under
  temperature, top-k and top-p (applied in that order). Bars of tokens the
  filters cut are grey; the dots show the renormalised distribution that is
  actually sampled. Push ``p`` towards 0: the top token always survives.
* :func:`side_by_side_generation`: the same prompt, seed and sampling settings
  for two models (e.g. the classic and the modern recipe after equal steps),
  text shown in two columns.

Every builder has a pure function (``plot_*``) that returns a
``matplotlib.figure.Figure`` without touching pyplot's global state, so tests can
render it with the Agg backend. Builders show PNGs in an ``ipywidgets.Image`` and
need no network. With ``TOOLKIT_HEADLESS=1`` (set by the autograder) they return
a small ``ipywidgets.HTML`` placeholder and draw nothing.
"""

from __future__ import annotations

import html
import math
import textwrap
from collections.abc import Callable, Mapping, Sequence

import torch
from matplotlib.figure import Figure
from torch import Tensor

from toolkit.generate import apply_temperature, generate, top_k_filter, top_p_filter
from toolkit.widgets.display import HEADLESS_ENV, LABEL_STYLE, figure_to_png, is_headless  # noqa: F401
from toolkit.widgets.display import headless_placeholder as _placeholder

KEPT_COLOR, CUT_COLOR = "tab:blue", "lightgrey"


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _history_fields(history) -> dict[str, list]:
    """Accept a :class:`toolkit.train.TrainHistory` or a dict with the same keys."""
    get = history.get if isinstance(history, Mapping) else lambda k, d=None: getattr(history, k, d)
    out = {k: list(get(k, []) or []) for k in ("step", "train_loss", "val_step", "val_loss")}
    if len(out["step"]) != len(out["train_loss"]) or len(out["val_step"]) != len(out["val_loss"]):
        raise ValueError("history: step/train_loss and val_step/val_loss must have equal lengths")
    return out


# ---------------------------------------------------------------------------
# Loss curves
# ---------------------------------------------------------------------------


def plot_loss_curves(
    histories,
    *,
    uniform_loss: float | None = None,
    title: str = "Next-token loss",
    ax=None,
) -> Figure:
    """Training (line) and validation (markers) loss against the step.

    Args:
        histories: one history (``TrainHistory`` or dict with ``step``, ``train_loss``,
            ``val_step``, ``val_loss``) or a mapping ``label -> history`` to overlay runs.
        uniform_loss: draw this level (``ln V``) as a dashed reference line.
        title: axes title.
        ax: draw into these axes instead of a new figure.

    Returns:
        the ``Figure``.
    """
    if not isinstance(histories, Mapping) or "train_loss" in histories:
        histories = {"": histories}
    if ax is None:
        fig = Figure(figsize=(6.0, 3.6), layout="constrained")
        ax = fig.add_subplot()
    else:
        fig = ax.figure
    colors = ["tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple"]
    for i, (label, history) in enumerate(histories.items()):
        h = _history_fields(history)
        color = colors[i % len(colors)]
        prefix = f"{label} " if label else ""
        ax.plot(h["step"], h["train_loss"], color=color, alpha=0.6, lw=1, label=f"{prefix}train")
        if h["val_loss"]:
            ax.plot(
                h["val_step"],
                h["val_loss"],
                "o-",
                color=color,
                ms=4,
                lw=1.5,
                label=f"{prefix}validation",
            )
    if uniform_loss is not None:
        ax.axhline(uniform_loss, color="grey", ls="--", lw=1, label="uniform guess (ln V)")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    return fig


class LiveLossPlot:
    """Training callback that redraws the loss curves every ``every`` steps.

    Usage in a notebook::

        live = LiveLossPlot(every=10, vocab_size=256)
        display(live.widget)
        train(model, corpus.train, corpus.val, cfg, callback=live)

    ``live.figure`` always holds the latest plot (also when headless, where no widget
    is drawn, which is how the tests use it).

    Args:
        every: redraw period in steps (the last evaluation is always drawn).
        vocab_size: if given, draw the uniform-guess level ``ln V``.
        title: plot title.
    """

    def __init__(self, every: int = 10, vocab_size: int | None = None, title: str = "Training"):
        if not isinstance(every, int) or every < 1:
            raise ValueError(f"every must be an int >= 1, got {every!r}")
        self.every, self.title = every, title
        self.uniform_loss = math.log(vocab_size) if vocab_size else None
        self.figure = Figure(figsize=(6.0, 3.6), layout="constrained")
        self.ax = self.figure.add_subplot()
        self.n_redraws = 0
        self._image = None

    @property
    def widget(self):
        """An ``ipywidgets.Image`` that shows the live plot (a placeholder when headless)."""
        if is_headless():
            return _placeholder("LiveLossPlot")
        if self._image is None:
            import ipywidgets as w

            self._image = w.Image(format="png")
        return self._image

    def __call__(self, step: int, history) -> None:
        h = _history_fields(history)
        just_evaluated = bool(h["val_step"]) and h["val_step"][-1] == step
        if (step + 1) % self.every and not just_evaluated:
            return
        self.ax.clear()
        plot_loss_curves(
            history,
            uniform_loss=self.uniform_loss,
            title=f"{self.title}: step {step + 1}",
            ax=self.ax,
        )
        self.n_redraws += 1
        if self._image is not None:
            self._image.value = figure_to_png(self.figure)


# ---------------------------------------------------------------------------
# Sampling playground
# ---------------------------------------------------------------------------


def next_token_distribution(
    logits: Tensor,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> dict[str, Tensor]:
    """What the samplers do to one distribution.

    Args:
        logits: ``(V,)`` next-token logits.
        temperature, top_k, top_p: as in :func:`toolkit.generate.sample_next_token`
            (``top_k`` of ``None``/0 and ``top_p`` of ``None``/1 mean off).

    Returns:
        dict of ``(V,)`` tensors: ``probs`` (softmax after temperature, before the
        filters), ``kept`` (bool: survives top-k then top-p) and ``final`` (the
        renormalised distribution that is sampled; 0 where cut).
    """
    logits = torch.as_tensor(logits).detach().float().cpu()
    if logits.dim() != 1:
        raise ValueError(f"logits must be a 1-D (V,) vector, got shape {tuple(logits.shape)}")
    scaled = apply_temperature(logits, temperature)  # z / t
    filtered = scaled
    if top_k:
        filtered = top_k_filter(filtered, int(top_k))
    if top_p is not None and top_p < 1.0:
        filtered = top_p_filter(filtered, float(top_p))
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
    """
    if n_show < 1:
        raise ValueError(f"n_show must be >= 1, got {n_show}")
    d = next_token_distribution(logits, temperature, top_k, top_p)
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


def sampling_playground(model=None, tokenizer=None, prompt: str = "def ", logits=None):
    """Sliders for temperature, top-k and top-p over one next-token distribution.

    Args:
        model, tokenizer: a trained :class:`toolkit.models.GPT` and its tokenizer;
            the prompt box then recomputes the logits.
        prompt: initial prompt.
        logits: alternatively a fixed ``(V,)`` logit vector (no model needed).

    Returns:
        an ``ipywidgets.VBox`` (or a placeholder when headless).
    """
    if model is None and logits is None:
        raise ValueError("pass a model and tokenizer, or logits")
    if model is not None and tokenizer is None:
        raise ValueError("tokenizer is needed with a model")
    if is_headless():
        return _placeholder("sampling_playground")
    import ipywidgets as w

    V = model.config.vocab_size if model is not None else torch.as_tensor(logits).numel()
    labels = getattr(tokenizer, "token_str", None)
    text = w.Text(value=prompt, description="prompt", disabled=model is None)
    temperature = w.FloatLogSlider(
        style=LABEL_STYLE,
        value=1.0,
        base=10,
        min=-1.3,
        max=0.7,
        step=0.02,
        description="temperature",
    )
    top_k = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=V, description="top-k (0=off)")
    top_p = w.FloatSlider(
        style=LABEL_STYLE, value=1.0, min=0.01, max=1.0, step=0.01, description="top-p"
    )
    image = w.Image(format="png")
    state = {"logits": None if logits is None else torch.as_tensor(logits).float()}

    def recompute(_change=None):
        if model is not None:
            state["logits"] = _prompt_logits(model, tokenizer, text.value)
        redraw()

    def redraw(_change=None):
        fig = plot_next_token_distribution(
            state["logits"], temperature.value, top_k.value, top_p.value, labels=labels
        )
        image.value = figure_to_png(fig)

    text.observe(recompute, names="value")
    for control in (temperature, top_k, top_p):
        control.observe(redraw, names="value")
    recompute()
    note = w.HTML("Order: temperature, then top-k, then top-p. The top token is never cut.")
    return w.VBox([text, w.HBox([temperature, top_k, top_p]), image, note])


# ---------------------------------------------------------------------------
# Two models side by side
# ---------------------------------------------------------------------------


def compare_generations(
    models: Mapping[str, torch.nn.Module],
    tokenizer,
    prompt: str,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
) -> dict[str, str]:
    """Continue ``prompt`` with each model, same settings and seed; ``label -> text``."""
    if not models:
        raise ValueError("models must contain at least one model")
    out = {}
    for label, model in models.items():
        ids = (tokenizer.encode(prompt) or [0])[-(model.config.max_seq_len - 1) :]
        ids = torch.tensor([ids])
        n = min(max_new_tokens, model.config.max_seq_len - ids.size(1))
        generator = torch.Generator().manual_seed(seed)
        seq = generate(model, ids, max(n, 0), temperature, top_k, top_p, generator)
        out[label] = tokenizer.decode(seq[0, ids.size(1) :])
    return out


def plot_side_by_side(texts: Mapping[str, str], prompt: str = "", width: int = 48) -> Figure:
    """Generated texts in columns (monospace, wrapped at ``width`` characters)."""
    if not texts:
        raise ValueError("texts must contain at least one entry")
    fig = Figure(figsize=(4.2 * len(texts), 5.0), layout="constrained")
    axes = fig.subplots(1, len(texts), squeeze=False)[0]
    for ax, (label, text) in zip(axes, texts.items()):
        lines = []
        for line in (prompt + text).splitlines()[:40]:
            lines.extend(textwrap.wrap(line.expandtabs(4), width, replace_whitespace=False) or [""])
        ax.text(
            0.0,
            1.0,
            "\n".join(lines[:40]),
            family="monospace",
            fontsize=7,
            va="top",
            transform=ax.transAxes,
        )
        ax.set_title(label)
        ax.set_axis_off()
    return fig


def side_by_side_generation(
    models: Mapping[str, torch.nn.Module],
    tokenizer,
    prompt: str = "def ",
    max_new_tokens: int = 200,
):
    """Generate from two (or more) models with shared prompt, seed and sampling settings.

    Returns:
        an ``ipywidgets.VBox`` (or a placeholder when headless).
    """
    if not models:
        raise ValueError("models must contain at least one model")
    if is_headless():
        return _placeholder("side_by_side_generation")
    import ipywidgets as w

    text = w.Text(value=prompt, description="prompt")
    temperature = w.FloatSlider(
        style=LABEL_STYLE, value=0.8, min=0.05, max=2.0, step=0.05, description="temperature"
    )
    top_k = w.IntSlider(style=LABEL_STYLE, value=0, min=0, max=100, description="top-k (0=off)")
    seed = w.IntText(value=0, description="seed")
    button = w.Button(description="Generate")
    columns = w.HTML()

    def run(_button=None):
        texts = compare_generations(
            models,
            tokenizer,
            text.value,
            max_new_tokens,
            temperature.value,
            top_k.value or None,
            seed=seed.value,
        )
        cells = "".join(
            f"<td style='vertical-align:top;padding:4px'><b>{html.escape(label)}</b>"
            f"<pre style='white-space:pre-wrap'>{html.escape(text.value + t)}</pre></td>"
            for label, t in texts.items()
        )
        columns.value = f"<table style='width:100%'><tr>{cells}</tr></table>"

    button.on_click(run)
    run()
    return w.VBox([w.HBox([text, temperature, top_k, seed, button]), columns])
