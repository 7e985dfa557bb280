"""``autograder validate``: prove an assignment's checks can tell right from wrong.

On a throwaway course (a temporary workspace, deleted afterwards) it grades the
reference solution (must get full marks), the released stub and a submission whose
every answer is a constant of the right shape (both must get zero, without stopping the
run), and every named mutant (must lose points on each grade cell it ``breaks``; only
the checks of those cells run for it). For each mutant it lists every check that caught
it and whether the diagnosis named it. A
reference that loses points is followed by each failed check's message, so the cause
(a check that expects another machine's numbers, a library that fails in the sandbox)
shows without grading it again by hand.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..grading.grade import grade
from ..reports.report import collect
from ..workspace.course import Course
from .submissions import make_class, write_submissions


def mutant_focus(spec) -> dict[str, tuple[str, ...]]:
    """``{student: grade cells}``, :func:`~autograder.grading.grade.grade`'s ``focus``: each
    made mutant is graded on the cells it says it breaks. What validation proves of a
    mutant is that it loses points there, so the checks of its other cells (most of the
    cost of grading it) are not run; the diagnosis counts them as passed (they hold the
    reference's code), as a whole grading would find them. The reference, the stub and
    the constant submission are graded whole."""
    return {f"mutant-{mutant.name}": tuple(mutant.breaks) for mutant in spec.mutants}


def expectations(spec, records: list[dict]) -> list[dict]:
    """One row per graded student: what was expected, what happened, pass/fail."""
    by_student = {r["student"]: r for r in records}
    rows = []

    def row(student, expected, ok, detail, why=()):
        rows.append({"student": student, "expected": expected, "ok": bool(ok), "detail": detail,
                     "why": list(why)})

    ref = by_student.get("reference")
    ref_ok = ref and ref["score"] == ref["max_score"] and ref["max_score"] > 0
    row("reference", "full marks", ref_ok, _score(ref) + _failures(ref),
        () if ref_ok else _why(ref))
    stub = by_student.get("stub")
    row("stub", "zero", stub and stub["score"] == 0, _score(stub) + _failures(stub, passed=True))
    constant = by_student.get("constant")
    row("constant", "zero (constant answers of the right shape)",
        constant and constant["score"] == 0, _score(constant) + _passes(constant))
    for mutant in spec.mutants:
        student = f"mutant-{mutant.name}"
        rec = by_student.get(student)
        if rec is None:
            row(student, f"loses points on {', '.join(mutant.breaks)}", False, "not graded")
            continue
        missed = [
            g
            for g in mutant.breaks
            if rec["exercises"].get(g, {}).get("score", 0)
            >= rec["exercises"].get(g, {}).get("max_score", 0)
        ]
        caught_by = sorted({f["check"] for f in rec["failed_checks"]})
        named = sorted({d["grade_cell"] for d in rec.get("diagnoses", [])
                        if d["mutant"] == mutant.name})
        if mutant.diagnosed:
            diagnosis = (f"; diagnosed on {', '.join(named)}" if named else
                         "; NOT diagnosed (its feedback does not name it)")
        else:
            diagnosis = ("; diagnosed, though assignment.toml says diagnosed = false" if named
                         else "; not diagnosed (diagnosed = false)")
        row(
            student,
            f"loses points on {', '.join(mutant.breaks)}"
            + ("" if mutant.diagnosed else ", not named"),
            not missed and bool(named) == mutant.diagnosed,
            _score(rec, mutant.breaks)
            + (f"; NOT caught on {', '.join(missed)}" if missed else "")
            + (f"; caught by {', '.join(caught_by)}" if caught_by else "")
            + diagnosis,
        )
    return rows


def _score(rec, cells=None) -> str:
    """``score/max``, of the whole notebook or of ``cells`` (a mutant's: graded alone)."""
    if rec is None:
        return "not graded"
    if cells is None:
        return f"{rec['score']:g}/{rec['max_score']:g}"
    mine = [rec["exercises"].get(g, {}) for g in cells]
    return (f"{sum(e.get('score', 0) for e in mine):g}/"
            f"{sum(e.get('max_score', 0) for e in mine):g} on {', '.join(cells)}")


def _passes(rec) -> str:
    """Where a degenerate submission still earned points (the checks to gate)."""
    if rec is None:
        return ""
    earned = [g for g, ex in rec["exercises"].items() if ex["score"] > 0]
    return f"; earned points on {', '.join(earned)}" if earned else ""


def _why(rec, width: int = 300) -> list[str]:
    """What went wrong for a submission that should have passed: each failed check's
    message and the grading notes (time-outs, a kernel that died), one line each, cut at
    ``width`` characters."""
    if rec is None:
        return []

    def one_line(text) -> str:
        text = " ".join(str(text or "").split())
        return text if len(text) <= width else text[: width - 3] + "..."

    return ([f"{f['check']}: {one_line(f.get('message')) or '(no message)'}"
             for f in rec["failed_checks"]]
            + [one_line(note) for note in rec.get("notes", [])])


def _failures(rec, passed=False) -> str:
    if rec is None:
        return ""
    if passed:
        return ""
    fails = rec["failed_checks"]
    return f"; failed: {', '.join(f['check'] for f in fails[:4])}" if fails else ""


def validate(names: list[str], workers: int | None = None, log=print, course_dir=None) -> bool:
    """Validate each assignment; print a table; True if every expectation holds."""
    all_ok = True
    with tempfile.TemporaryDirectory(prefix="autograder-validate-") as tmp:
        course = Course(Path(course_dir or tmp) / "course")
        log(f"validate: grading made submissions on a throwaway course in {course.root}"
            + ("" if course_dir else " (deleted afterwards)"))
        course.init()
        for name in names:
            spec = course.spec(name)
            course.release(name)
            write_submissions(course, spec, make_class(course, spec), workers=workers)
            grade(course, name, workers=workers, force=True, log=log, focus=mutant_focus(spec))
            rows = expectations(spec, collect(course, name))
            log(f"\nvalidate {name}:")
            width = max(len(r["student"]) for r in rows)
            for r in rows:
                mark = "ok  " if r["ok"] else "FAIL"
                log(f"  {mark} {r['student']:<{width}}  expected {r['expected']}: {r['detail']}")
                for line in r["why"]:
                    log(f"       {'':<{width}}  - {line}")
            all_ok &= all(r["ok"] for r in rows)
    return all_ok
