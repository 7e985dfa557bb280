"""How every course widget draws: a PNG from matplotlib, redrawn as controls move.

Widgets render figures with the Agg backend into PNG bytes shown by an
``ipywidgets.Image``, so they need no display server and no network. When the
autograder executes a notebook it sets ``TOOLKIT_HEADLESS=1``: builders then return
a one-line placeholder instead of drawing, which keeps grading fast.

:func:`live_figure` is the loop every builder shares: controls in, a figure redrawn
whenever one of them moves.
"""

from __future__ import annotations

import io
import os

from matplotlib.figure import Figure

HEADLESS_ENV = "TOOLKIT_HEADLESS"

#: Give control labels the room they need ("temperature", "top-k (0 = off)").
LABEL_STYLE = {"description_width": "initial"}


def is_headless() -> bool:
    """``True`` when ``TOOLKIT_HEADLESS`` is set to something other than ``""``/``0``/``false``."""
    return os.environ.get(HEADLESS_ENV, "").strip().lower() not in ("", "0", "false", "no")


def headless_placeholder(name: str):
    """The lightweight stand-in a builder returns while grading."""
    import ipywidgets as w

    return w.HTML(
        f"<i>{name}: interactive widgets are skipped while grading ({HEADLESS_ENV}=1).</i>"
    )


def figure_to_png(fig: Figure, dpi: int = 110, tight: bool = False) -> bytes:
    """Render a Figure to PNG bytes with the Agg renderer (no display needed).

    110 dpi keeps the image sharp when the notebook stretches it to the cell width.
    """
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight" if tight else None)
    return buf.getvalue()


def live_figure(controls: dict, draw, note=None, *, rows=None, tight: bool = False):
    """The redraw loop every builder shares: an image redrawn whenever a control moves.

    Args:
        controls: ``{keyword: widget}``; the widgets' current values are passed to
            ``draw`` (and ``note``) as keyword arguments under those names.
        draw: ``draw(**values) -> Figure``, the plot for the current values.
        note: optional ``note(**values) -> str``, HTML shown under the image.
        rows: the widgets above the image, row by row (each row is laid out as an
            ``HBox``; rows may hold widgets that are not controls, such as a play
            button). Default: one row with every control.
        tight: crop the PNG to what is drawn.

    Returns:
        ``ipywidgets.VBox`` of the rows, the image and (with ``note``) the note. The
        figure is drawn once before it returns.
    """
    import ipywidgets as w

    image = w.Image(format="png")
    text = w.HTML()

    def redraw(_change=None):
        values = {key: control.value for key, control in controls.items()}
        image.value = figure_to_png(draw(**values), tight=tight)
        if note is not None:
            text.value = note(**values)

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    rows = [list(controls.values())] if rows is None else rows
    return w.VBox([*(w.HBox(list(row)) for row in rows), image, *([text] if note else [])])
