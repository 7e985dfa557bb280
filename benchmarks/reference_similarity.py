"""How the comparison with the reference treats honest work and disguised copies.

Hands in every solution of ``tests/fixtures/similarity`` (01-attention): the independent
ones (written from the released notebook alone; ``fay`` the most direct way the formulas
and hints allow, ``gus`` close to them too) and the planted copies (``copy-of-reference``:
renamed, reordered, comments changed; ``disguised-reference``: locals renamed and comments
dropped). For each it prints its similarity to the reference as the pairwise comparison
measures it (raw) and beyond the honest baseline (:mod:`autograder.reports.reference_baseline`).
Each independent solution is measured *left out*: the baseline then comes from the other
independent solutions and the class, never from itself. Ends with both rates: independent
solutions flagged, disguised copies flagged, before and after.

    python benchmarks/reference_similarity.py [--class-size 300] \
        [--assignment 03-efficient-attention]
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
from pathlib import Path

from autograder.reports import reference_baseline, similarity
from autograder.reports.similarity_report import load
from autograder.workspace.course import Course

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "similarity"))
import make_class  # noqa: E402
from tables import print_command  # noqa: E402

NAME = "01-attention"
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "similarity"


def measure(course: Course, use_panel: bool = True) -> dict[str, tuple]:
    """``{student: (raw score, score beyond the baseline, flagged raw, flagged now,
    flagged pairs raw, flagged pairs now)}`` against the reference; each independent
    solution is left out of the baseline it is judged by (``use_panel=False``: the
    baseline is the class median alone)."""
    students, reference, _ = load(course, NAME)
    settings = similarity.Settings()
    rows = {}
    for left_out in [None, *make_class.INDEPENDENT]:
        result = similarity.compare(students, reference, settings)
        raw = {m.a: m for m in result.reference}
        raw_flagged = {m.a for m in result.flagged()[1]}
        raw_pairs = {s: _paired(result, s) for s in students}
        panel = {a: students[a] for a in make_class.INDEPENDENT
                 if a != left_out and use_panel}
        reference_baseline.discount(result, reference, panel)
        now = {m.a: m for m in result.reference}
        now_flagged = {m.a for m in result.flagged()[1]}
        for student in ([left_out] if left_out else
                        [s for s in students if s not in make_class.INDEPENDENT]):
            rows[student] = (raw[student].score, now[student].score,
                             student in raw_flagged, student in now_flagged,
                             raw_pairs[student], _paired(result, student))
    return rows


def measure_panel(course: Course, name: str, folder: Path) -> list[tuple]:
    """``reference_baseline.left_out`` on the independent solutions in ``folder``."""
    students, reference = reference_baseline.panel_and_reference(course, name, folder)
    return reference_baseline.left_out(students, reference)


def _class_benchmark():
    """benchmarks/similarity.py as a module (its generated students)."""
    path = Path(__file__).resolve().parent / "similarity.py"
    spec = importlib.util.spec_from_file_location("similarity_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _paired(result, student: str) -> list[str]:
    """Students flagged as a pair with ``student`` though neither copied the other."""
    planted = {frozenset(item) for item in make_class.PLANTED.items()}
    return sorted(f"{m.b if m.a == student else m.a} {m.score:.0%}"
                  for m in result.flagged()[0]
                  if student in (m.a, m.b) and frozenset((m.a, m.b)) not in planted
                  and not {m.a, m.b} <= set(make_class.PLANTED))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--class-size", type=int, default=0,
                        help="pad the class to this size with the generated students of "
                        "benchmarks/similarity.py (common ways of writing each step)")
    parser.add_argument("--assignment", action="append", default=[],
                        help="also measure this assignment's independent solutions in "
                        "tests/fixtures/similarity/NAME/ (e.g. 03-efficient-attention)")
    args = parser.parse_args()
    print_command(__file__)
    with tempfile.TemporaryDirectory() as tmp:
        course = Course(Path(tmp) / "workspace")
        course.init()
        course.release(NAME, exchange=False)
        for student in make_class.INDEPENDENT + list(make_class.PLANTED):
            make_class.hand_in(course, NAME, student, make_class.solutions_of(student))
        if args.class_size:
            generated = _class_benchmark()
            rng = random.Random(0)
            named = len(make_class.INDEPENDENT) + len(make_class.PLANTED)
            for i in range(args.class_size - named):
                make_class.hand_in(course, NAME, f"student-{i:03d}",
                                   generated.generated_student(rng))
        rows = measure(course)
        median_only = measure(course, use_panel=False)
        others = []
        for name in args.assignment:
            course.release(name, exchange=False)
            others.append((name, measure_panel(
                course, name, FIXTURES / name)))
    threshold = similarity.Settings().threshold
    print(f"{NAME}: similarity to the reference (flag at {threshold:.0%})")
    print(f"  {'student':22s} {'kind':12s} {'raw':>5s} {'beyond baseline':>16s} "
          f"{'(class median only)':>20s}")
    written = make_class.INDEPENDENT + list(make_class.PLANTED)
    for student in written:
        raw, now, *_ = rows[student]
        kind = "copy" if student in make_class.PLANTED else "independent"
        print(f"  {student:22s} {kind:12s} {raw:5.0%} {now:16.0%} "
              f"{median_only[student][1]:20.0%}")
    groups = {
        "independent (written)": make_class.INDEPENDENT,
        "generated students": sorted(set(rows) - set(written)),
        "disguised copies of the reference": [
            c for c, of in make_class.PLANTED.items() if of == "reference"],
    }
    for label, table in (("raw", rows), ("beyond baseline", rows),
                         ("class median only", median_only)):
        flag = 2 if label == "raw" else 3
        parts = [f"{group} {sum(table[s][flag] for s in members)}/{len(members)}"
                 for group, members in groups.items() if members]
        print(f"flagged against the reference, {label}: " + "; ".join(parts))
    for label, index in (("raw", 4), ("beyond baseline", 5)):
        honest = [s for s in rows if s not in make_class.PLANTED]
        paired = {s: rows[s][index] for s in honest if rows[s][index]}
        print(f"honest students in a flagged pair (neither copied the other), {label}: "
              f"{len(paired)}/{len(honest)} {paired or ''}")
    for name, panel_rows in others:
        where = (FIXTURES / name).relative_to(FIXTURES.parents[2])
        print(f"\n{name}: the independent solutions of {where}, each judged "
              "with the others as the baseline, and a disguised copy of the reference")
        print(f"  {'author':34s} {'raw':>5s} {'beyond baseline':>16s}")
        for who, raw, now, flag_raw, flag_now in panel_rows:
            print(f"  {who:34s} {raw:5.0%}{'*' if flag_raw else ' '} {now:15.0%}"
                  f"{'*' if flag_now else ' '}")
        honest = [r for r in panel_rows if not r[0].startswith("disguised")]
        copy = [r for r in panel_rows if r[0].startswith("disguised")]
        for label, index in (("raw", 3), ("beyond baseline", 4)):
            print(f"{label}: independent flagged {sum(r[index] for r in honest)}/{len(honest)}, "
                  f"disguised copy flagged {sum(r[index] for r in copy)}/{len(copy)} (* flagged)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
