"""What "Check my work" shows follows the calendar of course.toml: one setting before the
due date, another after it, a third once grades are out; the check service, the Course
panel's view and ``autograder feedback`` all read the setting in force."""

from __future__ import annotations

import datetime as dt
import json
import re

import pytest

from autograder.workspace.course import CourseError
from autograder.workspace.outline import load_outline

ASSIGNMENT = "01-attention"
PAST, FUTURE = "2001-01-01T09:00:00", "2999-01-01T09:00:00"


def _outline(tmp_path, text: str):
    path = tmp_path / "course.toml"
    path.write_text(text)
    return load_outline(path)


def _moment(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone()


def test_the_setting_switches_at_the_due_date_and_when_grades_are_out(tmp_path):
    three_phases = ('{ name = "02-positional", visibility = "off", due = 2030-02-01, '
                    'visibility_after_due = "score", grades = 2030-02-08, '
                    'visibility_after_grades = "full" }')
    outline = _outline(tmp_path, f'''visibility = "names"
visibility_after_due = "full"
assignments = [
  {{ name = "01-attention", due = 2030-01-26T23:59:00 }},
  {three_phases},
  {{ name = "03-efficient-attention" }},
]
''')
    first, second, third = outline.assignments
    due = _moment("2030-01-26T23:59:00")
    second_before = dt.timedelta(seconds=1)
    assert first.visibility_at(due - second_before) == "names"
    assert first.visibility_at(due) == first.visibility_at(due + second_before) == "full"
    assert first.next_visibility(due - second_before) == (due, "full")
    assert first.next_visibility(due) is None
    # Three phases; a date is its first minute.
    assert [second.visibility_at(_moment(t)) for t in
            ("2030-01-31T23:59:59", "2030-02-01T00:00:00", "2030-02-08T00:00:00")] == \
        ["off", "score", "full"]
    assert second.next_visibility(_moment("2030-02-02T12:00:00")) == (
        _moment("2030-02-08T00:00:00"), "full")
    # Without a due date the course-wide later setting has nothing to follow.
    assert third.visibility_after_due is None
    assert third.visibility_at(_moment(FUTURE)) == "names" and third.next_visibility(
        _moment(PAST)) is None


def test_the_setting_in_force_now_with_due_dates_in_the_past_and_the_future(tmp_path):
    outline = _outline(tmp_path, f'''visibility = "names"
visibility_after_due = "full"
assignments = [
  {{ name = "01-attention", due = {PAST} }},
  {{ name = "02-positional", due = {FUTURE} }},
]
''')
    past, future = outline.assignments
    assert past.visibility == "full" and past.next_visibility(_moment("2026-01-01")) is None
    assert future.visibility == "names"
    assert future.next_visibility(dt.datetime.now().astimezone())[1] == "full"


@pytest.mark.parametrize("entry, complaint", [
    ('{ name = "01-attention", visibility_after_due = "full" }', "needs a due date"),
    ('{ name = "01-attention", due = 2030-01-01, visibility_after_grades = "full" }',
     "needs the date grades are released"),
    ('{ name = "01-attention", due = 2030-01-02, grades = 2030-01-01 }', "comes before due"),
    ('{ name = "01-attention", due = 2030-01-02, visibility_after_due = "all" }', "use one of"),
])
def test_settings_that_cannot_take_effect_are_refused(tmp_path, entry, complaint):
    with pytest.raises(CourseError, match=re.escape(complaint)):
        _outline(tmp_path, f"assignments = [\n  {entry},\n]\n")


def test_feedback_waits_for_the_calendar(tmp_path):
    from autograder.workspace.visibility_calendar import feedback_hold

    outline = _outline(tmp_path, f'''visibility = "names"
assignments = [
  {{ name = "01-attention", due = {FUTURE}, visibility_after_due = "full" }},
  {{ name = "02-positional", due = {PAST}, visibility_after_due = "full" }},
  {{ name = "03-efficient-attention", visibility = "off" }},
]
''')
    held, open_, plain = outline.assignments
    assert "2999-01-01T09:00" in feedback_hold(held) and "shows everything" in feedback_hold(held)
    assert feedback_hold(open_) is None
    assert feedback_hold(plain) is None  # no calendar: the instructor's to release, as before


# -- in a real Jupyter server (the fixtures of tests/labext/conftest.py) --------------------
def _with_outline(course, tmp_path, text):
    """Point the workspace at a course.toml holding ``text``; returns the restorer."""
    outline = tmp_path / "course.toml"
    outline.write_text(text)
    settings = course.root / "autograder.json"
    saved = settings.read_text()
    settings.write_text(json.dumps({**json.loads(saved), "course_file": str(outline)}))
    return lambda: settings.write_text(saved)


def _calendar(due: str, before: str = "names", after: str = "full") -> str:
    return (f'assignments = [{{ name = "{ASSIGNMENT}", due = {due}, visibility = "{before}", '
            f'visibility_after_due = "{after}" }}]\n')


@pytest.mark.slow
async def test_check_my_work_shows_more_once_the_due_date_has_passed(
        check, save, notebooks, course, tmp_path, jp_fetch):
    restore = _with_outline(course, tmp_path, _calendar(FUTURE))
    try:
        status, before = await check(save(notebooks["mutant-no-scale"]))
        assert status == 200 and before["visibility"] == "names"
        checks = [c for e in before["exercises"] for c in e["checks"]]
        assert checks and all(c["message"] is None for c in checks)
        panel = json.loads((await jp_fetch("autograder", "api", "course")).body)
        item = next(a for a in panel["assignments"] if a["name"] == ASSIGNMENT)
        assert item["visibility"] == "names"
        assert item["visibility_next"]["visibility"] == "full"
        assert item["visibility_next"]["at"].startswith("2999-01-01T09:00")

        _with_outline(course, tmp_path, _calendar(PAST))
        status, after = await check(save(notebooks["mutant-no-scale"]))
        assert status == 200 and after["visibility"] == "full" and after["score"] == \
            before["score"]
        assert any(c["message"] for e in after["exercises"] for c in e["checks"])
        panel = json.loads((await jp_fetch("autograder", "api", "course")).body)
        item = next(a for a in panel["assignments"] if a["name"] == ASSIGNMENT)
        assert item["visibility"] == "full" and item["visibility_next"] is None

        # Switched off until the deadline, and off again after it.
        for due, before_due, after_due in ((FUTURE, "off", "full"), (PAST, "full", "off")):
            _with_outline(course, tmp_path, _calendar(due, before_due, after_due))
            status, answer = await check(save(notebooks["mutant-no-scale"]))
            assert status == 403 and "switched off" in answer["message"]
    finally:
        restore()


@pytest.mark.slow
def test_autograder_feedback_follows_the_same_rule(course, tmp_path, capsys):
    from autograder.cli import main

    restore = _with_outline(course, tmp_path, _calendar(FUTURE))
    try:
        assert main(["feedback", ASSIGNMENT, "--course", str(course.root)]) == 2
        assert "release it then" in capsys.readouterr().err
        _with_outline(course, tmp_path, _calendar(PAST))
        # Past the calendar's hold: what stops it now is that nothing was graded yet.
        assert main(["feedback", ASSIGNMENT, "--course", str(course.root)]) == 2
        assert "no graded submission" in capsys.readouterr().err
        _with_outline(course, tmp_path, _calendar(FUTURE))
        assert main(["feedback", ASSIGNMENT, "--course", str(course.root), "--force"]) == 2
        assert "no graded submission" in capsys.readouterr().err
    finally:
        restore()
