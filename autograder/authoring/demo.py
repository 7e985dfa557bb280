"""``autograder demo``: the whole course loop on a throwaway course, end to end.

Creates a workspace, releases every assignment, hands in a synthetic class
(``reference``, ``stub``, one ``mutant-<name>`` per named mistake,
``tamper-allclose``, and broken submissions: a syntax error, an infinite loop,
warnings on stderr, a notebook that is not JSON), grades it in parallel and
writes the reports (table, CSV, JSON and a PNG plot) and nbgrader's HTML feedback.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..grading.grade import grade
from ..reports import report
from ..workspace.course import Course, available_assignments
from .submissions import make_class, write_submissions

DEMO_CELL_TIMEOUT = 10


def demo(
    directory: str | None = None,
    assignments: list[str] | None = None,
    workers: int | None = 2,
    log=print,
) -> Path:
    root = Path(directory) if directory else Path(tempfile.mkdtemp(prefix="autograder-demo-"))
    course = Course(root / "course")
    log(f"Demo course workspace: {course.root}")
    course.init()
    names = assignments or available_assignments(course.assignments_dir)
    reports = root / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    for name in names:
        release = course.release(name)
        log(f"Released {name} -> {release}")
        spec = course.spec(name)
        students = make_class(course, spec, broken=True)
        write_submissions(course, spec, students, workers=workers)
        log(f"Handed in {len(students)} submissions: {', '.join(students)}")
        # Keep the infinite-loop student short in a demo.
        grade(
            course,
            name,
            workers=workers,
            log=log,
            cell_timeout=min(spec.limits.cell_timeout, DEMO_CELL_TIMEOUT),
        )
        records = report.collect(course, name)
        log("\n" + report.as_table(records) + "\n")
        for measured in report.measured(course, name, "reference"):
            log(f"The reference's {measured}")
        (reports / f"{name}.json").write_text(report.as_json(records))
        (reports / f"{name}.csv").write_text(report.as_csv(records))
        report.plot(records, reports / f"{name}.png")
        log(f"Reports: {reports / name}.json, .csv, .png")
        feedback = course.nbgrader_api().generate_feedback(name, force=True)
        if feedback.get("success"):
            log(f"Feedback (HTML per student): {course.path('feedback')}/<student>/{name}/")
    return root
