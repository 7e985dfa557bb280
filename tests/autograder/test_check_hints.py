"""Hints for one symptom, from the hidden checks themselves.

A diagnosis names a classic mistake when the student's answers equal a named mutant's on
every request. When the student's code differs a little more (the same off-by-one plus a
harmless change), no diagnosis matches and the failing check's own message is all the
student reads, so the checks recognise the commonest symptoms themselves.

Here the real hidden checks run in this process against a student namespace built from
the instructor's notebook with one named mutant applied, through the real request files
and the kernel side of the protocol (the code the grading kernel runs).
"""

from __future__ import annotations

import importlib.util

import pytest

from autograder import kernel_side
from autograder.assignment_spec import AssignmentSpec
from autograder.checklib import CheckFailure
from autograder.course import notebook_from_text
from autograder.protocol import Submission
from autograder.submissions import apply_mutant

# The cells the exercise needs besides its own: the imports, the blog's module and the
# LayerNorm of exercise 1 (its solution).
SETUP_CELLS = ("setup", "layer_norm", "blog_embeddings")
# The checks' markers are registered by the grader's pytest run, not this one.
pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")


class InProcessKernel:
    """The part of a kernel session a :class:`Submission` talks to, run in this process:
    each request is handled by the bridge the grading kernel installs."""

    slot = 0

    def __init__(self, namespace):
        self.bridge = kernel_side.make_bridge(namespace)

    def ensure_alive(self, nb) -> bool:
        return True

    def execute_silently(self, code: str, timeout: float) -> dict:
        exec(code, {"__autograder__": self.bridge})
        return {"status": "ok"}


def _student(spec: AssignmentSpec, notebook: str, cell: str, mutant: str | None):
    """A namespace holding the notebook's setup and ``cell`` (the solution, or the solution
    with ``mutant`` applied)."""
    text = (apply_mutant(spec, next(m for m in spec.mutants if m.name == mutant))
            if mutant else spec.source_text(notebook))
    namespace: dict = {"__name__": "__main__"}
    for c in notebook_from_text(text).cells:
        if c.metadata.get("nbgrader", {}).get("grade_id") in (*SETUP_CELLS, cell):
            exec(compile(c.source, f"<{c.metadata['nbgrader']['grade_id']}>", "exec"), namespace)
    return namespace


def _checks(spec: AssignmentSpec, module: str):
    path = spec.checks_dir() / f"{module}.py"
    loaded = importlib.util.spec_from_file_location(f"hidden_{path.stem}", path)
    checks = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(checks)
    return checks


@pytest.fixture(scope="module")
def blocks():
    return AssignmentSpec.load("05-blocks")


def _submission(spec, tmp_path, mutant):
    namespace = _student(spec, "blocks", "bert_embeddings", mutant)
    return Submission(InProcessKernel(namespace), nb=None, exchange_dir=tmp_path)


def test_positions_counted_from_one_get_their_own_hint(blocks, tmp_path):
    checks = _checks(blocks, "test_bert_embeddings")
    student = _submission(blocks, tmp_path, "positions-from-one")
    # Shorter than the table: the answer is token t reading row t + 1.
    for check in (checks.test_positions_matter, checks.test_default_segment_is_a):
        with pytest.raises(CheckFailure, match="start at 1. The first token is position 0"):
            check(student)  # not the segment hint the second check gives otherwise
    # As long as the table: the last id runs past its end, an IndexError in torch.
    with pytest.raises(CheckFailure, match=r"index error .* must be 0, 1, \.\.\., T-1"):
        checks.test_matches_reference(student)


def test_the_hints_stay_quiet_for_right_and_for_other_wrong_answers(blocks, tmp_path):
    checks = _checks(blocks, "test_bert_embeddings")
    right = _submission(blocks, tmp_path / "right", None)
    checks.test_positions_matter(right)
    checks.test_default_segment_is_a(right)
    checks.test_matches_reference(right)
    no_segments = _submission(blocks, tmp_path / "segments", "segments-ignored")
    with pytest.raises(CheckFailure) as failure:
        checks.test_matches_reference(no_segments)
    assert "token_type_ids change nothing" in str(failure.value)
    assert "position" not in str(failure.value)
