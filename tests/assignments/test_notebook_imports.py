"""Notebooks use only public names: a private helper must not become a student's contract.

Every ``import`` in a code cell of an instructor notebook (and of any other script in
``assignments/*/``) and of a lecture (``course/*.py``) names
public modules and public objects only: no ``from toolkit.masks import _offsets``, no
``import toolkit._internal``. What a notebook needs from the toolkit is public, with a
docstring (argument checks live in :mod:`toolkit.arguments`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
import pytest
from IPython.core.inputtransformer2 import TransformerManager

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(p for p in [*(ROOT / "assignments").glob("*/*.py"), *(ROOT / "course").glob("*.py")]
                   if p.is_file())


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_imports(source: str) -> list[str]:
    """``module: name`` for each private module part or imported name in ``source``."""
    tree = ast.parse(TransformerManager().transform_cell(source))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if any(map(_is_private, a.name.split(".")))]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if any(map(_is_private, module.split("."))):
                found.append(module)
            found += [f"{module}: {a.name}" for a in node.names if _is_private(a.name)]
    return found


def test_the_check_sees_a_private_import():
    assert _private_imports("from toolkit.masks import causal_mask, _offsets") == [
        "toolkit.masks: _offsets"
    ]
    assert _private_imports("import toolkit._hidden as h\n%time x = 1") == ["toolkit._hidden"]
    assert _private_imports("from __future__ import annotations\nimport __future__") == []


@pytest.mark.parametrize("notebook", NOTEBOOKS,
                         ids=[str(p.relative_to(ROOT).with_suffix("")) for p in NOTEBOOKS])
def test_notebook_imports_no_private_name(notebook):
    nb = jupytext.read(notebook, fmt="py:percent")
    found = [
        f"cell {i}: {what}"
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for what in _private_imports(cell.source)
    ]
    assert not found, (
        f"{notebook.relative_to(ROOT)} imports private names ({'; '.join(found)}): make them "
        "public in their toolkit module (argument checks go to toolkit.arguments) and import "
        "the public name"
    )
