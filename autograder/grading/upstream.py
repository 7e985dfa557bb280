"""Which exercise calls which: a failing exercise first names the broken one it builds on.

Exercises build on each other: a decoder block calls the student's multi-head attention,
which calls their attention weights. When the attention weights are wrong, every check of
the block fails too, and each of its hints (the norm's place, the residual, the mask)
sends the student to rewrite a block that may well be right. The named mistakes of
:mod:`autograder.grading.diagnosis` say where to look only for the classic mistakes; this module
says it for any mistake, from the code itself.

It reads the graded notebook's own code (never runs it): every top-level ``def`` and
``class`` of every code cell but the test cells, and the names each one mentions. A
definition in a solution cell belongs to the exercise whose test cell comes next (the
layout of every notebook of the course); one in a given cell or a cell of the student's
own belongs to none, but is followed through, so a block that reaches the student's norm
through a given helper still counts as calling it. The result,
``{exercise: {earlier exercise it calls: [names it reaches there]}}``, is turned into a line
at the top of each failing exercise whose callees fail too (:func:`.scoring.score_cells`).

The analysis is by name, as Python looks names up at the end of the notebook: the last
definition of a name wins, and a local variable that happens to share a name with an
exercise's function counts as a call. A cell that does not parse is skipped.
"""

from __future__ import annotations

import ast

#: Cells longer than this are not parsed (nothing a student writes is near it).
MAX_SOURCE = 200_000


def _definitions(source: str) -> dict[str, set[str]]:
    """``{name defined at the top level: names its body and decorators mention}``."""
    if len(source) > MAX_SOURCE:
        return {}
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}  # IPython magics, a syntax error: nothing to follow
    found = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found[node.name] = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
    return found


def _cells(nb) -> list[tuple[str, str | None]]:
    """``[(source, owner)]`` for every code cell but the test cells; ``owner`` is the
    grade id of the test cell that checks a solution cell, ``None`` for the others."""
    out, waiting = [], []  # solution cells whose test cell has not come yet
    for cell in nb.get("cells", []):
        if cell.get("cell_type") != "code":
            continue
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if meta.get("grade") and not meta.get("solution"):  # a test cell
            out += [(text, meta.get("grade_id")) for text in waiting]
            waiting = []
        elif meta.get("solution"):
            waiting.append(source)
        else:
            out.append((source, None))
    return out + [(text, None) for text in waiting]


def exercise_uses(nb) -> dict[str, dict[str, list[str]]]:
    """``{exercise: {earlier exercise it calls, directly or through given code: [names]}}``.

    Exercises are grade ids of test cells; ``names`` are the callee's definitions the
    caller's code reaches, sorted, the student's helpers (``_name``) left out unless they
    are all there is. ``nb`` is a notebook (nbformat node or plain dict);
    ``None`` gives ``{}``.
    """
    if nb is None:
        return {}
    mentions: dict[str, set[str]] = {}  # name -> names its definition mentions
    owner: dict[str, str | None] = {}  # name -> exercise that defines it (last one wins)
    place: dict[str, int] = {}  # exercise -> its place in the notebook
    for source, exercise in _cells(nb):
        if exercise:
            place.setdefault(exercise, len(place))
        for name, names in _definitions(source).items():
            mentions[name], owner[name] = names, exercise
    uses: dict[str, dict[str, list[str]]] = {}
    for exercise in {e for e in owner.values() if e}:
        reached: dict[str, set[str]] = {}
        seen = {n for n, e in owner.items() if e == exercise}
        todo = list(seen)
        while todo:
            for name in mentions.get(todo.pop(), ()):
                if name in seen or name not in owner:
                    continue
                seen.add(name)
                todo.append(name)
                # Only exercises that come earlier: a student works from the top, and a
                # later one (an option that dispatches to it) is not what broke this one.
                if owner[name] and place[owner[name]] < place[exercise]:
                    reached.setdefault(owner[name], set()).add(name)
        if reached:
            uses[exercise] = {
                callee: sorted(n for n in names if not n.startswith("_")) or sorted(names)
                for callee, names in sorted(reached.items(), key=lambda item: place[item[0]])}
    return uses
