"""One source of truth: every solution in an assignment notebook *is* the toolkit's code.

For each instructor notebook ``assignments/*/*.py`` (jupytext percent format), every
top-level function and class defined in a code cell marked as an nbgrader solution
must have a counterpart of the same name in ``toolkit/`` whose code is identical:
their ASTs must be equal once docstrings are removed from every function and class
(comments, and with them the ``### BEGIN/END SOLUTION`` markers, never reach the AST).
The student-facing docstrings may differ; the code may not. If a notebook's solution
drifts from the toolkit (or the other way round), this test names the function and
shows the first differing lines.

The toolkit is read as source with :mod:`ast`, never imported, so the test is fast and
a module that fails to import (say, Triton missing) cannot hide a mismatch. Widgets
are excluded: they are demos, not references.

A solution with no toolkit counterpart fails unless it is listed in
``NO_TOOLKIT_COUNTERPART`` with the reason.
"""

from __future__ import annotations

import ast
import copy
import difflib
from functools import cache
from pathlib import Path

import jupytext
import pytest

ROOT = Path(__file__).resolve().parents[2]
ASSIGNMENTS = ROOT / "assignments"
TOOLKIT = ROOT / "toolkit"
EXCLUDED_TOOLKIT_DIRS = {"widgets"}

#: ``(assignment folder, name) -> why it has no toolkit reference``.
NO_TOOLKIT_COUNTERPART: dict[tuple[str, str], str] = {}


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    """Remove the docstring of every function and class in ``tree`` (in place)."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                node.body = body[1:] or [ast.Pass()]
    return tree


def _normalised(node: ast.AST) -> str:
    return ast.dump(_strip_docstrings(copy.deepcopy(node)), include_attributes=False)


def _defs(source: str, filename: str) -> dict[str, ast.AST]:
    tree = ast.parse(source, filename=filename)
    return {n.name: n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}


@cache
def toolkit_index() -> dict[str, list[tuple[str, ast.AST]]]:
    """``name -> [(module path, node), ...]`` for every top-level toolkit def."""
    index: dict[str, list[tuple[str, ast.AST]]] = {}
    for path in sorted(TOOLKIT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if EXCLUDED_TOOLKIT_DIRS & set(rel.parts[1:-1]):
            continue
        for name, node in _defs(path.read_text(), str(rel)).items():
            index.setdefault(name, []).append((str(rel), node))
    return index


def _notebooks() -> list[Path]:
    return sorted(p for p in ASSIGNMENTS.glob("*/*.py") if p.is_file())


@cache
def _read(notebook: Path):
    return jupytext.read(notebook, fmt="py:percent")


def _solution_defs() -> list[tuple[str, str, str, int]]:
    """``(assignment, notebook path, name, cell index)`` for every solution def."""
    found = []
    for path in _notebooks():
        nb = _read(path)
        for index, cell in enumerate(nb.cells):
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("solution"):
                continue
            try:
                names = _defs(cell.source, f"{path}:cell {index}")
            except SyntaxError as exc:
                found.append((path.parent.name, str(path.relative_to(ROOT)),
                              f"<syntax error: {exc}>", index))
                continue
            found += [(path.parent.name, str(path.relative_to(ROOT)), n, index) for n in names]
    return found


@cache
def _cell_defs(notebook: str, index: int) -> dict[str, ast.AST]:
    nb = _read(ROOT / notebook)
    return _defs(nb.cells[index].source, f"{notebook}:cell {index}")


SOLUTION_DEFS = _solution_defs()


def test_there_is_something_to_compare():
    """Guard against a silent pass: the toolkit is indexed and notebooks are found."""
    assert toolkit_index(), "no top-level functions or classes found under toolkit/"
    if _notebooks():
        assert SOLUTION_DEFS, "assignment notebooks exist but none has a solution cell with a def"


@pytest.mark.parametrize(
    "assignment, notebook, name, cell", SOLUTION_DEFS,
    ids=[f"{a}:{n}" for a, _, n, _ in SOLUTION_DEFS] or None,
)
def test_solution_matches_toolkit(assignment, notebook, name, cell):
    assert not name.startswith("<syntax error"), f"{notebook} cell {cell}: {name}"
    if (assignment, name) in NO_TOOLKIT_COUNTERPART:
        pytest.skip(NO_TOOLKIT_COUNTERPART[(assignment, name)])
    candidates = toolkit_index().get(name)
    assert candidates, (
        f"{notebook}: the solution defines {name!r} (cell {cell}), but no toolkit module "
        "defines it. Move the reference into toolkit/ and copy it into the notebook, or list "
        f"({assignment!r}, {name!r}) in NO_TOOLKIT_COUNTERPART with a reason."
    )
    node = _cell_defs(notebook, cell)[name]
    mine = _normalised(node)
    for _, ref_node in candidates:
        if _normalised(ref_node) == mine:
            return
    module, ref_node = candidates[0]
    ours = ast.unparse(_strip_docstrings(copy.deepcopy(node)))
    theirs = ast.unparse(_strip_docstrings(copy.deepcopy(ref_node)))
    diff = "\n".join(list(difflib.unified_diff(
        theirs.splitlines(), ours.splitlines(), fromfile=f"{module}:{name}",
        tofile=f"{notebook}:{name}", lineterm="", n=1))[:40])
    where = ", ".join(m for m, _ in candidates)
    pytest.fail(
        f"{notebook}: the solution of {name!r} differs from the toolkit ({where}); docstrings "
        f"and comments aside, the code must be identical. Diff (toolkit -> notebook):\n{diff}"
    )
