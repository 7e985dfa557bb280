"""A tracer: which of the autograder's modules one grading job enters, from where, in what order.

:class:`ModulePath` watches every Python call and return in the grader's process while it
is active, in every thread (a thread started on the job's path, the storage watchdog,
continues the stack of the code that started it), keeps those of functions in
``autograder/`` (other code, jupyter_client or pytest, is transparent) and reduces them
to the modules control passes through. Readings of the same trace:

* the **timeline**: the module control is in after each call or return, consecutive
  repeats merged (one *stay* per visit); a *return* is a stay in a module the job had
  already left. Every loop iteration (each cell, each check request, each poll of the
  watchdog) counts again, so its numbers grow with the notebook.
* the **chains**: for each call, the modules on the stack, consecutive repeats merged
  (calls within a module are one stay). A loop that repeats a crossing adds no chain,
  so these describe the *path*, however long the notebook:
  :meth:`~ModulePath.entered_from` (per module, the modules it is entered from),
  :meth:`~ModulePath.entered_from_places` (the same for the sandbox's modules, with
  every module outside the sandbox counted as one place, the job) and
  :meth:`~ModulePath.call_backs` (a chain that holds a module twice, ``a > b > a``).
"""

from __future__ import annotations

import sys
import threading
from collections import defaultdict
from pathlib import Path

import autograder

PACKAGE = Path(autograder.__file__).resolve().parent
_THREAD_START = threading.Thread.start.__code__
#: The kernel's life cycle: every module of this package is a stop on the job's path.
SANDBOX = "autograder.sandbox."
#: The shared contracts (``Job``, ``Limits``, ...): read by every layer, no stop on a path.
CONTRACTS = {"autograder.jobs", "autograder.limits"}


def _module_of(filename: str) -> str | None:
    """``autograder.sandbox.storage`` for ``.../autograder/sandbox/storage.py``, else None."""
    try:
        relative = Path(filename).resolve().relative_to(PACKAGE)
    except ValueError:
        return None
    parts = list(relative.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["autograder", *parts])


class ModulePath:
    """``with ModulePath() as path: grade_notebook(job)``, then read ``path``."""

    def __init__(self):
        self.timeline: list[str] = []  # module after each event, repeats merged
        self.chains: set[tuple[str, ...]] = set()  # distinct stacks of stays
        self._stacks: dict[int, list[str]] = defaultdict(list)  # thread -> autograder frames
        self._files: dict[str, str | None] = {}
        self._started: dict[threading.Thread, list[str]] = {}  # thread -> starter's stack
        self._lock = threading.Lock()

    def _profile(self, frame, event, arg):
        if event not in ("call", "return"):
            return
        thread = threading.get_ident()
        if thread not in self._stacks:
            # A thread started on the job's path (the storage watchdog) continues the
            # stack of the code that started it.
            parent = self._started.pop(threading.current_thread(), [])
            self._stacks[thread] = list(parent)
        if event == "call" and frame.f_code is _THREAD_START:
            self._started[frame.f_locals["self"]] = list(self._stacks[thread])
            return
        filename = frame.f_code.co_filename
        module = self._files.get(filename, "")
        if module == "":
            module = self._files[filename] = _module_of(filename)
        if module is None:
            return
        stack = self._stacks[thread]
        if event == "call":
            stack.append(module)
        elif stack:
            stack.pop()
        with self._lock:
            if event == "call":
                chain = tuple(m for i, m in enumerate(stack) if i == 0 or stack[i - 1] != m)
                self.chains.add(chain)
            here = stack[-1] if stack else None
            if here is not None and (not self.timeline or self.timeline[-1] != here):
                self.timeline.append(here)

    def __enter__(self):
        threading.setprofile(self._profile)
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)
        threading.setprofile(None)

    # -- readings -----------------------------------------------------------------------
    def stays(self) -> dict[str, int]:
        """Per module, its stays in the timeline."""
        counts: dict[str, int] = defaultdict(int)
        for module in self.timeline:
            counts[module] += 1
        return dict(counts)

    def returns(self) -> int:
        """Stays in a module the timeline had already left."""
        return len(self.timeline) - len(set(self.timeline))

    def entered_from(self) -> dict[str, set[str]]:
        """Per module, the modules a stay of it was entered from (none: a thread's or the
        job's first module)."""
        callers: dict[str, set[str]] = defaultdict(set)
        for chain in self.chains:
            callers[chain[-1]]
            if len(chain) > 1:
                callers[chain[-1]].add(chain[-2])
        return dict(callers)

    def routes(self) -> dict[str, set[tuple[str, ...]]]:
        """Per module, the distinct chains of stays that lead to it from the job's start."""
        found: dict[str, set[tuple[str, ...]]] = defaultdict(set)
        for chain in self.chains:
            found[chain[-1]].add(chain)
        return dict(found)

    def entered_from_places(self) -> dict[str, set[str]]:
        """Per module of the sandbox, the places the job's path enters it from: another
        module of the sandbox, or ``"the job"`` (any module outside it: the runner, the
        checks' transport, the diagnosis). The shared contracts (:data:`CONTRACTS`,
        values every layer reads) are not stops on the path and are left out."""
        found: dict[str, set[str]] = defaultdict(set)
        for chain in self.chains:
            kept = [m for m in chain if m not in CONTRACTS]
            for caller, callee in zip(kept, kept[1:]):
                if callee.startswith(SANDBOX) and caller != callee:
                    found[callee].add(caller if caller.startswith(SANDBOX) else "the job")
        return dict(found)

    def call_backs(self) -> list[tuple[str, ...]]:
        """Chains that hold a module twice: a module called back by one it called."""
        return sorted(c for c in self.chains if len(set(c)) < len(c))

    def first_order(self) -> list[str]:
        """The modules in the order the job first enters them."""
        return list(dict.fromkeys(self.timeline))
