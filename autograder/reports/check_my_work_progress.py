"""``autograder report NAME --checks``: where the class stands before the deadline.

Every "Check my work" leaves the student's latest result for each notebook in
``<workspace>/check-my-work/<user>.json`` (written by
:mod:`autograder.labext.service_side.course_lab`,
on a laptop or in ``autograder serve-checks``). Nothing of it reaches the gradebook:
a check is a rehearsal. Read together, those results tell an instructor the day before a
deadline who has checked, how far each got, and which exercise holds most of them up.
"""

from __future__ import annotations

import csv
import io
import json

from ..workspace.course import Course


def collect_checks(course: Course, name: str) -> list[dict]:
    """One record per user and notebook of ``name``, from their latest check:
    ``{"student", "notebook", "checked_at", "score", "max_score", "failing"}``."""
    records = []
    for path in sorted((course.root / "check-my-work").glob("*.json")):
        try:
            saved = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a file being written, or not ours: the next report reads it
        for notebook, view in (saved.get(name) or {}).items():
            if not isinstance(view, dict):
                continue
            records.append({
                "student": path.stem,
                "notebook": notebook,
                "checked_at": view.get("checked_at"),
                "score": view.get("score"),
                "max_score": view.get("max_score"),
                "failing": [e["name"] for e in view.get("exercises", [])
                            if e.get("kind") == "auto" and e.get("status") == "failing"],
            })
    return records


def as_table(records: list[dict], name: str) -> str:
    if not records:
        return f"No one has checked {name} yet (Check my work in JupyterLab)."
    students = len({r["student"] for r in records})
    rows = [["student", "notebook", "last checked (UTC)", "score", "failing"]]
    for r in sorted(records, key=lambda r: (r["score"] or 0, r["student"])):
        when = (r["checked_at"] or "-").replace("T", " ").removesuffix("+00:00")
        score = f"{round(r['score'] or 0, 2):g} / {r['max_score']:g}"
        rows.append([r["student"], r["notebook"], when, score,
                     ", ".join(g.removeprefix("test_") for g in r["failing"]) or "-"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    lines = [f"Check my work, {name}: {students} student{'s' * (students != 1)} checked "
             "(each one's latest check; nothing here counts as a grade)", ""]
    for i, row in enumerate(rows):
        lines.append("  ".join([*(c.ljust(w) for c, w in zip(row, widths)), row[-1]]))
        if i == 0:
            lines.append("  ".join("-" * w for w in [*widths, len(row[-1])]))
    stuck: dict[str, int] = {}
    for r in records:
        for grade_id in r["failing"]:
            stuck[grade_id] = stuck.get(grade_id, 0) + 1
    if stuck:
        lines += ["", "Failing in the latest checks:"]
        lines += [f"  {n:>3} of {len(records)}  {grade_id}"
                  for grade_id, n in sorted(stuck.items(), key=lambda kv: (-kv[1], kv[0]))]
    return "\n".join(lines)


def as_csv(records: list[dict]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["student", "notebook", "checked_at", "score", "max_score", "failing"])
    for r in records:
        writer.writerow([r["student"], r["notebook"], r["checked_at"], r["score"],
                         r["max_score"], " ".join(r["failing"])])
    return out.getvalue()


def main(course: Course, args) -> int:
    """``report NAME --checks`` with ``--format table|csv|json``."""
    course.require_released(args.name)
    records = collect_checks(course, args.name)
    if args.format == "json":
        print(json.dumps(records, indent=1))
    elif args.format == "csv":
        print(as_csv(records), end="")
    else:
        print(as_table(records, args.name))
    return 0
