"""An instructor installs the project without its dev extras (``pip install .``): every
library the grader imports must come with that install, directly or through a library it
requires. (pytest once came only with ``[dev]``, and ``autograder grade`` and
``serve-checks`` stopped at ``import pytest`` on such an install.)"""

from __future__ import annotations

import ast
import sys
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PROJECT = "transformers-course-toolkit"


def _runtime_closure() -> set[str]:
    """The project's requirements without its extras, and theirs (with the extras asked
    for, as ``dask[distributed]`` asks for ``distributed``), as installed here."""
    seen: set[str] = set()
    todo = [(PROJECT, {""})]
    while todo:
        name, extras = todo.pop()
        try:
            lines = requires(name) or []
        except PackageNotFoundError:
            continue
        for line in lines:
            req = Requirement(line)
            if req.marker is not None and not any(
                    req.marker.evaluate({"extra": extra}) for extra in extras):
                continue
            key = canonicalize_name(req.name)
            if key not in seen:
                seen.add(key)
                todo.append((req.name, {"", *req.extras}))
    return seen


def _imports(folder: Path) -> set[str]:
    names: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    # A script the sandbox runs imports its neighbours by their bare names (confine).
    own = {path.stem for path in folder.rglob("*.py")}
    return names - set(sys.stdlib_module_names) - own - {"autograder", "toolkit",
                                                         "__future__"}


def test_every_library_the_grader_and_toolkit_import_comes_without_dev_extras():
    closure = _runtime_closure()
    imported = _imports(ROOT / "autograder") | _imports(ROOT / "toolkit")
    assert {"pytest", "nbgrader", "torch"} <= imported  # the scan sees the grader's imports
    owners = packages_distributions()
    missing = sorted(name for name in imported
                     if not {canonicalize_name(d) for d in owners.get(name, [name])} & closure)
    assert not missing, f"imported but not required by {PROJECT} (without extras): {missing}"
