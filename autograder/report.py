"""``autograder report``: who scored what, why, and what the class got wrong.

Each record (one per student) has ``student``, ``score`` and ``max_score``
(auto-graded points only), ``manual_pending`` (points still waiting for a human),
``manual_score`` (points a human already gave), ``exercises`` (per grade cell),
``failed_checks`` and ``notes`` (time-outs, tampering, unreadable notebooks).

The item analysis gives, per exercise, the share of students with full marks,
and for each failed check how many students it caught and the pitfall it names.
"""

from __future__ import annotations

import collections
import csv
import io
import json

from .course import Course
from .gradebook import read_result_file
from .sanitize import grade_cell_ids


def collect(course: Course, name: str) -> list[dict]:
    """One record per student with a results file, sorted by student id."""
    course.require()
    spec = course.spec(name)
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
                "manual_score": 0.0,
                "manual_pending": 0.0,
                "exercises": {},
                "failed_checks": [],
                "notes": [],
            }
            for nb_id, summary in result["notebooks"].items():
                for gid, cell in summary["cells"].items():
                    record["exercises"][gid] = {
                        "score": cell["score"],
                        "max_score": cell["max_score"],
                        "passed": cell["passed"],
                        "total": cell["total"],
                    }
                    record["score"] += cell["score"]
                    record["max_score"] += cell["max_score"]
                for check in summary["checks"]:
                    if not check["passed"]:
                        record["failed_checks"].append(
                            {
                                "exercise": check["grade_cell"],
                                "check": check["id"],
                                "description": check["description"],
                                "message": check["message"],
                                "pitfall": check.get("pitfall"),
                            }
                        )
                record["notes"] += summary.get("findings", []) + summary.get("events", [])
                for gid in manual_ids[nb_id]:
                    grade = gb.find_grade(gid, nb_id, spec.name, student)
                    if grade.manual_score is not None:
                        record["manual_score"] += grade.manual_score
                    elif grade.auto_score is None:
                        record["manual_pending"] += grade.max_score
            for key in ("score", "max_score", "manual_score", "manual_pending"):
                record[key] = round(record[key], 4)
            records.append(record)
    return records


def item_analysis(records: list[dict]) -> dict:
    """Per exercise: full-marks rate and mean score; per failed check: count and pitfall."""
    exercises: dict[str, dict] = {}
    for record in records:
        for gid, ex in record["exercises"].items():
            item = exercises.setdefault(
                gid, {"students": 0, "full_marks": 0, "points": 0.0, "max_score": ex["max_score"]}
            )
            item["students"] += 1
            item["full_marks"] += ex["score"] >= ex["max_score"]
            item["points"] += ex["score"]
    for item in exercises.values():
        item["pass_rate"] = (
            round(item["full_marks"] / item["students"], 4) if item["students"] else 0.0
        )
        item["mean_score"] = round(item.pop("points") / max(item["students"], 1), 4)
    failures = collections.Counter()
    pitfalls = {}
    for record in records:
        for fail in record["failed_checks"]:
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
    return {"exercises": exercises, "failed_checks": checks}


def as_json(records: list[dict]) -> str:
    return json.dumps(records, indent=2, sort_keys=True)


def as_csv(records: list[dict]) -> str:
    exercises = sorted({gid for r in records for gid in r["exercises"]})
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(
        ["student", "score", "max_score", "manual_score", "manual_pending", *exercises, "notes"]
    )
    for r in records:
        writer.writerow(
            [
                r["student"],
                r["score"],
                r["max_score"],
                r["manual_score"],
                r["manual_pending"],
                *[r["exercises"].get(g, {}).get("score", "") for g in exercises],
                " | ".join(r["notes"]),
            ]
        )
    return out.getvalue()


def as_table(records: list[dict]) -> str:
    exercises = sorted({gid for r in records for gid in r["exercises"]})
    short = {g: g.removeprefix("test_")[:18] for g in exercises}
    header = ["student", "score", *[short[g] for g in exercises], "manual", "notes"]
    rows = []
    for r in records:
        notes = "; ".join(r["notes"])
        rows.append(
            [
                r["student"],
                f"{r['score']:g}/{r['max_score']:g}",
                *[
                    f"{r['exercises'][g]['score']:g}/{r['exercises'][g]['max_score']:g}"
                    if g in r["exercises"]
                    else "-"
                    for g in exercises
                ],
                f"{r['manual_pending']:g} pending" if r["manual_pending"] else "-",
                notes[:90] + ("..." if len(notes) > 90 else ""),
            ]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    lines = ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in [header, *rows]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    items = item_analysis(records)
    lines += ["", "Item analysis (share of students with full marks per exercise):"]
    for gid, item in sorted(items["exercises"].items()):
        lines.append(
            f"  {gid:<28} {item['pass_rate']:>6.0%}  mean {item['mean_score']:g}/"
            f"{item['max_score']:g}"
        )
    if items["failed_checks"]:
        lines += ["", "Most failed checks (and the pitfall they point to):"]
        for fail in items["failed_checks"][:12]:
            pit = f" -> {fail['pitfall']}" if fail["pitfall"] else ""
            lines.append(
                f"  {fail['students']:>3} x {fail['exercise']}: {fail['description']}{pit}"
            )
    return "\n".join(lines)


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
