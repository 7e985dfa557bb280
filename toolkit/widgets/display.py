"""How every course widget draws: a PNG from matplotlib, or nothing while grading.

Widgets render figures with the Agg backend into PNG bytes shown by an
``ipywidgets.Image``, so they need no display server and no network. When the
autograder executes a notebook it sets ``TOOLKIT_HEADLESS=1``: builders then return
a one-line placeholder instead of drawing, which keeps grading fast.
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
