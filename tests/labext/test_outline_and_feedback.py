"""course/course.toml and what a student may see of a check (no server, no kernels)."""

from __future__ import annotations

import datetime as dt
import re

import pytest

from autograder.labext.service_side.visibility import (
    check_names,
    restrict,
    scrub,
    student_message,
    student_view,
)
from autograder.workspace.course import PROJECT_ROOT, Course, CourseError, available_assignments
from autograder.workspace.outline import COURSE_FILE, load_outline


def test_course_toml_lists_only_what_exists_and_every_assignment():
    outline = load_outline(COURSE_FILE)  # raises on a name or a lecture that does not exist
    assert outline.path == COURSE_FILE and outline.readme == PROJECT_ROOT / "course/README.md"
    for lecture in outline.lectures:
        assert outline.lecture_source(lecture).is_file(), lecture
    missing = set(available_assignments()) - set(outline.names())
    assert not missing, (f"add a line to {COURSE_FILE} for each of {sorted(missing)}, "
                         'e.g. { name = "05-blocks" },')
    assert outline.names() == sorted(outline.names())


def _outline(tmp_path, text: str):
    path = tmp_path / "course.toml"
    path.write_text(text)
    return load_outline(path)


def test_outline_dates_visibility_and_defaults(tmp_path):
    outline = _outline(tmp_path, '''visibility = "names"
assignments = [
  { name = "01-attention", release = 2030-01-12, due = 2030-01-26T23:59:00 },
  { name = "02-positional", visibility = "off", title = "RoPE and friends" },
]
''')
    first, second = outline.assignments
    assert first.visibility == "names" and first.title.startswith("Attention")
    assert first.release == dt.date(2030, 1, 12) and not first.released_by(
        dt.datetime.now().astimezone())
    assert second.visibility == "off" and second.title == "RoPE and friends"
    assert second.released_by(dt.datetime.now().astimezone())


@pytest.mark.parametrize("text, complaint", [
    ('assignments = [{ name = "99-nope" }]', "no assignment '99-nope'"),
    ('assignments = [{ name = "01-attention", visibility = "secret" }]', "use one of"),
    ('assignments = [{ name = "01-attention", due = "friday" }]', "TOML date"),
    ('assignments = [{ name = "01-attention", colour = "red" }]', "unknown key"),
    ('assignments = [{ name = "01-attention" }, { name = "01-attention" }]', "twice"),
    ('lectures = [{ notebook = "missing.py" }]', "no lecture notebook"),
    ("assignments = [", "invalid TOML"),
])
def test_outline_errors_name_the_entry_and_the_fix(tmp_path, text, complaint):
    with pytest.raises(CourseError, match=re.escape(complaint)):
        _outline(tmp_path, text)


def test_release_all_keeps_answers_written_in_release(tmp_path, capsys):
    from autograder.cli import main

    workspace = tmp_path / "ws"
    course_file = tmp_path / "course.toml"
    course_file.write_text('assignments = [{ name = "01-attention" }]\n')
    course = Course(workspace, course_file=course_file)
    course.init()
    assert main(["release", "--all", "--course", str(workspace)]) == 0
    released = workspace / "release" / "01-attention" / "attention.ipynb"
    text = released.read_text()
    # The first stub (it names its exercise and ends "... in place of this `raise` line").
    answered = re.sub(r"raise NotImplementedError\(.*?line'\)", "return 42", text, count=1)
    assert answered != text
    released.write_text(answered)
    assert course.edited_release("01-attention") == ["attention.ipynb"]
    assert main(["release", "--all", "--course", str(workspace)]) == 0
    out = capsys.readouterr().out
    assert "Kept" in out and "return 42" in released.read_text()
    assert f"`autograder release 01-attention --force --course {course.root}` replaces" in out


def test_messages_lose_values_inputs_and_student_text():
    assert scrub("kv_cache_bytes(80, 8, 128, 4096) = 1,310,720, expected 2,621,440") == (
        "kv_cache_bytes(…) = …, expected …")
    assert scrub("gave 'secret', float32 expected") == "gave …, float32 expected"
    # A shape is what tells a student which axis is wrong, and compares no value: kept.
    assert scrub("split_heads of a (2, 5, 12) tensor into 3 heads has shape (2, 5, 3, 4), "
                 "expected (2, 3, 5, 4)") == ("split_heads of a (2, 5, 12) tensor into … heads "
                                              "has shape (2, 5, 3, 4), expected (2, 3, 5, 4)")
    assert scrub("should be a scalar, got shape (3,) not ()") == (
        "should be a scalar, got shape (3,) not ()")
    # A number in parentheses, or a call's arguments, is a value all the same.
    assert scrub("the total (7) of f(2, 3) differs") == "the total (…) of f(…) differs"
    # The student's own exception could carry the hidden inputs as a tuple: no shapes there.
    message, _ = student_message({"passed": False, "message":
                                  "SubmissionError: ValueError: inputs (3, 1, 4, 1, 5)"})
    assert message == "your code raised ValueError: inputs (…)"
    # A name the check asked for and the notebook lacks is kept (an identifier, no more).
    undefined = ("SubmissionError: NameError: 'top_k_gating' is not defined: run the cell "
                 "that defines it and keep its name (if that cell raised an error, the notes "
                 "on your notebook say where)")
    message, _ = student_message({"passed": False, "message": undefined})
    assert message == ("`top_k_gating` is not defined: run the cell that defines it and keep "
                       "its name (if that cell raised an error, the notes on your notebook say "
                       "where)")
    message, _ = student_message({"passed": False, "message": undefined.replace(
        "'top_k_gating'", "'inputs (3, 1, 4)'")})
    assert "3, 1, 4" not in message and "inputs" not in message
    message, hint = student_message({"passed": False, "message":
                                     "out differs (largest difference 0.5). Hint: scale by 1/d"})
    # A label whose value is scrubbed says nothing: it goes, not "(largest difference …)".
    assert message == "out differs" and hint == "scale by 1/d"
    # An author's formula is no value: axes and reciprocals stay as written.
    assert scrub("divide by sqrt(d_k), d_k = q.size(-1), the 1/sqrt(d_k) factor, softmax "
                 "over dim=-1 of k.transpose(-2, -1)") == (
        "divide by sqrt(d_k), d_k = q.size(-1), the 1/sqrt(d_k) factor, softmax over dim=-1 "
        "of k.transpose(-2, -1)")
    message, _ = student_message({"passed": False, "message":
                                  "SubmissionError: ValueError: got tensor([0.1234, 5.6])"})
    assert message == "your code raised ValueError: got tensor([…])"
    message, _ = student_message({"passed": False, "message": "RuntimeError: the hidden checks "
                                  "could not run (pytest exit 2): /checks/test_x.py line 3"})
    assert "test_x" not in message


def test_views_by_visibility():
    records = [
        {"description": "works [2-3]", "passed": False, "message": "wrong 3. Hint: h",
         "pitfall": "p"},
        {"description": "works [4-5]", "passed": True, "message": "", "pitfall": None},
    ]
    assert check_names(records) == ["works (case 1)", "works (case 2)"]
    trusted = {"cells": {"ex": {"score": 1.0, "max_score": 2.0, "passed": 1, "total": 2,
                                "checks": records}},
               "manual": {"essay": {"max_score": 1.0, "answered": True}},
               "events": ["grading error: RuntimeError: /secret/path"], "findings": []}
    full = student_view(trusted, "full")
    assert full["exercises"][0]["checks"][0] == {"name": "works (case 1)", "passed": False,
                                                 "message": "wrong …", "hint": "h",
                                                 "pitfall": "p"}
    assert full["exercises"][1]["status"] == "waiting" and "secret" not in str(full["notes"])
    ruled_out = {**trusted, "cells": {"ex": {**trusted["cells"]["ex"], "checks": [
        {**records[0], "pitfall_ruled_out": True}, records[1]]}}}
    assert student_view(ruled_out, "full")["exercises"][0]["checks"][0]["pitfall"] is None
    names = student_view(trusted, "names")["exercises"][0]["checks"]
    assert [c["message"] for c in names] == [None, None] and names[0]["pitfall"] is None
    score = student_view(trusted, "score")
    assert score["exercises"][0]["checks"] == [] and score["score"] == 1.0
    assert restrict(full["exercises"][0]["checks"], "score") == []
    assert restrict(full["exercises"][0]["checks"], "names")[0]["hint"] is None


def test_one_reason_behind_every_failure_is_said_once():
    def stub(where):
        return {"description": f"c {where}", "passed": False,
                "message": f"SubmissionError: NotImplementedError: `{where}` is not written yet "
                           f"(in `{where}`, line 3: raise NotImplementedError(...))"}

    def view(*records, visibility="full"):
        trusted = {"cells": {"ex": {"score": 0.0, "max_score": 2.0, "passed": 0,
                                    "total": len(records), "checks": list(records)}},
                   "manual": {}, "events": [], "findings": []}
        return student_view(trusted, visibility)["exercises"][0]

    # An exercise of three functions, none written: they are named together, once.
    shape = {"description": "names", "passed": True, "message": "", "structural": True}
    three = view(stub("apply_capacity"), stub("apply_capacity"), stub("sorted_dispatch"),
                 stub("SparseMoE.forward"), shape)
    assert three["shared_reason"] == ("not written yet: `apply_capacity`, `sorted_dispatch` "
                                      "and `SparseMoE.forward` still raise NotImplementedError")
    # ... and the names check the stub passes earns nothing until a check of values does.
    assert three["waiting_on_values"] == 1
    assert view(stub("f"), stub("f"))["shared_reason"] == (
        "not written yet: `f` still raises NotImplementedError")
    # A real failure among them, or a single failing check: each is shown on its own.
    wrong = {"description": "values", "passed": False, "message": "wrong 3"}
    assert view(stub("f"), stub("g"), wrong)["shared_reason"] is None
    assert view(stub("f"))["shared_reason"] is None
    assert view(wrong, {**wrong, "description": "more"})["shared_reason"] == "wrong …"
    # Once a check of the values passes, the names check counts.
    right = {"description": "values", "passed": True, "message": ""}
    assert view(stub("f"), shape, right)["waiting_on_values"] == 0
    assert view(stub("f"), stub("g"), visibility="names")["shared_reason"] is None


def test_a_failing_callee_is_named_first_when_names_may_be_shown():
    upstream = [{"grade_cell": "test_norm", "names": ["LayerNorm"], "attempted": True}]
    trusted = {"cells": {"ex": {"score": 0.0, "max_score": 2.0, "passed": 0, "total": 1,
                                "checks": [{"description": "d", "passed": False,
                                            "message": "wrong", "cause": None}],
                                "upstream": upstream,
                                "diagnoses": [{"message": "a named mistake"}]}},
               "manual": {}, "events": [], "findings": []}
    full = student_view(trusted, "full")["exercises"][0]["diagnoses"]
    assert full[0].startswith("This exercise calls `LayerNorm` (checked under `test_norm`")
    assert full[1] == "a named mistake"
    assert student_view(trusted, "names")["exercises"][0]["diagnoses"] == []


def test_exercise_titles_name_every_exercise_a_test_cell_checks():
    from autograder.labext.service_side.catalog import exercise_title

    assert exercise_title(["Exercise 1a: attention weights",
                           "Exercise 1b: scaled dot-product attention"]) == (
        "Exercises 1a-1b: attention weights, scaled dot-product attention")
    assert exercise_title(["2. Masks", "Exercise 2: three mask builders"]) == (
        "Exercise 2: three mask builders")
    assert exercise_title(["The experiment", "Question: what did you see?"]) == (
        "Question: what did you see?")
    assert exercise_title(["7. Pre-train a tiny BERT", "Training (not run while grading)"]) == (
        "7. Pre-train a tiny BERT")
    assert exercise_title([]) is None


def test_the_course_lab_never_asks_about_jupyter_news():
    """`make` gives this environment's JupyterLab defaults without the news prompt and the
    update check: a student's lab shows the course, not a privacy question."""
    import json
    from pathlib import Path

    from jupyterlab.commands import get_app_dir

    overrides = json.loads((Path(get_app_dir()) / "settings" / "overrides.json").read_text())
    assert overrides["@jupyterlab/apputils-extension:notification"] == {
        "fetchNews": "false", "checkForUpdates": False}
