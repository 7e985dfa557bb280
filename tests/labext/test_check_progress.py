"""``autograder report NAME --checks``: the class's latest "Check my work" results, read
back from what real checks saved (two students, a solved and a half-solved notebook)."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from autograder.labext.service_side.course_lab import CourseLab

ASSIGNMENT = "01-attention"
pytestmark = pytest.mark.slow


def _report(course, *options) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autograder.cli", "report", ASSIGNMENT,
                           "--course", str(course.root), "--checks", *options],
                          capture_output=True, text=True, timeout=300)


async def test_the_report_lists_each_students_latest_check(course, notebooks):
    assert "No one has checked 01-attention yet" in _report(course).stdout
    lab = CourseLab(root_dir=str(course.root), course_dir=str(course.root),
                    cooldown_seconds=0.0)
    mutant = next(name for name in notebooks if name.startswith("mutant"))
    for student, name in [("ada", "reference"), ("grace", "stub"), ("grace", mutant)]:
        folder = course.root / "homes" / student / ASSIGNMENT
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(notebooks[name], folder / "attention.ipynb")
        await lab.check(student, f"homes/{student}/{ASSIGNMENT}/attention.ipynb")

    rows = json.loads(_report(course, "--format", "json").stdout)
    latest = {r["student"]: r for r in rows}
    assert set(latest) == {"ada", "grace"} and len(rows) == 2  # grace's latest check only
    assert (latest["ada"]["score"], latest["ada"]["failing"]) == (11.0, [])
    assert 0 < latest["grace"]["score"] < 11.0 and latest["grace"]["failing"]

    table = _report(course).stdout
    assert "2 students checked" in table
    assert table.index("grace") < table.index("ada")  # the furthest behind first
    for grade_id in latest["grace"]["failing"]:
        assert f"  1 of 2  {grade_id}" in table
    assert _report(course, "--format", "csv").stdout.splitlines()[0] == (
        "student,notebook,checked_at,score,max_score,failing")


def test_checks_and_another_reports_option_do_not_mix(course):
    done = _report(course, "--plot", "x.png")
    assert done.returncode == 2 and "--plot belongs to another report" in done.stderr
