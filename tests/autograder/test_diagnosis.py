"""Diagnosis by fingerprint, end to end: a planted classic mistake is named at the top of
its exercise's feedback, and the exercises that only fail because they call it say so.

Real grading of assignment 01 (sandboxed kernels, hidden checks, the mistake oracle) on two
made submissions: the forgotten 1/sqrt(d_k) and heads split along the wrong axis.
"""

import nbformat
import pytest

from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading.grade import grade
from autograder.grading.gradebook import read_result_file
from autograder.workspace.course import Course

pytestmark = pytest.mark.slow
NAME = "01-attention"
STUDENTS = ("mutant-no-scale", "mutant-heads-wrong-axis")


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("diagnosis") / "course")
    course.init()
    course.release(NAME, exchange=False)
    spec = course.spec(NAME)
    made = make_class(course, spec)
    write_submissions(course, spec, {s: made[s] for s in STUDENTS})
    grade(course, NAME, workers=2, progress=False, log=lambda *a: None)
    assert course.nbgrader_api().generate_feedback(NAME, force=True)["success"]
    return course


def _diagnoses(course, student):
    result = read_result_file(course, NAME, student)
    return {d["grade_cell"]: d for d in result["notebooks"]["attention"]["diagnoses"]}


def _report(course, student, grade_id):
    nb = nbformat.read(course.path("autograded", student, NAME, "attention.ipynb"), 4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
    return cell.outputs[0]["data"]["text/markdown"]


def test_the_mistake_is_named_first_and_explains_the_failures(course):
    found = _diagnoses(course, "mutant-no-scale")
    own = found["test_attention_weights"]
    assert own["mutant"] == "no-scale" and own["owner"] == "test_attention_weights"
    report = _report(course, "mutant-no-scale", "test_attention_weights").splitlines()
    assert report[2].startswith("- **Diagnosis:**") and "1/sqrt(d_k)" in report[2]
    # Every failing check sits under the diagnosis, none with a hint of its own (masks, NaN).
    assert "Hint" not in "\n".join(report)
    assert all(line.startswith(("  - ✘", "- ✔")) for line in report[3:]), report


def test_a_later_exercise_points_to_the_broken_one(course):
    found = _diagnoses(course, "mutant-no-scale")
    for cell in ("test_multi_head_attention", "test_decoder_block"):
        assert found[cell]["mutant"] == "no-scale"
        assert found[cell]["source_cell"] == "attention_weights"
        assert "`attention_weights`" in found[cell]["message"]
        assert "may well be right" in found[cell]["message"]


def test_a_mistake_of_another_exercise_is_told_apart(course):
    found = _diagnoses(course, "mutant-heads-wrong-axis")
    assert "test_attention_weights" not in found  # that exercise is right
    assert found["test_multi_head_attention"]["mutant"] == "heads-wrong-axis"
    assert found["test_decoder_block"]["owner"] == "test_multi_head_attention"


def test_the_feedback_page_leads_with_the_diagnosis(course):
    page = course.path("feedback", "mutant-no-scale", NAME, "attention.html").read_text()
    assert "Diagnosis:" in page and "without the factor 1/sqrt(d_k)" in page  # its explanation
    assert "cdnjs" not in page and "<math" in page  # maths drawn offline
