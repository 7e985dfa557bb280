"""End to end on the tiny fixture: real nbgrader, real sandboxed kernels, real gradebook.

One class is graded once (module fixture) and the tests read the outcome.
"""

import json
import re
import warnings

import nbformat
import pytest
from nbgrader.api import Gradebook

from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading.grade import grade
from autograder.reports import report
from autograder.reports.feedback_page import waiting_for_a_person
from autograder.sandbox import forkserver

pytestmark = pytest.mark.slow


def _extra_students(course, spec):
    """Hostile and broken cases beyond the demo's, built from the reference."""
    base = make_class(course, spec)["reference"]["tiny"]

    def variant(edit):
        nb = nbformat.from_dict(json.loads(nbformat.writes(base)))
        edit(nb)
        return {"tiny": nb}

    def add_cell(source):
        return lambda nb: nb.cells.insert(2, nbformat.v4.new_code_cell(source))

    def drop_test_cell(nb):
        nb.cells = [
            c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") != "test_softmax"
        ]

    def edit_points(nb):
        for c in nb.cells:
            if c.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax":
                c.metadata["nbgrader"]["points"] = 100
                c.source = "print('I promise it works')"

    return {
        "exits-kernel": variant(add_cell("import os\nos._exit(3)")),
        "deleted-test-cell": variant(drop_test_cell),
        "edited-points": variant(edit_points),
        "uses-forbidden": variant(
            lambda nb: nb.cells.append(
                nbformat.v4.new_code_cell("def softmax(x):\n    return torch.softmax(x, -1)")
            )
        ),
        "empty-file": {"tiny": b""},
        # Saved under another name by the browser or the file manager.
        "renamed-notebook": {"tiny (1)": base},
    }


@pytest.fixture(scope="module")
def graded(tiny_course):
    spec = tiny_course.spec("00-tiny")
    students = make_class(tiny_course, spec, broken=True)
    students.update(_extra_students(tiny_course, spec))
    write_submissions(tiny_course, spec, students)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = grade(
            tiny_course, "00-tiny", workers=2, progress=False, cell_timeout=5, log=lambda *a: None
        )
    records = {r["student"]: r for r in report.collect(tiny_course, "00-tiny")}
    return tiny_course, first, records, caught


def test_every_submission_is_graded(graded):
    _, first, records, _ = graded
    assert sorted(first["graded"]) == sorted(records)
    assert len(records) == 15


def test_constant_answers_earn_nothing(graded):
    rec = graded[2]["constant"]
    assert rec["score"] == 0.0 and rec["max_score"] == 2.0


def test_reference_full_marks_and_manual_points_pending(graded):
    rec = graded[2]["reference"]
    assert (rec["score"], rec["max_score"]) == (2.0, 2.0)
    assert rec["manual_pending"] == 1.0


def test_stub_scores_zero_and_unanswered_question_gets_no_manual_wait(graded):
    rec = graded[2]["stub"]
    assert rec["score"] == 0.0 and rec["max_score"] == 2.0
    assert rec["manual_pending"] == 0.0  # an unchanged answer cell is "No response"
    assert rec["exercises"]["test_softmax"]["attempted"] is False


def test_mutant_is_caught_by_the_named_pitfall(graded):
    rec = graded[2]["mutant-no-shift"]
    assert rec["score"] < rec["max_score"]
    assert any(
        f["pitfall"] == "softmax without subtracting the max overflows"
        for f in rec["failed_checks"]
    )


def test_patching_allclose_in_the_kernel_earns_nothing(graded):
    assert graded[2]["tamper-allclose"]["score"] == 0.0


def test_stderr_warnings_cost_nothing(graded):
    assert graded[2]["warns-on-stderr"]["score"] == 2.0


def test_infinite_loop_is_stopped_and_reported(graded):
    rec = graded[2]["broken-infinite-loop"]
    assert rec["score"] == 2.0
    assert any("time limit" in n for n in rec["notes"])


def test_syntax_error_loses_only_what_depends_on_it(graded):
    rec = graded[2]["broken-syntax-error"]
    assert rec["score"] == 0.0
    # The note names the line in the cell, not the file name IPython gave the cell's code.
    note = next(n for n in rec["notes"] if "SyntaxError" in n)
    assert re.search(r"raised SyntaxError: .*\(line \d+ of the cell\)", note), note
    assert ".py" not in note, note
    # The checks of the function that cell should have defined send the student there.
    missing = [f["message"] for f in rec["failed_checks"] if "is not defined" in f["message"]]
    assert missing and all("the notes on your notebook say where" in m for m in missing)


def test_a_cell_that_kills_the_kernel_is_survived(graded):
    rec = graded[2]["exits-kernel"]
    assert rec["score"] == 2.0
    assert any("restarted" in n for n in rec["notes"])


@pytest.mark.parametrize(
    "student,reason", [("broken-not-json", "not valid notebook JSON"), ("empty-file", "empty"),
                       ("renamed-notebook", "tiny.ipynb is missing from the submission; it "
                                            "holds 'tiny (1).ipynb': if that is the work, move "
                                            "it to tiny.ipynb")]
)
def test_unreadable_notebooks_score_zero_with_a_reason(graded, student, reason):
    rec = graded[2][student]
    assert rec["score"] == 0.0 and any(reason in n for n in rec["notes"])


def test_a_notebook_over_the_size_limit_is_refused_before_it_is_read(tmp_path):
    from autograder.grading.sanitize import MAX_NOTEBOOK_BYTES, NotGradable, read_submission

    huge = tmp_path / "tiny.ipynb"
    with huge.open("wb") as f:
        f.truncate(MAX_NOTEBOOK_BYTES + 1)  # sparse: no disk is used
    with pytest.raises(NotGradable, match=f"over the {MAX_NOTEBOOK_BYTES // 2**20} MiB limit"):
        read_submission(huge)


def test_tampered_test_cells_are_restored_and_reported(graded):
    records = graded[2]
    assert records["deleted-test-cell"]["score"] == 2.0
    assert any("deleted" in n for n in records["deleted-test-cell"]["notes"])
    edited = records["edited-points"]
    assert edited["max_score"] == 2.0 and edited["score"] == 2.0
    assert any("points" in n for n in edited["notes"]) and any(
        "edited" in n for n in edited["notes"]
    )


def test_restored_cell_keeps_the_autograded_notebook_valid(graded):
    """nbgrader puts a deleted grade cell back without a cell id; the autograded notebook
    must still be valid nbformat 4.5 (every cell has a unique id), and writing it must not
    lean on nbformat's repair (a warning today, an error in later nbformat versions)."""
    course, caught = graded[0], graded[3]
    path = course.path("autograded", "deleted-test-cell", "00-tiny", "tiny.ipynb")
    raw = json.loads(path.read_text())
    ids = [cell.get("id") for cell in raw["cells"]]
    assert "test_softmax" in [c["metadata"].get("nbgrader", {}).get("grade_id")
                              for c in raw["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), ids
    assert not [w for w in caught if "missing an id" in str(w.message)]


def test_forbidden_shortcut_is_reported(graded):
    rec = graded[2]["uses-forbidden"]
    assert rec["score"] == 0.0
    assert any("implement yourself" in f["message"] for f in rec["failed_checks"])


def test_gradebook_holds_the_same_scores(graded):
    course, _, records, _ = graded
    with course.gradebook() as gb:
        for student, rec in records.items():
            sub = gb.find_submission("00-tiny", student)
            assert sub.code_score == pytest.approx(rec["score"]), student


def test_rerun_grades_nothing_new_and_force_regrades_without_double_counting(graded):
    course, _, records, _ = graded
    again = grade(course, "00-tiny", workers=1, progress=False, log=lambda *a: None)
    assert again["graded"] == [] and len(again["skipped"]) == len(records)
    forced = grade(
        course, "00-tiny", students=["reference"], force=True, progress=False, log=lambda *a: None
    )
    assert forced["graded"] == ["reference"]
    with course.gradebook() as gb:
        assert gb.find_submission("00-tiny", "reference").code_score == 2.0


def test_reports_in_every_format(graded, tmp_path):
    course, _, records, _ = graded
    data = json.loads(report.as_json(list(records.values())))
    for rec in data:
        assert {"student", "score", "max_score", "manual_pending", "exercises"} <= set(rec)
    assert "reference" in report.as_csv(list(records.values()))
    table = report.as_table(list(records.values()))
    assert "Item analysis" in table and "softmax without subtracting the max" in table
    # Where grading time went: every notebook that ran was timed, phase by phase.
    timed = {r["student"]: r for r in data if r["seconds"] > 0}
    assert timed["reference"]["timings"]["checks"] > 0
    assert timed["broken-infinite-loop"]["timings"]["notebook"] >= 5  # its cell's time limit
    ran = list(timed.values())
    for r in ran:  # the phases add up to the whole, less the kernel's shutdown
        phases = sum(r["timings"].values())
        assert phases <= r["seconds"] + 0.1 and r["seconds"] < phases + 5, r
    slowest = max(ran, key=lambda r: r["seconds"])
    assert f"  {slowest['student']}: {slowest['seconds']:.1f} s (" in table
    if forkserver.enabled():
        # A worker's fork server loads the libraries once: its first kernel says so apart,
        # and the kernels forked after it start with no such wait.
        warmed = [r for r in ran if r["timings"].get("warm_up", 0) > 0]
        assert 1 <= len(warmed) < len(ran) / 2, [r["timings"] for r in ran]
        assert all(r["timings"]["kernel_start"] < r["timings"]["warm_up"] for r in warmed)
    report.plot(list(records.values()), tmp_path / "plot.png")
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"


def test_feedback_html_is_generated(graded):
    course = graded[0]
    result = course.nbgrader_api().generate_feedback("00-tiny", force=True)
    assert result["success"], result.get("log")
    html = (course.path("feedback", "reference", "00-tiny") / "tiny.html").read_text()
    assert "Hidden checks" in html
    # The written answer waits for a person: its heading and the summary say so, where
    # nbgrader's page reads "Score: 0.0 / 1.0".
    assert "Not graded yet: 1 point(s), given by a person" in html
    assert "1 pending" in html and "0 / 1, 1 point(s) not graded yet" in html
    written = html[html.index('<a name="why_shift">'):]
    assert "Score: 0.0" not in written[:written.index("panel-body")]
    # The made reference answers as a student would: no solution delimiters in its text.
    assert "exp overflows for large inputs" in written and "SOLUTION" not in html
    # An answer left as released is nbgrader's "No response": 0 points, nothing pending.
    stub = (course.path("feedback", "stub", "00-tiny") / "tiny.html").read_text()
    assert "(graded by a person): 0 / 1</li>" in stub and "Not graded yet" not in stub
    # Once a person gives points (0 included), the answer no longer waits.
    ids = {"db_url": course.db_url, "notebook": "tiny", "assignment": "00-tiny",
           "student": "reference"}
    nb = nbformat.read(course.path("autograded", "reference", "00-tiny") / "tiny.ipynb", 4)
    assert waiting_for_a_person(nb, {"nbgrader": ids}) == {"why_shift"}
    with Gradebook(course.db_url) as gradebook:
        given = gradebook.find_grade("why_shift", "tiny", "00-tiny", "reference")
        given.manual_score = 0.0
        gradebook.db.commit()
        try:
            assert waiting_for_a_person(nb, {"nbgrader": ids}) == set()
        finally:
            given.manual_score = None
            gradebook.db.commit()
