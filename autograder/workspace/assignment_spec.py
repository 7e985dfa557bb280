"""An assignment as its author wrote it: ``assignments/<name>/`` and its ``assignment.toml``.

The folder holds the instructor notebooks (jupytext percent scripts, answers included)
and ``assignment.toml``: the title, the notebooks, where the hidden checks are, the
resource caps, the shortcuts forbidden while student code runs, and the named mutants
(the classic mistakes ``autograder validate`` plants and the diagnosis recognises), and the
toolkit code the student toolkit withholds while the assignment is locked.
See docs/adding-an-assignment.md.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from pathlib import Path

import jupytext
import nbformat

from ..limits import Limits

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# Instructors keep assignments elsewhere with AUTOGRADER_ASSIGNMENTS=/path (read at `init`).
ASSIGNMENTS_DIR = Path(os.environ.get("AUTOGRADER_ASSIGNMENTS", PROJECT_ROOT / "assignments"))
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


class CourseError(Exception):
    """A problem an instructor can fix; the message says what to do."""


@dataclasses.dataclass
class Mutant:
    name: str
    pitfall: str
    notebook: str
    find: str
    replace: str
    breaks: list[str]
    #: What the student did, in a sentence for them; the diagnosis shows it in feedback.
    explanation: str = ""
    #: Whether the diagnosis names this mistake where it breaks: false for one whose
    #: every symptom is an error (errors alone prove nothing). ``validate`` holds it.
    diagnosed: bool = True


@dataclasses.dataclass
class AssignmentSpec:
    """An assignment as described by ``assignments/<name>/assignment.toml``."""

    name: str
    path: Path
    title: str
    notebooks: list[str]
    #: The hidden checks' folder, relative to the assignment folder: ``checks/`` beside
    #: ``assignment.toml`` unless the file says otherwise. Never part of a release.
    checks: str = "checks"
    #: Time, memory and storage caps: any field of :class:`autograder.limits.Limits`
    #: set at the top level of the file (defaults there).
    limits: Limits = dataclasses.field(default_factory=Limits)
    forbid: list[str] = dataclasses.field(default_factory=list)
    #: Toolkit definitions, as dotted names (``toolkit.kernels.flash_tuned.flash_attention_tuned``),
    #: that compute this assignment's answers under another name than the graded one (a
    #: tuned kernel, a fused fast path). The student toolkit withholds them, like the graded
    #: names, while the assignment is locked. See :mod:`autograder.student.toolkit_wheel`.
    withhold: list[str] = dataclasses.field(default_factory=list)
    mutants: list[Mutant] = dataclasses.field(default_factory=list)
    #: Modules the fork server's template imports for this assignment's kernels, besides
    #: the ones every kernel uses (:data:`autograder.sandbox.forkserver.PRELOAD`): what the
    #: graded code imports late and slowly, such as ``torch._dynamo``, which an optimizer's
    #: first step imports (07's checks train). Imported once per grading worker instead of
    #: once per kernel.
    kernel_preload: list[str] = dataclasses.field(default_factory=list)
    #: Optional script in the assignment folder, run after each *made* submission
    #: (validate, demo) is written: ``python <script> <student id>`` with the submission
    #: folder as working directory, e.g. to train and save the checkpoint a student would
    #: hand in next to the notebook. See :func:`autograder.authoring.submissions.run_prepare`.
    prepare: str | None = None
    #: The grade cells whose hidden checks read the files ``prepare`` writes. ``validate``
    #: grades a named mutant on the cells it breaks only, so it runs ``prepare`` (trains)
    #: only for the mutants that break one of these; and it grades the reference without
    #: those files, which must lose points on each of these cells and on no other. Unset,
    #: every made submission is prepared.
    prepare_read_by: list[str] = dataclasses.field(default_factory=list)
    #: ``[leaderboard]``: rank the checkpoints students hand in on a held-out text, and
    #: retrain the top ones (opt-in; see :mod:`autograder.reports.leaderboard`).
    leaderboard: dict | None = None

    @classmethod
    def load(cls, name: str, assignments_dir: Path = ASSIGNMENTS_DIR) -> AssignmentSpec:
        path = assignments_dir / name
        toml_path = path / "assignment.toml"
        if not toml_path.is_file():
            known = ", ".join(available_assignments(assignments_dir)) or "none"
            raise CourseError(f"no assignment '{name}' (looked for {toml_path}); known: {known}")
        try:
            data = tomllib.loads(toml_path.read_text())
        except tomllib.TOMLDecodeError as exc:
            raise CourseError(f"{toml_path}: invalid TOML ({exc}); fix the file") from None
        try:
            limits = Limits.from_table(data, where=str(toml_path))
        except ValueError as exc:
            raise CourseError(str(exc)) from None
        data = {k: v for k, v in data.items() if k not in _LIMIT_KEYS}
        unknown = sorted(set(data) - _SPEC_KEYS)
        if unknown:
            raise CourseError(
                f"{toml_path}: unknown key(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(_SPEC_KEYS | _LIMIT_KEYS))}"
            )
        mutants = [_mutant(m, i, toml_path) for i, m in enumerate(data.pop("mutants", []), 1)]
        spec = cls(name=name, path=path, mutants=mutants, limits=limits, **data)
        for nb in spec.notebooks:
            if not (path / f"{nb}.py").is_file():
                raise CourseError(f"{toml_path}: notebook '{nb}' has no source file {nb}.py")
        if not spec.checks_dir().is_dir():
            raise CourseError(
                f"{toml_path}: the hidden checks folder {spec.checks_dir()} does not exist; keep "
                f"the checks in {path / 'checks'} (the default) or set checks = \"<folder>\" "
                "relative to the assignment folder")
        if spec.prepare is not None and not (path / spec.prepare).is_file():
            raise CourseError(f"{toml_path}: prepare script {spec.prepare} not found in {path}")
        if spec.prepare_read_by and spec.prepare is None:
            raise CourseError(f"{toml_path}: prepare_read_by names the cells that read what "
                              "the prepare script writes, but no prepare script is set")
        return spec

    def source_text(self, notebook: str) -> str:
        return (self.path / f"{notebook}.py").read_text()

    def points(self) -> tuple[float, float]:
        """``(automatic, written)``: the points of the grade cells the hidden checks score
        (test cells), and of the answers a person reads (cells both graded and a solution)."""
        automatic = written = 0.0
        for notebook in self.notebooks:
            for cell in notebook_from_text(self.source_text(notebook)).cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade"):
                    if meta.get("solution"):
                        written += meta.get("points", 0)
                    else:
                        automatic += meta.get("points", 0)
        return automatic, written

    def checks_dir(self) -> Path:
        """Where the hidden checks are: ``checks`` resolved from the assignment folder."""
        return (self.path / self.checks).resolve()


def _mutant(table: dict, number: int, toml_path: Path) -> Mutant:
    """One ``[[mutants]]`` table as a :class:`Mutant`; a missing or unknown key is named."""
    fields = {f.name: f for f in dataclasses.fields(Mutant)}
    required = {name for name, f in fields.items() if f.default is dataclasses.MISSING}
    where = f"{toml_path}: mutant {table.get('name', f'number {number}')!r}"
    unknown = sorted(set(table) - set(fields))
    if unknown:
        raise CourseError(f"{where}: unknown key(s) {', '.join(unknown)}; a mutant takes "
                          f"{', '.join(fields)} (top-level keys such as forbid and withhold "
                          "go above the first [[mutants]])")
    missing = [name for name in fields if name in required and name not in table]
    if missing:
        raise CourseError(f"{where}: missing {', '.join(missing)}")
    return Mutant(**table)


_LIMIT_KEYS = {f.name for f in dataclasses.fields(Limits)}
_SPEC_KEYS = {f.name for f in dataclasses.fields(AssignmentSpec)} - {"name", "path", "limits"}


def available_assignments(assignments_dir: Path = ASSIGNMENTS_DIR) -> list[str]:
    return sorted(p.parent.name for p in assignments_dir.glob("*/assignment.toml"))


def notebook_from_text(text: str) -> nbformat.NotebookNode:
    """A jupytext percent script to an nbformat v4 notebook with our kernelspec."""
    nb = jupytext.reads(text, fmt="py:percent")
    nb.metadata.pop("jupytext", None)
    nb.metadata["kernelspec"] = dict(KERNELSPEC)
    nb.metadata["language_info"] = {"name": "python"}
    nb.nbformat, nb.nbformat_minor = 4, 5
    for cell in nb.cells:
        cell.metadata.pop("lines_to_next_cell", None)
    return nb


def apply_mutant(spec: AssignmentSpec, mutant: Mutant) -> str:
    text = spec.source_text(mutant.notebook)
    count = text.count(mutant.find)
    if count != 1:
        raise CourseError(
            f"{spec.path / 'assignment.toml'}: mutant '{mutant.name}': its `find` text occurs "
            f"{count} times in {mutant.notebook}.py (it must occur exactly once)"
        )
    return text.replace(mutant.find, mutant.replace)
