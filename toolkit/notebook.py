"""Short, useful errors while a notebook's exercises are still being written.

A fresh assignment notebook is full of stubs that raise ``NotImplementedError``, and
cells below an exercise use it: a demo that calls your attention function, a cell that
builds ``my_model`` from your ``GPT`` and the cells that then use ``my_model``. Run All on
a fresh notebook would fill the page with long tracebacks, and every cell after a failed
one would add a ``NameError`` that hides the real reason.

:func:`friendly_errors` (called once, in a notebook's first cell) asks IPython to report
two cases briefly:

* an exercise that is not written yet: ``‖ This cell needs `GPT.__init__`, which is not
  written yet (Exercise 3). Write it, run its cell, then run this cell again.``
* a name that a cell above would have made, had its exercise been written: ``‖ `my_model`
  does not exist yet: the cell that makes it stopped because `GPT.__init__` is not
  written yet (Exercise 3).``

* a cell that needs what an earlier step makes (a trained checkpoint, a list of trained
  models) raises :class:`NotReadyError`; its message is shown as it is, in one line.

The cell still fails (Run All goes on past it where the notebook allows, and the grader
sees the same error); only the message is shorter. Every other error keeps IPython's
traceback, less the frames of PyTorch's module-call machinery (``Module._wrapped_call_impl``
and ``Module._call_impl``, between ``model(x)`` and ``forward``): a mistake is never there,
and every module between the call and the mistake would otherwise add two long frames.

Two kinds of stub say "not written yet", and :func:`unwritten_exercise` reads both (the
widgets use it too): a notebook's ``"`attention_weights` is not written yet (Exercise 1a:
attention weights): write it in its cell..."`` and the student toolkit's ``"`causal_mask` is
not written yet (assignment 01-attention): ..."``, a function the toolkit students install
leaves out until that assignment's solutions are unlocked. The student toolkit also
*withholds* code that computes an assignment's answers under another name (a tuned kernel):
``"`flash_attention_tuned` is withheld (assignment 04-flash-attention): ..."`` reads the
same way, and is reported as withheld rather than unwritten.
"""

from __future__ import annotations

import ast
import os
import re
from typing import NamedTuple

#: What starts each of friendly_errors' lines: a pause sign that every common font has
#: (the emoji one, U+23F8, shows as a box where no emoji font is installed).
MARK = "‖"

#: How the course's stubs start their message. The exercise in brackets may hold one level
#: of brackets of its own ("Exercise 3: `GPT` (tying, `forward`)").
_STUB = re.compile(
    r"^`(?P<name>[^`]+)` is (?P<state>not written yet|withheld)"
    r"(?: \((?P<exercise>(?:[^()]|\([^()]*\))+)\))?")
#: What the student toolkit's stubs put in the brackets: "assignment 01-attention".
_TOOLKIT_STUB = "assignment "


class Unwritten(NamedTuple):
    """What a stub's ``NotImplementedError`` says is missing."""

    name: str  #: ``"attention_weights"``, or ``"GPT.__init__"`` for a method
    exercise: str  #: ``"Exercise 1a: attention weights"``, ``"assignment 01-attention"`` or ``""``
    #: ``"not written yet"``, or ``"withheld"`` for toolkit code held back until the
    #: assignment whose answers it computes is unlocked.
    state: str = "not written yet"

    @property
    def in_student_toolkit(self) -> bool:
        """A function of the installed toolkit left out until its assignment is unlocked."""
        return self.exercise.startswith(_TOOLKIT_STUB)

    @property
    def where(self) -> str:
        """``" (Exercise 1a: attention weights)"``, or ``""`` when the stub names none."""
        return f" ({self.exercise})" if self.exercise else ""

    @property
    def reason(self) -> str:
        """``"`name` is not written yet (exercise)"``, or ``"... is withheld (...)"``."""
        return f"`{self.name}` is {self.state}{self.where}"


def unwritten_exercise(error: BaseException) -> Unwritten | None:
    """The function and exercise a stub's ``NotImplementedError`` names; ``None`` for any
    other error (a bare ``NotImplementedError()`` included).

    An error raised *because of* a stub counts too: Triton's interpreter wraps what a
    kernel raises in its own ``InterpreterError``, with the stub's error as its cause.
    """
    seen = 0
    while error is not None and not isinstance(error, NotImplementedError) and seen < 3:
        error, seen = error.__cause__, seen + 1
    if not isinstance(error, NotImplementedError):
        return None
    stub = _STUB.match(str(error))
    return Unwritten(stub["name"], stub["exercise"] or "", stub["state"]) if stub else None


class NotReadyError(RuntimeError):
    """Raised by a cell that needs something an earlier step makes, which is not there yet
    (say, the checkpoint the training section saves). The message says which step."""


def _defined_names(source: str) -> set[str]:
    """Top-level names a cell's code makes (``my_model = ...``, ``def``, ``import``, and
    assignments inside ``with``, ``for``, ``if`` and ``try`` blocks)."""
    try:
        return _assigned(ast.parse(source).body)
    except SyntaxError:
        return set()


def _assigned(statements: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in statements:
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        for block in ("body", "orelse", "finalbody"):
            if isinstance(node, (ast.With, ast.For, ast.If, ast.Try, ast.While)):
                names |= _assigned(getattr(node, block, []))
    return names


#: The frames between ``module(x)`` and ``module.forward(x)``: these functions of this file.
_CALL_MACHINERY_FILE = os.path.join("torch", "nn", "modules", "module.py")
_CALL_MACHINERY = ("_wrapped_call_impl", "_call_impl")


def _is_call_machinery(tb) -> bool:
    code = tb.tb_frame.f_code
    return code.co_name in _CALL_MACHINERY and code.co_filename.endswith(_CALL_MACHINERY_FILE)


def _without_call_machinery(tb):
    """The traceback ``tb`` with PyTorch's module-call frames unlinked (the frame that
    raised is always kept, wherever it is)."""
    kept = []
    while tb is not None:
        if tb.tb_next is None or not _is_call_machinery(tb):
            kept.append(tb)
        tb = tb.tb_next
    for frame, after in zip(kept, kept[1:]):
        frame.tb_next = after
    return kept[0] if kept else None


class _Reporter:
    """Remembers which names failed cells would have made, and words the two messages."""

    def __init__(self, shell):
        self.shell = shell
        self.missing: dict[str, str] = {}  # name -> why the cell that makes it stopped

    def __call__(self, shell, etype, value, tb, tb_offset=None):
        history = shell.user_ns.get("_ih") or [""]
        source = history[-1]  # the cell that is running
        if stub := unwritten_exercise(value):
            for name in _defined_names(source):
                self.missing[name] = stub.reason
            if stub.state == "withheld":
                advice = ("The toolkit you installed holds it back until that assignment's "
                          "solutions are unlocked, since it computes their answers.")
            elif stub.in_student_toolkit:
                advice = ("The toolkit you installed leaves it out until that assignment's "
                          "solutions are unlocked: use your own.")
            else:
                advice = "Write it, run its cell, then run this cell again."
            return self._say(etype, value, (
                f"{MARK} This cell needs `{stub.name}`, which is {stub.state}{stub.where}. "
                f"{advice}"))
        if issubclass(etype, NotReadyError):
            for name in _defined_names(source):
                self.missing[name] = str(value)
            return self._say(etype, value, f"{MARK} {value}")
        if issubclass(etype, NameError) and getattr(value, "name", None) in self.missing:
            reason = self.missing[value.name]
            for name in _defined_names(source):
                self.missing.setdefault(name, reason)
            return self._say(etype, value, (
                f"{MARK} `{value.name}` does not exist yet: the cell that makes it stopped "
                f"because {reason}."))
        # Anything else: IPython's usual traceback (%debug and %pdb work as always),
        # without torch's call machinery.
        shell.showtraceback((etype, value, _without_call_machinery(tb)), tb_offset=tb_offset)
        return None

    def _say(self, etype, value, message: str) -> list[str]:
        # IPython leaves the showing to a custom handler; ipykernel's _showtraceback sends
        # the error to the notebook (as any error), with our line for its traceback.
        self.shell._showtraceback(etype, value, [message])
        return [message]


def friendly_errors(shell=None) -> bool:
    """Report unwritten exercises (and what they leave undefined) in one line each.

    Call it once, at the top of a notebook. Outside IPython it does nothing and returns
    ``False``.
    """
    if shell is None:
        try:
            shell = get_ipython()  # noqa: F821 - defined inside IPython only
        except NameError:
            return False
    reporter = _Reporter(shell)
    shell.set_custom_exc((Exception,), reporter)
    return True
