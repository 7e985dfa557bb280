"""What the widget tests share: render a figure, find the parts of a built widget.

The fixtures ``interactive`` and ``headless`` are in ``conftest.py``; these are plain
functions, imported by the tests (``from widget_testing import render``).
"""

from __future__ import annotations

import ipywidgets as w
from matplotlib.figure import Figure

from toolkit.widgets.display import figure_to_png

PNG_MAGIC = b"\x89PNG"


def render(fig, *, dpi: int = 40, tight: bool = False) -> bytes:
    """``fig`` is a matplotlib Figure that renders to a PNG; returns the PNG."""
    assert isinstance(fig, Figure)
    png = figure_to_png(fig, dpi=dpi, tight=tight)
    assert png.startswith(PNG_MAGIC)
    return png


def walk(widget):
    """The widget and every widget inside it, depth first."""
    yield widget
    for child in getattr(widget, "children", ()):
        yield from walk(child)


def image_widget(widget) -> w.Image:
    """The one image inside ``widget``."""
    (image,) = [c for c in walk(widget) if isinstance(c, w.Image)]
    return image


def image_bytes(widget) -> bytes:
    """What the one image inside ``widget`` shows."""
    return bytes(image_widget(widget).value)


def control(widget, description):
    """The control inside ``widget`` labelled ``description``."""
    return next(c for c in walk(widget) if getattr(c, "description", None) == description)
