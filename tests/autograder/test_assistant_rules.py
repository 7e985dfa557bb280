"""Rules for students' coding assistants: in every release folder (and what the exchange
hands out) and in the student toolkit wheel, under each name the common assistants read;
the course turns them off or replaces their text in course.toml."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from autograder.authoring.scaffold import new_assignment
from autograder.workspace.assistant_rules import (
    DEFAULT_RULES,
    FILE_NAMES,
    WHEEL_FILE_NAMES,
    rules_from_setting,
)
from autograder.workspace.course import Course, CourseError
from autograder.workspace.nbgrader_settings import COURSE_ID
from autograder.workspace.outline import load_outline

ASSIGNMENTS = Path(__file__).resolve().parents[2] / "assignments"
CUSTOM = "# Our rules\n\nHints only, and never the code of an answer cell.\n"


def course_toml(folder: Path, setting: str | None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    lines = ['title = "A course"']
    if setting is not None:
        lines.append(f"assistant_rules = {setting}")
    (folder / "course.toml").write_text("\n".join(lines) + "\n")
    return folder / "course.toml"


def test_the_default_text_asks_for_a_tutor_not_an_author():
    text = DEFAULT_RULES.lower()
    for duty in ("explain", "hint", "review"):
        assert duty in text
    assert "do not" in text and "graded" in text and "notimplementederror" in text
    assert {"AGENTS.md", "CLAUDE.md", ".github/copilot-instructions.md", ".cursorrules"} \
        <= set(FILE_NAMES)
    assert all(not part.startswith(".") for name in WHEEL_FILE_NAMES
               for part in Path(name).parts)


def test_course_toml_chooses_default_off_or_its_own_text(tmp_path):
    assert load_outline(course_toml(tmp_path / "a", None), ASSIGNMENTS).assistant_rules \
        == DEFAULT_RULES
    assert load_outline(course_toml(tmp_path / "b", "true"), ASSIGNMENTS).assistant_rules \
        == DEFAULT_RULES
    assert load_outline(course_toml(tmp_path / "c", "false"), ASSIGNMENTS).assistant_rules \
        is None
    path = course_toml(tmp_path / "d", '"rules.md"')
    (path.parent / "rules.md").write_text(CUSTOM)
    assert load_outline(path, ASSIGNMENTS).assistant_rules == CUSTOM
    # No course.toml at all: the default.
    assert load_outline(tmp_path / "none.toml", ASSIGNMENTS).assistant_rules == DEFAULT_RULES


@pytest.mark.parametrize("setting, says", [
    ('"missing.md"', "no file"), ("3", "use true, false"), ('""', "use true, false")])
def test_a_bad_setting_says_how_to_fix_it(tmp_path, setting, says):
    with pytest.raises(CourseError, match=says):
        load_outline(course_toml(tmp_path, setting), ASSIGNMENTS)
    with pytest.raises(CourseError, match="empty"):
        (tmp_path / "blank.md").write_text("\n")
        rules_from_setting("blank.md", tmp_path / "course.toml")


@pytest.fixture(scope="module")
def assignments(tmp_path_factory):
    root = tmp_path_factory.mktemp("assignments")
    new_assignment("00-tiny", root, title="Tiny: softmax")
    return root


@pytest.mark.parametrize("setting, expected", [
    (None, DEFAULT_RULES), ("false", None), ('"rules.md"', CUSTOM)])
def test_a_release_carries_the_course_rules(tmp_path, assignments, setting, expected):
    path = course_toml(tmp_path / "course", setting)
    (path.parent / "rules.md").write_text(CUSTOM)
    course = Course(tmp_path / "workspace", assignments, course_file=path)
    course.init()
    released = course.release("00-tiny")
    outbound = course.exchange / COURSE_ID / "outbound" / "00-tiny"
    assert any(released.glob("*.ipynb")) and any(outbound.glob("*.ipynb"))
    for folder in (released, outbound):  # what students fetch from the exchange, too
        for name in FILE_NAMES:
            if expected is None:
                assert not (folder / name).exists(), name
            else:
                assert (folder / name).read_text() == expected, (folder, name)


@pytest.mark.slow
@pytest.mark.parametrize("rules", [DEFAULT_RULES, CUSTOM, None])
def test_the_student_wheel_carries_the_rules(tmp_path, rules):
    from autograder.student.toolkit_wheel import build_student_toolkit

    wheel = build_student_toolkit(tmp_path / "wheel", ASSIGNMENTS, assistant_rules=rules)
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        for name in WHEEL_FILE_NAMES:
            member = f"toolkit/{name}"
            if rules is None:
                assert member not in names
            else:
                assert archive.read(member).decode() == rules
