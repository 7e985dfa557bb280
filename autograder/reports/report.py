"""``autograder report``: who scored what, why, and what the class got wrong.

Each record (one per student) has ``student``, ``score`` and ``max_score``
(automatic points, from the hidden checks), ``manual_max`` (points of the written
answers), ``manual_score`` (points a person already gave), ``manual_pending`` (points
still waiting for a person), ``total`` and ``total_max`` (both together), ``exercises``
(per grade cell: score, checks passed, whether it was attempted, diagnosed mistakes),
``failed_checks``, ``diagnoses``, ``notes`` (time-outs, tampering, unreadable
notebooks, a gradebook that no longer matches what ``grade`` wrote), and ``seconds`` and
``timings`` (how long grading took, in all and per phase).

The item analysis gives, per exercise, the share of students with full marks, how many
did not attempt it, the named mistakes diagnosed and how often, and the failed checks
that no diagnosis explains, with the pitfall each points to.
"""

from __future__ import annotations

import collections
import csv
import io
import json
import re
import statistics
import sys

from ..grading.gradebook import read_result_file
from ..grading.sanitize import grade_cell_ids
from ..workspace.course import Course


def measured(course: Course, name: str, student: str) -> list[str]:
    """What the checks measured in one student's work (a trained checkpoint's accuracy or
    loss), each text once, in the order the checks ran; empty when nothing was measured."""
    result = read_result_file(course, name, student) or {}
    found: list[str] = []
    for summary in result.get("notebooks", {}).values():
        for check in summary.get("checks", []):
            text = check.get("measured") or ""
            if text and text not in found:
                found.append(text)
    return found


def collect(course: Course, name: str) -> list[dict]:
    """One record per student with a results file, sorted by student id."""
    spec = course.require_released(name)
    records = []
    with course.gradebook() as gb:
        manual_ids = {nb: grade_cell_ids(gb, nb, spec.name)[1] for nb in spec.notebooks}
        for student in course.students_with_submissions(spec.name):
            result = read_result_file(course, spec.name, student)
            if result is None:
                continue
            record = {
                "student": student,
                "score": 0.0,
                "max_score": 0.0,
                "manual_max": 0.0,
                "manual_score": 0.0,
                "manual_pending": 0.0,
                "exercises": {},
                "failed_checks": [],
                "diagnoses": [],
                "notes": [],
                "seconds": 0.0,  # grading time, all notebooks together
                "timings": {},  # the same, per phase (warm_up, kernel_start, notebook, checks, ...)
            }
            for nb_id, summary in result["notebooks"].items():
                record["seconds"] += summary.get("seconds", 0.0)
                for phase, seconds in summary.get("timings", {}).items():
                    record["timings"][phase] = record["timings"].get(phase, 0.0) + seconds
                for gid, cell in summary["cells"].items():
                    diagnosed = [d for d in summary.get("diagnoses", [])
                                 if d["grade_cell"] == gid]
                    record["exercises"][gid] = {
                        "score": cell["score"],
                        "max_score": cell["max_score"],
                        "passed": cell["passed"],
                        "total": cell["total"],
                        "attempted": cell.get("attempted", True),
                        "diagnoses": [d["mutant"] for d in diagnosed],
                        # earlier exercises it calls that fail too (fix those first)
                        "upstream": [u["grade_cell"] for u in cell.get("upstream", [])],
                    }
                    record["score"] += cell["score"]
                    record["max_score"] += cell["max_score"]
                    _compare_with_gradebook(gb, record, gid, nb_id, spec.name, cell["score"])
                record["diagnoses"] += [
                    {k: d[k] for k in ("grade_cell", "mutant", "pitfall", "message", "owner")}
                    for d in summary.get("diagnoses", [])
                ]
                for check in summary["checks"]:
                    if not check["passed"]:
                        record["failed_checks"].append(
                            {
                                "exercise": check["grade_cell"],
                                "check": check["id"],
                                "description": check["description"],
                                "message": check["message"],
                                "pitfall": check.get("pitfall"),
                                "cause": check.get("cause"),
                            }
                        )
                record["notes"] += summary.get("findings", []) + summary.get("events", [])
                for gid in manual_ids[nb_id]:
                    grade = gb.find_grade(gid, nb_id, spec.name, student)
                    record["manual_max"] += grade.max_score
                    if grade.manual_score is not None:
                        record["manual_score"] += grade.manual_score
                    elif grade.auto_score is None:
                        record["manual_pending"] += grade.max_score
            record["total"] = record["score"] + record["manual_score"]
            record["total_max"] = record["max_score"] + record["manual_max"]
            record["timings"] = {k: round(v, 2) for k, v in record["timings"].items()}
            for key in ("score", "max_score", "manual_max", "manual_score", "manual_pending",
                        "total", "total_max", "seconds"):
                record[key] = round(record[key], 4)
            records.append(record)
    return records


def _compare_with_gradebook(gb, record, grade_id, notebook_id, assignment, ours) -> None:
    """Note a gradebook score that differs from what ``autograder grade`` wrote.

    Plain ``nbgrader autograde`` (or a hand edit) can overwrite our scores in the
    gradebook; formgrader and ``export`` would then show numbers this report does not.
    """
    try:
        grade = gb.find_grade(grade_id, notebook_id, assignment, record["student"])
    except Exception:  # noqa: BLE001 - a missing row is reported the same way
        grade = None
    theirs = None if grade is None else grade.auto_score
    if theirs is None or abs(theirs - ours) > 1e-6:
        record["notes"].append(
            f"the gradebook holds {theirs} for {grade_id}, but autograder graded "
            f"{ours:g}: run `autograder grade {assignment} --student {record['student']} "
            "--force` to write it again")


def item_analysis(records: list[dict]) -> dict:
    """Per exercise: full-marks rate, mean score, how many did not attempt it, how many
    failed it along with an earlier exercise it calls, and the named mistakes diagnosed;
    the failed checks none of those explains, with their pitfalls."""
    exercises: dict[str, dict] = {}
    for record in records:
        for gid, ex in record["exercises"].items():
            item = exercises.setdefault(gid, {
                "students": 0, "full_marks": 0, "points": 0.0, "max_score": ex["max_score"],
                "not_attempted": 0, "after_earlier": 0, "mistakes": collections.Counter(),
            })
            item["students"] += 1
            item["full_marks"] += ex["score"] >= ex["max_score"]
            item["points"] += ex["score"]
            item["not_attempted"] += not ex.get("attempted", True)
            item["after_earlier"] += bool(ex.get("upstream")) and ex.get("attempted", True)
        for diagnosis in record.get("diagnoses", []):
            item = exercises.get(diagnosis["grade_cell"])
            if item is not None:
                item["mistakes"][diagnosis["pitfall"]] += 1
    for item in exercises.values():
        item["pass_rate"] = (
            round(item["full_marks"] / item["students"], 4) if item["students"] else 0.0
        )
        item["mean_score"] = round(item.pop("points") / max(item["students"], 1), 4)
        item["mistakes"] = dict(item["mistakes"].most_common())
    failures = collections.Counter()
    pitfalls = {}
    for record in records:
        for fail in record["failed_checks"]:
            exercise = record["exercises"].get(fail["exercise"], {})
            # Grouped elsewhere: an exercise not attempted, one that fails with an earlier
            # exercise it calls, or a check a diagnosis explains.
            if (not exercise.get("attempted", True) or exercise.get("upstream")
                    or fail.get("cause")):
                continue
            key = (fail["exercise"], fail["check"])
            failures[key] += 1
            pitfalls[key] = (fail["description"], fail.get("pitfall"))
    checks = [
        {
            "exercise": ex,
            "check": check,
            "students": n,
            "description": pitfalls[(ex, check)][0],
            "pitfall": pitfalls[(ex, check)][1],
        }
        for (ex, check), n in failures.most_common()
    ]
    return {"exercises": exercises, "failed_checks": checks,
            "failed_check_families": check_families(checks)}


def check_families(checks: list[dict]) -> list[dict]:
    """``failed_checks`` with the cases of one parametrised check (``test_loss[10% of the
    points]``, ``test_loss[20% of the points]``, ...) as one entry: ``students`` is the
    most any case failed, ``fewest`` the least, ``cases`` how many cases failed."""
    families: dict[tuple, dict] = {}
    for check in checks:
        base, bracket, _ = check["check"].partition("[")
        key = (check["exercise"], base)
        family = families.get(key)
        if family is None:
            description = check["description"]
            if bracket:  # the case's id, which pytest appends to the description
                description = re.sub(r"\s*\[[^\]]*\]$", "", description)
            families[key] = {**check, "check": base, "description": description,
                             "fewest": check["students"], "cases": 1}
        else:
            family["students"] = max(family["students"], check["students"])
            family["fewest"] = min(family["fewest"], check["students"])
            family["cases"] += 1
    return sorted(families.values(), key=lambda f: -f["students"])


def as_json(records: list[dict]) -> str:
    return json.dumps(records, indent=2, sort_keys=True)


def as_csv(records: list[dict]) -> str:
    exercises = sorted({gid for r in records for gid in r["exercises"]})
    out = io.StringIO()
    writer = csv.writer(out)
    totals = ["score", "max_score", "manual_score", "manual_pending", "manual_max", "total",
              "total_max"]
    writer.writerow(["student", *totals, *exercises, "notes"])
    for r in records:
        writer.writerow(
            [
                r["student"],
                *[r[key] for key in totals],
                *[r["exercises"].get(g, {}).get("score", "") for g in exercises],
                " | ".join(r["notes"]),
            ]
        )
    return out.getvalue()


def as_table(records: list[dict]) -> str:
    """A plain-text report: one row per student, then the notes and the item analysis.

    Nothing is cut short: long notes go below the table, one per line.
    """
    exercises = sorted({gid for r in records for gid in r["exercises"]})
    manual = any(r["manual_max"] for r in records)
    header = ["student", "auto", *[g.removeprefix("test_") for g in exercises]]
    header += ["written", "total"] if manual else []
    rows = []
    for r in records:
        row = [r["student"], f"{r['score']:g}/{r['max_score']:g}"]
        for g in exercises:
            ex = r["exercises"].get(g)
            if ex is None:
                row.append("-")
                continue
            skipped = "" if ex.get("attempted", True) else " (n/a)"
            row.append(f"{ex['score']:g}/{ex['max_score']:g}{skipped}")
        if manual:
            written = (f"{r['manual_score']:g}/{r['manual_max']:g}" if not r["manual_pending"]
                       else f"{r['manual_pending']:g} pending")
            row += [written, f"{r['total']:g}/{r['total_max']:g}"]
        rows.append(row)
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines.append("auto = points from the hidden checks; (n/a) = not attempted"
                 + ("; written = answers a person grades in formgrader" if manual else ""))
    noted = [r for r in records if r["notes"] or r.get("diagnoses")]
    if noted:
        lines += ["", "Notes:"]
        for r in noted:
            for d in r.get("diagnoses", []):
                lines.append(f"  {r['student']}: {d['grade_cell']}: diagnosed: {d['pitfall']}")
            lines += [f"  {r['student']}: {note}" for note in r["notes"]]
    lines += grading_time(records)
    items = item_analysis(records)
    lines += ["", "Item analysis (share of students with full marks per exercise):"]
    for gid, item in sorted(items["exercises"].items()):
        skipped = f", {item['not_attempted']} not attempted" if item["not_attempted"] else ""
        if item["after_earlier"]:
            skipped += f", {item['after_earlier']} failing with an earlier exercise they call"
        lines.append(
            f"  {gid:<28} {item['pass_rate']:>6.0%}  mean {item['mean_score']:g}/"
            f"{item['max_score']:g}{skipped}"
        )
        for pitfall, n in item["mistakes"].items():
            lines.append(f"      {n:>3} x diagnosed: {pitfall}")
    if items["failed_checks"]:
        lines += ["", "Most failed checks no diagnosis explains (and the pitfall they point to):"]
        for fail in items["failed_check_families"][:12]:
            pit = f" -> {fail['pitfall']}" if fail["pitfall"] else ""
            many = fail["students"] if fail["fewest"] == fail["students"] else (
                f"{fail['fewest']}-{fail['students']}")
            cases = f" ({fail['cases']} cases)" if fail["cases"] > 1 else ""
            lines.append(
                f"  {many:>3} x {fail['exercise']}: {fail['description']}{cases}{pit}"
            )
    return "\n".join(lines)


def grading_time(records: list[dict], slowest: int = 3) -> list[str]:
    """Lines on how long grading took: the median, and the slowest submissions with where
    their time went (a notebook near its time limit, a diagnosis that tried many mistakes)."""
    timed = sorted((r for r in records if r.get("seconds")), key=lambda r: -r["seconds"])
    if not timed:
        return []
    median = statistics.median(r["seconds"] for r in timed)
    lines = ["", f"Grading time: median {median:.1f} s per submission ({len(timed)} timed); "
                 "slowest:"]
    for r in timed[:slowest]:
        phases = ", ".join(f"{phase.replace('_', ' ')} {seconds:.1f}"
                           for phase, seconds in r.get("timings", {}).items() if seconds >= 0.05)
        lines.append(f"  {r['student']}: {r['seconds']:.1f} s" + (f" ({phases})" if phases else ""))
    if any(r.get("timings", {}).get("warm_up", 0) >= 0.05 for r in timed[:slowest]):
        lines.append("  (warm up: the first kernel of each grading worker waits, once, for the "
                     "worker to load the kernels' libraries)")
    return lines


def plot(records: list[dict], path) -> None:
    """PNG: score distribution and per-exercise full-marks rates."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(11, 4.2), layout="constrained")
    left, right = fig.subplots(1, 2)
    fractions = [r["score"] / r["max_score"] * 100 if r["max_score"] else 0 for r in records]
    left.hist(fractions, bins=[i * 10 for i in range(11)], color="#4C72B0", edgecolor="white")
    left.set(
        xlabel="auto-graded score (%)",
        ylabel="students",
        title=f"Score distribution (n = {len(records)})",
    )
    items = item_analysis(records)["exercises"]
    names = sorted(items)
    right.barh(
        [n.removeprefix("test_") for n in names],
        [items[n]["pass_rate"] * 100 for n in names],
        color="#55A868",
    )
    right.set(xlim=(0, 100), xlabel="students with full marks (%)", title="Per-exercise pass rate")
    right.invert_yaxis()
    fig.savefig(path, dpi=110)


def main(course: Course, args) -> int:
    """``autograder report NAME``: the table (or CSV, JSON), and the plot if asked."""
    records = collect(course, args.name)
    if args.format == "json":
        print(as_json(records))
    elif args.format == "csv":
        print(as_csv(records), end="")
    else:
        print(as_table(records) if records else "No graded submissions yet.")
    if args.plot:
        plot(records, args.plot)
        print(f"Plot written to {args.plot}", file=sys.stderr)
    return 0
