"""How every course widget draws: a PNG from matplotlib, redrawn as controls move.

Widgets render figures with the Agg backend into PNG bytes shown by an
``ipywidgets.Image``, so they need no display server and no network. When the
autograder executes a notebook it sets ``TOOLKIT_HEADLESS=1``: builders then return
a one-line placeholder instead of drawing, which keeps grading fast.

:func:`live_figure` is the loop every builder shares: controls in, a figure redrawn
whenever one of them moves.

Widgets draw with the student's own functions where the student gives them: every
builder takes ``fns={toolkit name: function}`` (``mask_gallery(fns={"causal_mask":
causal_mask})``), and :func:`widget_functions` resolves it into the functions the widget
calls. An exercise that is not written yet never breaks a widget: where the figure would
be, it says which function it needs and where to write it (:func:`unwritten_message`),
and keeps its controls, so the figure appears once the function is written.
"""

from __future__ import annotations

import functools
import html
import inspect
import io
import os
import re
import sys
from collections.abc import Callable, Mapping

from matplotlib.figure import Figure

from toolkit.notebook import unwritten_exercise

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


# ---------------------------------------------------------------------------
# The student's functions
# ---------------------------------------------------------------------------


class WidgetFunctions:
    """The functions one widget calls, by their toolkit names: ``f.causal_mask(n)``.

    Made by :func:`widget_functions`. ``widget`` is the builder's name, ``names`` the
    names it takes in ``fns``, ``given`` those the student passed and ``followed`` those
    of them looked up again at each call (top-level definitions).
    """

    def __init__(
        self, widget: str, functions: dict[str, Callable], given: set[str], followed: set[str]
    ):
        self.widget, self.names = widget, tuple(sorted(functions))
        self.given, self.followed = frozenset(given), frozenset(followed)
        self._functions = functions

    def __getattr__(self, name: str):
        try:
            return self.__dict__["_functions"][name]
        except KeyError:
            raise AttributeError(f"{self.__dict__.get('widget')} does not use {name!r}") from None


def widget_functions(
    widget: str, fns: Mapping[str, Callable] | None, toolkit: Mapping[str, Callable]
) -> WidgetFunctions:
    """The functions ``widget`` calls: the student's from ``fns`` where given, else the toolkit's.

    Args:
        widget: the builder's (or plotting function's) name, for messages.
        fns: ``{toolkit name: function}`` from the student, or ``None``.
        toolkit: every function the widget calls, by name: the defaults.

    A function (or class) defined at the top of a notebook is looked up under its name
    at every call, so after the student runs the exercise's cell again the widget draws
    with the new definition at the next move of a control.

    Raises:
        ValueError: ``fns`` is not a mapping, names a function the widget does not use,
            or maps a name to something that cannot be called.
    """
    if fns is None:
        fns = {}
    if not isinstance(fns, Mapping):
        raise ValueError(f"{widget}: fns must be a dict {{toolkit name: function}}, e.g. "
                         f"fns={{{next(iter(sorted(toolkit)))!r}: ...}}; got {type(fns).__name__}")
    unknown = sorted(set(fns) - set(toolkit))
    if unknown:
        raise ValueError(f"{widget}: fns names {', '.join(map(repr, unknown))}, which this "
                         f"widget does not use; it takes {', '.join(sorted(toolkit))}")
    for name, fn in fns.items():
        if not callable(fn):
            raise ValueError(f"{widget}: fns[{name!r}] must be a function, got "
                             f"{type(fn).__name__}")
    given = {name: _latest(fn) for name, fn in fns.items()}
    followed = {name for name in fns if given[name] is not fns[name]}
    return WidgetFunctions(widget, {**toolkit, **given}, set(given), followed)


def _latest(fn: Callable) -> Callable:
    """``fn``, or, for a top-level function or class, whatever its name holds at call time."""
    name = getattr(fn, "__name__", "")
    if not name.isidentifier() or getattr(fn, "__qualname__", None) != name:
        return fn  # a lambda, a nested function, a method, a partial: call it as it is
    # A function's module (a notebook's namespace); a decorated one's (@torch.no_grad())
    # is that of the function it wraps.
    home = getattr(inspect.unwrap(fn), "__globals__", None)
    if home is None and isinstance(fn, type):
        home = getattr(sys.modules.get(fn.__module__), "__dict__", None)
    if home is None:
        return fn

    @functools.wraps(fn, updated=())
    def latest(*args, **kwargs):
        now = home.get(name)
        return (now if callable(now) else fn)(*args, **kwargs)

    return latest


# ---------------------------------------------------------------------------
# An exercise that is not written yet
# ---------------------------------------------------------------------------


def unless_unwritten(compute: Callable[[], object]) -> tuple[object, str | None]:
    """``(compute(), None)``, or ``(None, "needs `name`, not written yet (where)")`` when
    ``compute`` stops at an exercise's stub.

    For one panel, bar or row of a figure that shows several things: a widget placed
    before a later exercise of its notebook draws everything else, and says what that
    part waits for. Any other error is raised.
    """
    try:
        return compute(), None
    except NotImplementedError as error:
        stub = unwritten_exercise(error)
        if stub is None:
            raise
        return None, f"needs `{stub.name}`, {stub.state}{stub.where}"


def unwritten_message(
    error: BaseException, functions: WidgetFunctions | None = None, *, redraws: bool = True
) -> str | None:
    """The line a widget shows instead of its figure when a function it needs is a stub.

    ``"This widget needs `causal_mask`, which is not written yet (Exercise 2a: masks).
    Write it and run this cell again, or pass yours: `mask_gallery(fns={"causal_mask":
    causal_mask})`."``

    Args:
        error: what drawing raised.
        functions: the widget's functions, to say whether ``fns`` can take the missing one.
        redraws: the widget has controls that draw again (else: run the cell again).

    Returns:
        the message, or ``None`` when ``error`` is not an unwritten exercise's.
    """
    stub = unwritten_exercise(error)
    if stub is None:
        return None
    line = f"This widget needs `{stub.name}`, which is {stub.state}{stub.where}."
    key = stub.name.split(".")[0]  # `MultiHeadAttention.__init__` is passed as the class
    takes = functions is not None and key in functions.names
    if takes and key in functions.given:
        then = "move a control" if redraws and key in functions.followed else "run this cell again"
        return f"{line} Write it and run its cell, then {then}."
    pass_yours = f"`{functions.widget}(fns={{\"{key}\": {key}}})`" if takes else ""
    if stub.in_student_toolkit:
        left_out = ("The toolkit you installed leaves it out until that assignment's "
                    "solutions are unlocked")
        return f"{line} {left_out}: pass yours, {pass_yours}." if takes else f"{line} {left_out}."
    if takes:
        return f"{line} Write it and run this cell again, or pass yours: {pass_yours}."
    return f"{line} Write it and run this cell again."


def unwritten_html(message: str) -> str:
    """:func:`unwritten_message` as one line of HTML, `names` in code font."""
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(message, quote=False))
    return f'<div style="padding:4px 10px;border-left:3px solid #d9a400">&#9208; {text}</div>'


def refused_html(message: str) -> str:
    """A ``ValueError`` raised while drawing, as one line of HTML: the function refused
    these slider settings (the message says why); moving a slider draws again."""
    text = html.escape(message, quote=False)
    return ('<div style="padding:4px 10px;border-left:3px solid #c0392b">'
            f"These settings cannot be drawn: {text}</div>")


def reports_unwritten(toolkit: Mapping[str, Callable]):
    """Decorator for a builder that computes before :func:`live_figure` (or without it):
    a stub's ``NotImplementedError`` while building becomes one line of HTML that names the
    function (see :func:`unwritten_message`), instead of an exception.

    Args:
        toolkit: the functions the builder calls, as given to :func:`widget_functions`.
    """

    def decorate(builder):
        @functools.wraps(builder)
        def build(*args, **kwargs):
            try:
                return builder(*args, **kwargs)
            except NotImplementedError as error:
                functions = widget_functions(builder.__name__, kwargs.get("fns"), toolkit)
                message = unwritten_message(error, functions, redraws=False)
                if message is None:
                    raise
                import ipywidgets as w

                return w.HTML(unwritten_html(message))

        return build

    return decorate


# ---------------------------------------------------------------------------
# The redraw loop
# ---------------------------------------------------------------------------


def live_figure(
    controls: dict,
    draw,
    note=None,
    *,
    rows=None,
    tight: bool = False,
    functions: WidgetFunctions | None = None,
):
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
        functions: the widget's functions (:func:`widget_functions`), for the message
            shown when one of them is not written yet.

    Returns:
        ``ipywidgets.VBox`` of the rows, the image, the line shown in its place while an
        exercise is not written (hidden otherwise) and (with ``note``) the note. The
        figure is drawn once before it returns.
    """
    import ipywidgets as w

    image = w.Image(format="png")
    unwritten = w.HTML(layout=w.Layout(display="none"))
    text = w.HTML()

    def redraw(_change=None):
        values = {key: control.value for key, control in controls.items()}
        try:
            png = figure_to_png(draw(**values), tight=tight)
            caption = note(**values) if note is not None else ""
        except NotImplementedError as error:
            message = unwritten_message(error, functions)
            if message is None:
                raise
            unwritten.value, text.value = unwritten_html(message), ""
            image.layout.display, unwritten.layout.display = "none", None
            return
        except ValueError as error:  # settings the function refuses: say why, keep the sliders
            unwritten.value, text.value = refused_html(str(error)), ""
            image.layout.display, unwritten.layout.display = "none", None
            return
        image.value, text.value, unwritten.value = png, caption, ""
        image.layout.display, unwritten.layout.display = None, "none"

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    rows = [list(controls.values())] if rows is None else rows
    return w.VBox(
        [*(w.HBox(list(row)) for row in rows), image, unwritten, *([text] if note else [])]
    )
