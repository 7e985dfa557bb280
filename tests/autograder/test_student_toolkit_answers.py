"""The student toolkit holds no answer of a locked assignment, under any name.

Stubbing the graded names is not enough where the toolkit computes an exercise a second
time (04's tuned kernels beside the teaching kernel): such code is listed in the
assignment's ``withhold``, and :mod:`autograder.student.answer_overlap` compares everything left
in the staged toolkit with the locked solutions to find what is not listed.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from autograder.student.answer_overlap import THRESHOLD, answer_overlaps, function_bodies
from autograder.student.toolkit_wheel import stage_student_toolkit, stub_source
from autograder.workspace.assignment_spec import AssignmentSpec, CourseError
from autograder.workspace.course import ASSIGNMENTS_DIR, Course
from autograder.workspace.outline import COURSE_FILE
from toolkit.notebook import unwritten_exercise


def test_definitions_under_if_and_try_are_stubbed_and_nested_functions_are_not():
    source = (
        "if HAS_TRITON:\n"
        "    def kernel(x):\n"
        "        '''Doc.'''\n"
        "        return x + 1\n"
        "else:\n"
        "    kernel = None\n"
        "try:\n"
        "    class Fast:\n"
        "        def forward(self, x):\n"
        "            return x * 2\n"
        "except ImportError:\n"
        "    pass\n"
        "def outer():\n"
        "    def kernel(x):\n"
        "        return x\n"
        "    return kernel\n"
    )
    new, stubbed = stub_source(source, {"kernel": "`kernel` is withheld (assignment X)",
                                        "Fast": "`Fast` is withheld (assignment X)"})
    assert sorted(stubbed) == ["Fast", "kernel"]
    namespace = {"HAS_TRITON": True}
    exec(new, namespace)
    for call in (lambda: namespace["kernel"](1), lambda: namespace["Fast"]().forward(1)):
        with pytest.raises(NotImplementedError) as error:
            call()
        assert unwritten_exercise(error.value).state == "withheld"
    assert namespace["kernel"].__doc__ == "Doc."
    assert namespace["outer"]()(5) == 5  # a function's own inner function is not module level


@pytest.fixture
def assignments(tmp_path) -> Path:
    """A copy of the course's assignments, to edit."""
    copy = tmp_path / "assignments"
    shutil.copytree(ASSIGNMENTS_DIR, copy)
    return copy


def _set_withhold(assignments: Path, name: str, entries: list[str]) -> None:
    toml = assignments / name / "assignment.toml"
    text = re.sub(r"(?ms)^withhold = \[.*?^\]\n", "", toml.read_text())
    line = f"withhold = {entries!r}\n".replace("'", '"')
    first_table = text.index("[[mutants]]")  # top-level keys come before the tables
    toml.write_text(text[:first_table] + line + "\n" + text[first_table:])


@pytest.mark.parametrize("entry, says", [
    ("toolkit.kernels.flash_tuned.no_such_kernel",
     "toolkit/kernels/flash_tuned.py defines no function or class 'no_such_kernel'"),
    ("toolkit.kernels.no_such_module.kernel", "there is no module toolkit.kernels.no_such_module"),
    ("numpy.linalg.solve", "name a definition of a toolkit module"),
])
def test_a_withhold_entry_that_names_nothing_is_refused(assignments, tmp_path, entry, says):
    _set_withhold(assignments, "04-flash-attention", [entry])
    with pytest.raises(CourseError) as error:
        stage_student_toolkit(tmp_path / "toolkit", assignments)
    message = str(error.value)
    assert "04-flash-attention/assignment.toml: withhold entry" in message, message
    assert entry in message and says in message, message


def test_nothing_left_in_the_student_toolkit_holds_a_locked_answer(tmp_path):
    staged = tmp_path / "toolkit"
    stage_student_toolkit(staged, ASSIGNMENTS_DIR)
    overlaps = answer_overlaps(staged, ASSIGNMENTS_DIR)
    assert not overlaps, (
        "the student toolkit still holds these answers; add the definitions to the "
        "assignment's `withhold` (or rewrite them if they only share a pattern):\n"
        + "\n".join(map(str, overlaps)))


def test_the_comparison_finds_a_kernel_that_is_not_withheld(assignments, tmp_path):
    """Without 04's `withhold`, the tuned forward kernel is found: the check above can fail."""
    _set_withhold(assignments, "04-flash-attention", [])
    staged = tmp_path / "toolkit"
    stage_student_toolkit(staged, assignments)
    found = {(o.exercise, o.definition.split(" ")[-1]): o.share
             for o in answer_overlaps(staged, assignments)}
    assert found.get(("flash_attention_kernel", "_flash_attn_fwd_kernel"), 0) >= THRESHOLD, found
    # Unlocked, an assignment's answers are back on purpose and nothing is compared.
    assert not answer_overlaps(staged, assignments, unlocked=["04-flash-attention"])


def test_function_bodies_leave_out_docstrings_and_name_methods():
    bodies = function_bodies("class A:\n    def f(self):\n        '''Doc.'''\n        return 1\n")
    assert bodies == [(2, "A.f", "        return 1")]


@pytest.mark.parametrize("edit, says", [
    (("explanation = ", "explaination = "), "unknown key(s) explaination; a mutant takes"),
    (("\nbreaks = ", "\nbroken = "), "unknown key(s) broken"),
])
def test_a_mutant_table_with_a_wrong_key_is_named(assignments, edit, says):
    """A key misspelt in a [[mutants]] table (or a top-level key put below one) names the
    file and the mutant instead of raising a TypeError from deep inside the loader."""
    toml = assignments / "01-attention" / "assignment.toml"
    toml.write_text(toml.read_text().replace(*edit, 1))
    with pytest.raises(CourseError) as error:
        AssignmentSpec.load("01-attention", assignments)
    message = str(error.value)
    assert str(toml) in message and "mutant 'no-scale'" in message, message
    assert says in message, message


def test_the_release_command_warns_of_an_answer_left_in_the_wheel(assignments, tmp_path, capsys):
    """An instructor whose assignment forgets a `withhold` reads it when building the wheel."""
    from autograder.cli import main

    _set_withhold(assignments, "04-flash-attention", [])
    course = Course(tmp_path / "course", assignments_dir=assignments,
                    course_file=COURSE_FILE)  # the workspace remembers the copy
    course.init()
    assert main(["release", "--student-toolkit", "--course", str(course.root)]) == 0
    printed = capsys.readouterr().out
    assert "warning: toolkit/kernels/flash_tuned.py:" in printed, printed
    assert "_flash_attn_fwd_kernel holds 90% of the answer to flash_attention_kernel " \
           "(04-flash-attention). Students can copy it: list it in that assignment's " \
           "`withhold`" in printed, printed
    # What the wheel holds back, so the instructor can see it before handing it out.
    assert "Locked (answers stubbed or withheld): 01-attention, 02-positional" in printed
    assert "; unlocked: none (--unlock NAME after a deadline)" in printed, printed
