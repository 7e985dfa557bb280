"""Step 4 of grading: turn check results into points per nbgrader grade cell.

A grade cell's score is ``points x (weight of passed checks) / (weight of all its
checks)``; checks marked ``structural`` count only when a value check of the same
cell passes. Only the hidden checks count: what a test cell printed in the
student's kernel, warnings on stderr included, never costs or earns points.
"""

from __future__ import annotations

import html

from .jobs import CheckRecord


def score_cells(points: dict[str, float], checks: list[CheckRecord]) -> dict[str, dict]:
    """``{grade_id: {"score", "max_score", "passed", "total", "checks": [...]}}``."""
    table = {}
    for grade_id, max_score in points.items():
        mine = [c for c in checks if c.grade_cell == grade_id]
        total = sum(c.weight for c in mine)
        # Structural checks (names, shapes, error handling) earn points only next to
        # at least one passing value check: names alone are not an implementation.
        values_ok = any(c.passed and not c.structural for c in mine)
        passed = sum(c.weight for c in mine if c.passed and (values_ok or not c.structural))
        score = round(max_score * passed / total, 4) if total else 0.0
        table[grade_id] = {
            "score": score,
            "max_score": float(max_score),
            "passed": sum(1 for c in mine if c.passed),
            "total": len(mine),
            "checks": mine,
        }
    return table


def cell_report_markdown(grade_id: str, entry: dict) -> str:
    """The report written into an autograded test cell (shown in formgrader and feedback)."""
    lines = [
        f"**Hidden checks for `{grade_id}`: {entry['score']:g} / {entry['max_score']:g} points**"
        f" ({entry['passed']} of {entry['total']} checks passed)",
        "",
    ]
    if not entry["total"]:
        lines.append(
            "- no result: the checks could not run for this submission (see the notes above)"
        )
    for check in entry["checks"]:
        mark = "✔" if check.passed else "✘"
        line = f"- {mark} {html.escape(check.description)}"
        if not check.passed and check.message:
            line += f"  \n  {html.escape(check.message)}"
        lines.append(line)
    return "\n".join(lines)
