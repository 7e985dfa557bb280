"""`autograder validate`'s report (why the reference lost points, what each mutant and the
reference without its files show) and what it prepares."""

from __future__ import annotations

import shutil
from types import SimpleNamespace

import pytest

from autograder.authoring.validate import expectations


def _record(student, score, failed=(), notes=()):
    return {"student": student, "score": score, "max_score": 15.0, "exercises": {},
            "failed_checks": [{"check": c, "message": m} for c, m in failed],
            "diagnoses": [], "notes": list(notes)}


def test_a_failing_reference_shows_each_check_message_and_the_notes():
    long = "a score-sized tensor was created\n  " + "x" * 400
    records = [
        _record("reference", 14.0, failed=[("test_never_builds_the_score_matrix", long)],
                notes=["kernel died after 120 s"]),
        _record("stub", 0.0, failed=[("test_matches", "NotImplementedError")]),
        _record("constant", 0.0),
    ]
    rows = {r["student"]: r for r in expectations(SimpleNamespace(mutants=[]), records)}
    ref = rows["reference"]
    assert not ref["ok"]
    first, note = ref["why"]
    check, message = first.split(": ", 1)
    assert check == "test_never_builds_the_score_matrix"
    assert message.startswith("a score-sized tensor was created x")
    assert "\n" not in first and len(first) <= 340 and first.endswith("...")
    assert note == "kernel died after 120 s"
    assert rows["stub"]["ok"] and rows["stub"]["why"] == []


def test_a_passing_reference_has_nothing_to_explain():
    records = [_record("reference", 15.0), _record("stub", 0.0), _record("constant", 0.0)]
    rows = expectations(SimpleNamespace(mutants=[]), records)
    assert all(r["ok"] and r["why"] == [] for r in rows)


def test_a_mutant_must_be_named_by_the_diagnosis_unless_marked_otherwise():
    """A mutant that loses its points but that the feedback does not name fails validation;
    one marked ``diagnosed = false`` must stay unnamed."""
    from autograder.workspace.assignment_spec import Mutant

    def mutant(name, diagnosed=True):
        return Mutant(name, "a pitfall", "nb", "x", "y", ["test_a"], diagnosed=diagnosed)

    def made(name, named):
        record = _record(f"mutant-{name}", 0.0, failed=[("test_a_values", "wrong")])
        record["exercises"] = {"test_a": {"score": 0.0, "max_score": 2.0}}
        record["diagnoses"] = [{"grade_cell": "test_a", "mutant": name}] if named else []
        return record

    spec = SimpleNamespace(mutants=[mutant("named"), mutant("unnamed"),
                                    mutant("raises", diagnosed=False),
                                    mutant("raises-but-named", diagnosed=False)])
    records = [_record("reference", 15.0), _record("stub", 0.0), _record("constant", 0.0),
               made("named", True), made("unnamed", False), made("raises", False),
               made("raises-but-named", True)]
    ok = {r["student"]: r["ok"] for r in expectations(spec, records)}
    assert ok["mutant-named"] and ok["mutant-raises"]
    assert not ok["mutant-unnamed"] and not ok["mutant-raises-but-named"]


def _graded(student, cells):
    """A record with ``cells`` as ``{grade cell: (score, max)}``."""
    record = _record(student, sum(s for s, _ in cells.values()))
    record["exercises"] = {g: {"score": s, "max_score": m} for g, (s, m) in cells.items()}
    return record


def test_the_reference_without_its_files_loses_points_exactly_where_they_are_read():
    """``reference-no-files`` passes when the cells of ``prepare_read_by`` lose points and
    no other does; a listed cell that keeps its points, or another cell that loses some
    (skipping preparation would then change a mutant's grade), fails and says which."""
    from autograder.authoring.validate import UNPREPARED

    spec = SimpleNamespace(mutants=[], prepare_read_by=["test_checkpoint"])
    base = [_record("reference", 15.0), _record("stub", 0.0), _record("constant", 0.0)]

    def row(cells):
        rows = expectations(spec, [*base, _graded(UNPREPARED, cells)])
        return next(r for r in rows if r["student"] == UNPREPARED)

    good = row({"test_checkpoint": (0.0, 4.0), "test_model": (11.0, 11.0)})
    assert good["ok"], good
    kept = row({"test_checkpoint": (4.0, 4.0), "test_model": (11.0, 11.0)})
    assert not kept["ok"] and "NOT lost on test_checkpoint" in kept["detail"]
    also = row({"test_checkpoint": (0.0, 4.0), "test_model": (9.0, 11.0)})
    assert not also["ok"] and "ALSO lost on test_model" in also["detail"]
    # An assignment without prepared files has no such row.
    rows = expectations(SimpleNamespace(mutants=[], prepare_read_by=[]), base)
    assert UNPREPARED not in {r["student"] for r in rows}


def test_validation_prepares_only_what_the_graded_cells_read():
    """With ``prepare_read_by``, the reference, the stub and the mutants graded on one of
    its cells are prepared; the other mutants, the constant submission and the reference
    without files are not. Without it, every submission but the constant one is."""
    from autograder.authoring.validate import UNPREPARED, prepared_for_validation
    from autograder.workspace.assignment_spec import Mutant

    mutants = [Mutant("trains-wrong", "", "nb", "x", "y", ["test_model", "test_checkpoint"]),
               Mutant("norm-wrong", "", "nb", "x", "y", ["test_norms"])]
    students = ["reference", "stub", "constant", UNPREPARED, "mutant-trains-wrong",
                "mutant-norm-wrong"]
    spec = SimpleNamespace(mutants=mutants, prepare_read_by=["test_checkpoint"])
    assert prepared_for_validation(spec, students) == [
        "reference", "stub", "mutant-trains-wrong"]
    spec.prepare_read_by = []
    assert prepared_for_validation(spec, students) == [
        "reference", "stub", "mutant-trains-wrong", "mutant-norm-wrong"]


def test_write_submissions_prepares_the_named_submissions_alone(tiny_course, tmp_path):
    """``write_submissions(..., prepare=[...])`` runs the prepare script for those alone."""
    import dataclasses

    from autograder.authoring.submissions import make_class, write_submissions

    spec = tiny_course.spec("00-tiny")
    folder = tmp_path / "assignment"
    shutil.copytree(spec.path, folder)
    (folder / "mark.py").write_text(
        "import sys, pathlib\npathlib.Path('prepared.txt').write_text(sys.argv[1])\n")
    spec = dataclasses.replace(spec, path=folder, prepare="mark.py")
    reference = make_class(tiny_course, spec)["reference"]
    write_submissions(tiny_course, spec, {"p-one": reference, "p-two": reference},
                      progress=False, prepare=["p-one"])
    marks = {s: tiny_course.path("submitted", s, "00-tiny", "prepared.txt").is_file()
             for s in ("p-one", "p-two")}
    assert marks == {"p-one": True, "p-two": False}


def test_prepare_read_by_needs_a_prepare_script(tmp_path):
    from autograder.authoring.scaffold import new_assignment
    from autograder.workspace.course import AssignmentSpec, CourseError

    new_assignment("00-tiny", tmp_path, title="Tiny")
    toml = tmp_path / "00-tiny" / "assignment.toml"
    toml.write_text('prepare_read_by = ["test_softmax"]\n' + toml.read_text())
    with pytest.raises(CourseError, match="prepare_read_by .* no prepare script"):
        AssignmentSpec.load("00-tiny", tmp_path)
