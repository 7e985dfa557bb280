"""`autograder validate` says why the reference solution lost points, not only where."""

from __future__ import annotations

from types import SimpleNamespace

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
