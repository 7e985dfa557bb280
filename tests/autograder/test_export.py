"""``autograder export``: what the gradebook holds (autograder, formgrader, extra credit)
comes out per student and exercise in CSV, JSON and Canvas's gradebook import format."""

import csv
import io
import json
import warnings

import pytest

from autograder.cli import main
from autograder.reports import export

NAME = "00-tiny"


@pytest.fixture(scope="module")
def graded(tiny_course):
    """Grades as ``autograder grade`` and a human in formgrader leave them (set through
    nbgrader's own API, so this test does not depend on how grading computes them)."""
    with tiny_course.gradebook() as gb, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nbgrader's own session handling (autoflush notes)
        gb.update_or_create_student("ada", first_name="Ada", last_name="Lovelace",
                                    email="ada@example.org", lms_user_id="101")
        gb.update_or_create_student("bo")
        gb.update_or_create_student("cy", lms_user_id="lti-3f9a")
        gb.update_or_create_student("dee", first_name="Dee", last_name="Absent")  # no hand-in
        for student, softmax, why in [
            ("ada", (2.0, None, None), (None, 0.5, 0.25)),  # written answer graded, + extra
            ("bo", (1.0, None, None), (None, None, None)),  # written answer still waiting
            ("cy", (0.0, 1.5, None), (None, 1.0, None)),  # a human overrode the autograder
        ]:
            gb.update_or_create_submission(NAME, student)
            for cell, (auto, manual, extra) in [("test_softmax", softmax), ("why_shift", why)]:
                grade = gb.find_grade(cell, "tiny", NAME, student)
                grade.auto_score, grade.manual_score, grade.extra_credit = auto, manual, extra
                grade.needs_manual_grade = cell == "why_shift" and manual is None
        gb.db.commit()
    return tiny_course


def test_json_record_per_student_and_exercise(graded):
    data = export.collect(graded, NAME)
    assert data["max_points"] == 3.0
    assert [(e["id"], e["kind"]) for e in data["exercises"]] == [
        ("test_softmax", "autograded"), ("why_shift", "manual")]
    students = {s["student_id"]: s for s in data["students"]}
    assert list(students) == ["ada", "bo", "cy", "dee"]
    ada = students["ada"]
    assert (ada["auto_points"], ada["manual_points"], ada["extra_credit"]) == (2.0, 0.5, 0.25)
    assert ada["total_points"] == 2.75 and not ada["needs_manual_grade"]
    assert ada["exercises"]["why_shift"] == {
        "auto_points": None, "manual_points": 0.5, "total_points": 0.75, "max_points": 1.0}
    assert students["bo"]["total_points"] == 1.0 and students["bo"]["needs_manual_grade"]
    cy = students["cy"]["exercises"]["test_softmax"]
    assert (cy["auto_points"], cy["manual_points"], cy["total_points"]) == (0.0, 1.5, 1.5)
    dee = students["dee"]
    assert not dee["submitted"] and dee["total_points"] is None
    assert json.loads(export.as_json(data)) == json.loads(json.dumps(data))


def test_csv_columns_are_stable_and_documented(graded):
    rows = list(csv.DictReader(io.StringIO(export.as_csv(export.collect(graded, NAME)))))
    per_exercise = [f"{ex}.{f}" for ex in ("test_softmax", "why_shift")
                    for f in export.EXERCISE_FIELDS]
    assert list(rows[0]) == export.STUDENT_COLUMNS + per_exercise
    ada, bo, cy, dee = rows
    assert (ada["total_points"], ada["why_shift.manual_points"], ada["max_points"]) == (
        "2.75", "0.5", "3")
    assert (bo["why_shift.total_points"], bo["needs_manual_grade"]) == ("0", "true")
    assert (cy["test_softmax.auto_points"], cy["test_softmax.total_points"]) == ("0", "1.5")
    assert (dee["submitted"], dee["total_points"], dee["last_name"]) == ("false", "", "Absent")


def test_canvas_file_reads_as_canvas_gradebook_import(graded, tmp_path):
    out = tmp_path / "canvas.csv"
    assert main(["export", NAME, "--course", str(graded.root), "--format", "canvas",
                 "--output", str(out), "--canvas-column", "Attention (1234)"]) == 0
    rows = list(csv.reader(out.open()))
    # What Canvas's importer checks: "Student" and "ID" first, "Section" ends the
    # student columns, a "Points Possible" row, then one row per student.
    assert rows[0] == ["Student", "ID", "SIS User ID", "SIS Login ID", "Section",
                       "Attention (1234)"]
    assert rows[1][0] == "Points Possible" and rows[1][-1] == "3"
    by_login = {r[3]: r for r in rows[2:]}
    assert by_login["ada"] == ["Lovelace, Ada", "101", "", "ada", "", "2.75"]
    assert by_login["cy"][:2] == ["cy", ""]  # a non-numeric LTI id is not a Canvas user id
    assert by_login["dee"][-1] == ""  # no submission: left unchanged in Canvas
    sis = export.as_canvas(export.collect(graded, NAME), key="sis_user_id")
    assert list(csv.reader(io.StringIO(sis)))[2][2:4] == ["ada", ""]


def test_export_of_an_unknown_assignment_says_what_to_do(graded, capsys):
    assert main(["export", "99-nothing", "--course", str(graded.root)]) == 2
    assert "autograder release 99-nothing" in capsys.readouterr().err


def test_output_goes_into_a_new_folder_and_a_folder_is_refused(graded, tmp_path, capsys):
    target = tmp_path / "term-1" / "grades.csv"
    assert main(["export", NAME, "--output", str(target), "--course", str(graded.root)]) == 0
    assert target.read_text().startswith("assignment,student_id,")
    assert main(["export", NAME, "--output", str(tmp_path), "--course", str(graded.root)]) == 2
    assert f"{tmp_path} is a folder: name a file in it" in capsys.readouterr().err
