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

An assignment whose students hand in files besides the notebook (a trained checkpoint)
names a ``prepare`` script that makes them for each made submission. Where
``prepare_read_by`` says which grade cells read those files, only the submissions graded
on one of them are prepared (a mutant of another exercise is graded without its files,
on cells that never open them), and the reference is graded once more without its files
(``reference-no-files``): it must lose points on each of those cells and keep every
other point, which is what makes leaving the others unprepared sound.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..grading.grade import grade
from ..reports.report import collect
from ..workspace.course import Course
from .submissions import DEGENERATE, make_class, write_submissions

#: The reference handed in without the files ``prepare`` makes (see the module's text).
UNPREPARED = "reference-no-files"


def validation_submissions(course: Course, spec) -> dict[str, dict]:
    """The made submissions ``validate`` grades: :func:`make_class`'s, and
    :data:`UNPREPARED` where the assignment sets ``prepare_read_by``."""
    students = make_class(course, spec)
    if spec.prepare and spec.prepare_read_by:
        students[UNPREPARED] = students["reference"]
    return students


def prepared_for_validation(spec, students) -> list[str]:
    """The made submissions whose ``prepare`` run is needed: the reference and the stub
    (graded whole), and the mutants graded on a cell of ``prepare_read_by``; every one
    but the degenerate where ``prepare_read_by`` is unset."""
    read_by = set(spec.prepare_read_by)
    focus = mutant_focus(spec)
    return [s for s in students
            if s not in DEGENERATE and s != UNPREPARED
            and (not read_by or s not in focus or read_by & set(focus[s]))]


def run_validation(course: Course, name: str, *, workers: int | None = None, log=print,
                   progress: bool = True) -> list[dict]:
    """Release ``name`` in ``course``, make and grade its submissions; the rows of
    :func:`expectations`."""
    course.release(name)
    spec = course.spec(name)
    students = validation_submissions(course, spec)
    write_submissions(course, spec, students, workers=workers, progress=progress,
                      prepare=prepared_for_validation(spec, students))
    grade(course, name, workers=workers, force=True, log=log, progress=progress,
          focus=mutant_focus(spec))
    return expectations(spec, collect(course, name))


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
    unprepared = by_student.get(UNPREPARED)
    if unprepared is not None:
        read_by = list(spec.prepare_read_by)
        kept = [g for g in read_by if _full(unprepared, g)]
        lost = [g for g in unprepared["exercises"] if g not in read_by and not _full(unprepared, g)]
        row(UNPREPARED, f"loses points on {', '.join(read_by)} alone (prepare_read_by)",
            not kept and not lost,
            _score(unprepared, read_by)
            + (f"; NOT lost on {', '.join(kept)}: do its checks read the files?" if kept else "")
            + (f"; ALSO lost on {', '.join(lost)}: add them to prepare_read_by" if lost else ""),
            _why(unprepared) if lost else ())
    for mutant in spec.mutants:
        student = f"mutant-{mutant.name}"
        rec = by_student.get(student)
        if rec is None:
            row(student, f"loses points on {', '.join(mutant.breaks)}", False, "not graded")
            continue
        missed = [g for g in mutant.breaks if _full(rec, g)]
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


def _full(rec, cell) -> bool:
    """Whether ``rec`` kept every point of grade cell ``cell``."""
    exercise = rec["exercises"].get(cell, {})
    return exercise.get("score", 0) >= exercise.get("max_score", 0)


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
            rows = run_validation(course, name, workers=workers, log=log)
            log(f"\nvalidate {name}:")
            width = max(len(r["student"]) for r in rows)
            for r in rows:
                mark = "ok  " if r["ok"] else "FAIL"
                log(f"  {mark} {r['student']:<{width}}  expected {r['expected']}: {r['detail']}")
                for line in r["why"]:
                    log(f"       {'':<{width}}  - {line}")
            all_ok &= all(r["ok"] for r in rows)
    return all_ok
