"""Step 4 of grading: turn check results into points per nbgrader grade cell.

A grade cell's score is ``points x (weight of passed checks) / (weight of all its
checks)``. Two kinds of checks count only when a value check of the same cell passes:
``structural`` ones (names, shapes, error handling: names alone are not an
implementation) and ``property`` ones (invariances such as "the future never changes
the past" or "shuffling the input shuffles the output", which a constant answer
satisfies trivially). Only the hidden checks count: what a test cell printed in the
student's kernel, warnings on stderr included, never costs or earns points.
"""

from __future__ import annotations

import html

from .jobs import CheckRecord


def score_cells(
    points: dict[str, float], checks: list[CheckRecord], diagnoses: list[dict] = ()
) -> dict[str, dict]:
    """``{grade_id: {"score", "max_score", "passed", "total", "checks", "diagnoses",
    "attempted"}}``; ``diagnoses`` are :meth:`autograder.diagnosis.Diagnosis.as_dict`."""
    table = {}
    for grade_id, max_score in points.items():
        mine = [c for c in checks if c.grade_cell == grade_id]
        total = sum(c.weight for c in mine)
        # Structural and property checks earn points only next to at least one passing
        # value check: names, shapes and invariances alone are not an implementation.
        values_ok = any(c.passed and not gated(c) for c in mine)
        passed = sum(c.weight for c in mine if c.passed and (values_ok or not gated(c)))
        score = round(max_score * passed / total, 4) if total else 0.0
        table[grade_id] = {
            "score": score,
            "max_score": float(max_score),
            "passed": sum(1 for c in mine if c.passed),
            "total": len(mine),
            "checks": mine,
            "diagnoses": [d for d in diagnoses if d["grade_cell"] == grade_id],
            "attempted": attempted(mine),
        }
    return table


def gated(check: CheckRecord) -> bool:
    """A check that counts only when a value check of its cell passes."""
    return check.structural or check.property


def attempted(checks: list[CheckRecord]) -> bool:
    """False when every check of an exercise failed on an unimplemented stub."""
    return not checks or any(c.passed or "NotImplementedError" not in c.message for c in checks)


def cell_report_markdown(grade_id: str, entry: dict) -> str:
    """The report written into an autograded test cell (shown in formgrader and feedback).

    A diagnosed mistake comes first, with the failing checks it explains listed under it
    (their own hints would point elsewhere); then the other checks.
    """
    lines = [
        f"**Hidden checks for `{grade_id}`: {entry['score']:g} / {entry['max_score']:g} points**"
        f" ({entry['passed']} of {entry['total']} checks passed)",
        "",
    ]
    if not entry["total"]:
        lines.append(
            "- no result: the checks could not run for this submission (see the notes above)"
        )
    elif not entry.get("attempted", True):
        lines.append("- not attempted yet: the exercise still raises NotImplementedError")
    explained = set()
    for diagnosis in entry.get("diagnoses", []):
        lines.append(f"- **Diagnosis:** {html.escape(diagnosis['message'])}")
        mine = [c for c in entry["checks"] if check_key(c) in diagnosis["checks"]]
        for check in mine:
            lines.append(f"  - ✘ {html.escape(check.description)}")
        explained |= {check_key(c) for c in mine}
    said = set()  # one cause often fails many checks: say it once
    for check in entry["checks"]:
        if check_key(check) in explained:
            continue
        mark = "✔" if check.passed else "✘"
        line = f"- {mark} {html.escape(check.description)}"
        if not check.passed and check.message:
            repeated = check.message in said
            line += "  \n  (the same reason as above)" if repeated else (
                f"  \n  {html.escape(check.message)}")
            said.add(check.message)
        lines.append(line)
    return "\n".join(lines)


def check_key(check: CheckRecord) -> str:
    """A check's name, unique within an assignment: ``module::test id``."""
    return f"{check.module}::{check.id}"
