"""Does the student toolkit still hold an answer? Compare what is left with the locked solutions.

The student toolkit (:mod:`autograder.student.toolkit_wheel`) stubs every graded name of a locked
assignment and every definition its ``withhold`` list names. Code that computes a locked
exercise under another name (a tuned kernel beside the teaching one, a fused fast path)
would still hand the answer out, to be copied if not called. This module finds such code.

Each function body left in a staged student toolkit is compared with each locked
solution's body (docstrings and signatures left out: they are the exercise's statement,
not its answer) through the normalised token fingerprints of :mod:`autograder.reports.similarity`,
so renamed variables hide nothing. A definition *overlaps* an exercise when it holds at
least :data:`THRESHOLD` of the exercise's fingerprints. Solutions shorter than
:data:`MIN_TOKENS` normalised tokens are skipped: a one-line answer built from earlier
exercises looks like every caller of them.

Measured on this course: the tuned FlashAttention kernels held 66 % to 90 % of 04's graded
kernels before they were withheld; the highest share left is under 60 %, two functions
that start with the same argument checks.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from ..reports.similarity import Settings, given_names, kgram_hashes, normalise, winnow
from ..workspace.course import AssignmentSpec, available_assignments, notebook_from_text

#: Share of a locked solution's fingerprints that a leftover definition must hold to count.
THRESHOLD = 0.65
#: Solutions with fewer normalised tokens in their body are not compared.
MIN_TOKENS = 40


@dataclasses.dataclass(frozen=True)
class Overlap:
    """A definition left in the student toolkit that holds much of a locked answer."""

    assignment: str
    exercise: str  #: ``"flash_attention_kernel"`` or ``"GPT.forward"``
    definition: str  #: ``"toolkit/kernels/flash_tuned.py:63 _flash_attn_fwd_kernel"``
    share: float  #: of the exercise's fingerprints found in the definition

    def __str__(self) -> str:
        return (f"{self.definition} holds {self.share:.0%} of the answer to {self.exercise} "
                f"({self.assignment})")


def function_bodies(source: str) -> list[tuple[int, str, str]]:
    """``(line, name, body source)`` of every function in ``source``, nested ones and
    methods (``Class.method``) included, each body without its docstring."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    lines = source.splitlines()
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                body = child.body
                if (len(body) > 1 and isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant)):
                    body = body[1:]  # the docstring
                text = "\n".join(lines[body[0].lineno - 1:child.end_lineno])
                found.append((child.lineno, f"{prefix}{child.name}", text))
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def _fingerprints(source: str, given: set[str], settings: Settings) -> tuple[set[int], int]:
    """The winnowed fingerprints of ``source`` (every line counts) and its token count."""
    tokens, _ = normalise(source, list(range(len(source.splitlines()))), given)
    return set(winnow(kgram_hashes(tokens, settings.k), settings.window)), len(tokens)


def answer_overlaps(staged: Path, assignments_dir: Path, unlocked=(),
                    threshold: float = THRESHOLD) -> list[Overlap]:
    """Every definition under ``staged`` (a student toolkit's package folder) that holds at
    least ``threshold`` of a locked assignment's solution, largest share first."""
    settings = Settings()
    staged = Path(staged)
    leftovers = [
        (f"{staged.name}/{path.relative_to(staged)}:{line} {name}", body)
        for path in sorted(staged.rglob("*.py"))
        for line, name, body in function_bodies(path.read_text())
    ]
    found = []
    for assignment in available_assignments(assignments_dir):
        if assignment in unlocked:
            continue
        spec = AssignmentSpec.load(assignment, assignments_dir)
        for notebook in spec.notebooks:
            nb = notebook_from_text(spec.source_text(notebook))
            given = given_names([c.source for c in nb.cells if c.cell_type == "code"])
            answers = []  # (exercise, its fingerprints)
            for cell in nb.cells:
                if cell.cell_type != "code" or not cell.metadata.get("nbgrader", {}).get(
                        "solution"):
                    continue
                for _, name, body in function_bodies(cell.source):
                    prints, size = _fingerprints(body, given, settings)
                    if size >= MIN_TOKENS and prints:
                        answers.append((name, prints))
            if not answers:
                continue
            for definition, body in leftovers:
                prints, _ = _fingerprints(body, given, settings)
                for exercise, answer in answers:
                    share = len(answer & prints) / len(answer)
                    if share >= threshold:
                        found.append(Overlap(assignment, exercise, definition, share))
    return sorted(found, key=lambda o: -o.share)
