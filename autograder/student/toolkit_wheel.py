"""The toolkit students install: the course's toolkit without the answers.

``toolkit`` is the reference implementation of every exercise, so a student who imports
it from the instructor's checkout holds the answer key (a traceback even shows its path).
``autograder release --student-toolkit`` builds a wheel of the toolkit in which every
function or class that a still-locked assignment grades (every top-level definition in
its notebooks' solution cells) keeps its signature and docstring but raises
``NotImplementedError`` saying which exercise it is. Everything else (widgets, masks,
data, the pieces a notebook gives students) works as before, and widgets that need a
stubbed function say so, or take the student's own (``attention_explorer(
fns={"attention_weights": attention_weights})``).

Some toolkit code computes an assignment's answers under another name: the tuned Triton
kernels of 04 are its graded kernel, written for speed. An assignment lists such
definitions in ``withhold`` (``assignment.toml``), and the wheel stubs them too, with a
message that says they are withheld rather than unwritten. Code that only shares a
pattern with an exercise (a mask built from the same index grid) stays; the test suite
compares every definition left in the wheel with the locked solutions to find the rest.

When an assignment's deadline has passed, build again with ``--unlock NAME``: its
reference solutions are back in the next wheel. Self-learners keep the full toolkit of
the repository, which is the answer key on purpose. The wheel holds nothing but the
``toolkit`` package: no hidden checks, no assignment sources.
"""

from __future__ import annotations

import ast
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from ..authoring.prepare_checkpoint import files_digest
from ..authoring.submissions import solution_defined_names
from ..workspace.assistant_rules import DEFAULT_RULES, WHEEL_FILE_NAMES, write_rules
from ..workspace.course import (
    AssignmentSpec,
    CourseError,
    available_assignments,
    notebook_from_text,
)

PACKAGE = Path(__file__).resolve().parents[2] / "toolkit"
DISTRIBUTION = "transformers-course-toolkit"

# The libraries the toolkit imports. The wheel asks for each at the version this project
# itself requires, read from its installed metadata, so a student's kernel runs what the
# grader runs and the two lists cannot drift apart (a test scans the toolkit's imports).
TOOLKIT_LIBRARIES = ("torch", "triton", "numpy", "safetensors", "matplotlib", "ipywidgets",
                     "tqdm")


def graded_names(spec: AssignmentSpec) -> set[str]:
    """Every top-level function and class an assignment's solution cells define."""
    names: set[str] = set()
    for notebook in spec.notebooks:
        names |= set(solution_defined_names(notebook_from_text(spec.source_text(notebook))))
    return names


def stub_message(name: str, spec: AssignmentSpec) -> str:
    """What a stubbed exercise raises. It starts the way a released notebook's stubs do
    ("`X` is not written yet (...)"), so ``toolkit.notebook.unwritten_exercise`` reads
    both: ``friendly_errors`` and the widgets then name the missing exercise."""
    return (f"`{name}` is not written yet (assignment {spec.name}): it is an exercise of "
            f"{spec.title}, so the student toolkit leaves it out until that assignment's "
            f"solutions are unlocked. Use your own from the notebook; widgets take it as "
            f"fns={{{name!r}: {name}}}.")


def withheld_message(name: str, spec: AssignmentSpec) -> str:
    """What a withheld definition raises: read by ``unwritten_exercise`` like a stub's, but
    it says the code is held back, since the student is not asked to write it."""
    return (f"`{name}` is withheld (assignment {spec.name}): it computes answers of "
            f"{spec.title}, so the student toolkit leaves it out until that assignment's "
            f"solutions are unlocked.")


def withheld_file(dotted: str, spec: AssignmentSpec, package: Path = PACKAGE) -> tuple[Path, str]:
    """``(file relative to the package, definition name)`` of a ``withhold`` entry such as
    ``toolkit.kernels.flash_tuned.flash_attention_tuned``."""
    *module, name = dotted.split(".")
    where = f"{spec.path / 'assignment.toml'}: withhold entry {dotted!r}"
    if len(module) < 2 or module[0] != package.name or not name.isidentifier():
        raise CourseError(f"{where}: name a definition of a toolkit module, as "
                          f"{package.name}.module.definition")
    base = package.joinpath(*module[1:])
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(package), name
    raise CourseError(f"{where}: there is no module {'.'.join(module)} "
                      f"(looked for {base.with_suffix('.py')})")


def student_requirements(libraries=TOOLKIT_LIBRARIES) -> list[str]:
    """The wheel's dependencies: this project's own requirement (version and platform
    marker) for each of ``libraries``, e.g. ``triton==3.7.1; platform_system == "Linux"``,
    which a CPU-only PyTorch does not bring but 04's interpreter needs."""
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    try:
        declared = [Requirement(line) for line in requires(DISTRIBUTION) or []]
    except PackageNotFoundError:
        raise CourseError(f"{DISTRIBUTION} is not installed, so its requirements are "
                          f"unknown: run `pip install -e .` in the project first") from None
    wanted = {canonicalize_name(name) for name in libraries}
    chosen = [req for req in declared
              if canonicalize_name(req.name) in wanted and "extra" not in str(req.marker)]
    missing = wanted - {canonicalize_name(req.name) for req in chosen}
    if missing:
        raise CourseError(f"pyproject.toml requires none of {', '.join(sorted(missing))}, "
                          f"which the students' build imports: add them to [project] "
                          "dependencies")
    return sorted(str(req) for req in chosen)


def module_level_definitions(statements: list[ast.stmt]):
    """Functions and classes a module defines, also inside module-level ``if``, ``try`` and
    ``with`` blocks (a Triton kernel defined under ``if HAS_TRITON:``), never inside a
    function or class."""
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody"):
                yield from module_level_definitions(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from module_level_definitions(handler.body)


def _body_span(node) -> tuple[int, int]:
    """First and last line (1-based) of a definition's body, its docstring kept."""
    body = node.body
    first = body[0]
    if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str) and len(body) > 1):
        first = body[1]
    elif isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
            and isinstance(first.value.value, str):
        return first.end_lineno + 1, first.end_lineno  # docstring only: insert after it
    return first.lineno, body[-1].end_lineno


def stub_source(source: str, messages: dict[str, str]) -> tuple[str, list[str]]:
    """``source`` with the body of every module-level function named in ``messages`` (and
    of every method of every class named there) replaced by a ``raise``. Returns the new
    source and the names stubbed."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []  # (first line, last line, replacement)
    stubbed = []
    for node in module_level_definitions(tree.body):
        if node.name not in messages:
            continue
        targets = [node] if not isinstance(node, ast.ClassDef) else [
            m for m in node.body if isinstance(m, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for target in targets:
            first, last = _body_span(target)
            indent = " " * (target.col_offset + 4)
            message = messages[node.name]
            edits.append((first, last, f"{indent}raise NotImplementedError({message!r})\n"))
        stubbed.append(node.name)
    for first, last, text in sorted(edits, reverse=True):
        lines[first - 1:last] = [text]
    return "".join(lines), stubbed


def stage_student_toolkit(target: Path, assignments_dir: Path, unlocked=(),
                          package: Path = PACKAGE) -> list[str]:
    """Copy ``package`` to ``target`` with every graded and withheld definition of each
    locked assignment (those not in ``unlocked``) stubbed; returns the names stubbed."""
    known = available_assignments(assignments_dir)
    unknown = sorted(set(unlocked) - set(known))
    if unknown:
        raise CourseError(f"--unlock {', '.join(unknown)}: no such assignment (known: "
                          f"{', '.join(known)})")
    graded: dict[str, str] = {}  # name -> message, in every module that defines it
    withheld: dict[Path, dict[str, str]] = {}  # file -> {name: message}, that file only
    wanted: dict[tuple[Path, str], str] = {}  # (file, name) -> the entry, to check below
    for name in known:
        if name in unlocked:
            continue
        spec = AssignmentSpec.load(name, assignments_dir)
        for graded_name in graded_names(spec):
            graded.setdefault(graded_name, stub_message(graded_name, spec))
        for entry in spec.withhold:
            path, definition = withheld_file(entry, spec, package)
            message = withheld_message(definition, spec)
            withheld.setdefault(path, {}).setdefault(definition, message)
            wanted[(path, definition)] = (f"{spec.path / 'assignment.toml'}: withhold entry "
                                          f"{entry!r}")
    shutil.copytree(package, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    stubbed: list[str] = []
    for path in sorted(target.rglob("*.py")):
        relative = path.relative_to(target)
        new, names = stub_source(path.read_text(), {**graded, **withheld.get(relative, {})})
        if names:
            path.write_text(new)
            stubbed += names
            for name in names:
                wanted.pop((relative, name), None)
    if wanted:
        (path, definition), where = next(iter(wanted.items()))
        raise CourseError(f"{where}: {package.name}/{path} defines no function or class "
                          f"{definition!r} at module level; fix the entry or remove it")
    return stubbed


def wheel_version(staged: Path, requirements: list[str], build: str = "student") -> str:
    """``0.1.0+<build>.<hash>`` (``build``: ``student``, or ``lab`` for the student lab),
    the hash of every file of the staged package and of the requirements. pip keeps an
    installed wheel whose version equals the new one's, so a fix to the toolkit or a newly
    unlocked assignment must change it; an unchanged tree keeps it, and students who
    install the same build again download nothing."""
    digest = hashlib.sha256("\n".join(requirements).encode() + files_digest([staged]))
    return f"0.1.0+{build}.{digest.hexdigest()[:10]}"


def build_student_toolkit(
    out_dir: Path, assignments_dir: Path, unlocked: list[str] = (),
    inspect: Callable[[Path], object] | None = None,
    assistant_rules: str | None = DEFAULT_RULES,
) -> Path:
    """Build the student wheel into ``out_dir``; every assignment not in ``unlocked`` is
    locked. ``inspect`` is called with the staged package folder before the wheel is made
    (``autograder release`` compares it with the locked solutions). ``assistant_rules``
    goes into the package as ``AGENTS.md`` and the like
    (:mod:`autograder.workspace.assistant_rules`; ``None``: none). Returns the wheel's path."""
    locked = locked_assignments(assignments_dir, unlocked)
    with tempfile.TemporaryDirectory(prefix="student-toolkit-") as tmp:
        project = Path(tmp)
        stage_student_toolkit(project / "toolkit", assignments_dir, unlocked)
        write_rules(project / "toolkit", assistant_rules, WHEEL_FILE_NAMES)
        if inspect is not None:
            inspect(project / "toolkit")
        requirements = student_requirements()
        (project / "pyproject.toml").write_text(_PYPROJECT.format(
            name=DISTRIBUTION, version=wheel_version(project / "toolkit", requirements),
            locked=", ".join(locked) or "none",
            dependencies=", ".join(map(json.dumps, requirements))))
        out_dir = Path(out_dir)
        return pip_wheel(project, out_dir, DISTRIBUTION, "student toolkit")


def locked_assignments(assignments_dir: Path, unlocked) -> list[str]:
    """The assignments whose answers the student wheel stubs: all but ``unlocked``."""
    return sorted(set(available_assignments(assignments_dir)) - set(unlocked))


def pip_wheel(project: Path, out_dir: Path, distribution: str, what: str) -> Path:
    """Build the wheel of the staged ``project`` (named ``distribution``) into ``out_dir``,
    in place of the wheels of that distribution built there before; returns its path."""
    pattern = f"{distribution.replace('-', '_')}-*.whl"
    out_dir.mkdir(parents=True, exist_ok=True)
    for old in out_dir.glob(pattern):
        old.unlink()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "--quiet", "-w", str(out_dir), str(project)], capture_output=True, text=True)
    if done.returncode != 0:
        raise CourseError(f"could not build the {what} wheel:\n{done.stderr[-2000:]}")
    wheels = sorted(out_dir.glob(pattern))
    if not wheels:
        raise CourseError(f"pip wrote no wheel into {out_dir}")
    return wheels[-1]


# What students' wheels share: built by setuptools, for the Pythons students may have.
PYPROJECT_HEAD = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "{name}"
version = "{version}"
description = "{description}"
requires-python = ">=3.10"
dependencies = [{dependencies}]
"""

_PYPROJECT = PYPROJECT_HEAD.replace("{description}", "The course toolkit for students; "
                                    "exercises of locked assignments are stubs: {locked}") + """
[tool.setuptools.packages.find]
include = ["toolkit*"]

[tool.setuptools.package-data]
toolkit = ["**/*"]
"""
