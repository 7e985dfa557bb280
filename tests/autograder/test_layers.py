"""The autograder's packages are layers: no import cycle, and each imports only those above.

Every ``import`` of every module under ``autograder/`` is read from its source (``ast``),
including the imports inside functions, which hide a cycle from Python but not from a
reader: a module that imports another only "lazily" still cannot be understood without it.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "autograder"

#: The layers, top to bottom of autograder/__init__.py's list: a module may import its own
#: layer and those before it, never one after it.
LAYERS = ["contracts", "workspace", "sandbox", "protocol", "grading", "reports", "authoring",
          "student", "labext", "cli"]
#: The top-level modules: the shared contracts and the alias table of old names.
CONTRACTS = {"autograder", "autograder.jobs", "autograder.limits", "autograder.old_names"}
#: Old names kept as small packages for workspaces made before (see old_names.py):
#: each imports the module it became, wherever that lies.
ALIAS_FILES = {"autograder.release_steps", "autograder.formgrader_bridge", "autograder.feedback"}


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        if {"frontend", "labextension", "node_modules"} & set(path.parts):
            continue
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The module of the project ``name`` lies in (a module, or an attribute of one)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str, path: Path) -> set[str]:
    """The project's modules ``module`` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                prefix = package[:len(package) - (node.level - 1)]
                base = ".".join(prefix + ([base] if base else []))
            # ``from pkg import mod`` imports the module; ``from mod import name`` the module.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name)
            if target and target != module:
                found.add(target)
    return found


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def _package(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _layer(module: str) -> str:
    return "contracts" if module in CONTRACTS | ALIAS_FILES else module.split(".")[1]


def test_the_import_reader_sees_imports_inside_functions():
    # course.py imports the outline inside a method: the reader must see it.
    assert "autograder.workspace.outline" in GRAPH["autograder.workspace.course"]
    assert "autograder.grading.diagnosis" in GRAPH["autograder.grading.runner"]


def test_no_import_cycle_between_modules():
    assert _cycles(GRAPH) == []


def test_no_import_cycle_between_packages():
    """A package may import its parent or its children (``labext`` and its two sides);
    between any other two packages, imports go one way."""
    graph: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        for target in targets:
            a, b = _package(module), _package(target)
            if a == b or a.startswith(b + ".") or b.startswith(a + "."):
                continue
            graph.setdefault(a, set()).add(b)
    assert _cycles(graph) == []


def test_each_layer_imports_only_the_layers_above_it():
    wrong = [f"{module} imports {target}" for module, targets in sorted(GRAPH.items())
             for target in sorted(targets) if module not in ALIAS_FILES
             and LAYERS.index(_layer(target)) > LAYERS.index(_layer(module))]
    assert wrong == []


def test_every_package_says_what_it_owns():
    for path in MODULES.values():
        if path.name == "__init__.py":
            doc = ast.get_docstring(ast.parse(path.read_text()))
            assert doc and len(doc) > 80, f"{path}: say what this package owns"


def test_the_workspace_reads_without_nbconvert_or_the_feedback_page():
    """Importing ``Course`` (every command does) does not load the HTML feedback page and
    what it needs (nbconvert's exporters, latex2mathml)."""
    import subprocess
    import sys

    code = ("import sys; import autograder.workspace.course; "
            "print(sorted(m for m in ('latex2mathml', 'nbconvert.exporters', "
            "'autograder.reports.feedback_page') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, check=True)
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module):
    if module.startswith("autograder.sandbox.inside.") and module not in (
            "autograder.sandbox.inside.confine", "autograder.sandbox.inside.channel"):
        pytest.skip("a script run by path inside the sandbox, never imported")
    if module.endswith(".__main__"):
        pytest.skip("runs the command line when imported")
    importlib.import_module(module)
