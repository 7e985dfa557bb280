"""``autograder release --student-toolkit / --student-lab``: build the wheels, say what to do."""

from __future__ import annotations

from .lab_wheel import build_student_lab
from .toolkit_wheel import build_student_toolkit, locked_assignments


def release_student_builds(course, *, toolkit: bool, lab: bool, unlocked: list[str]) -> None:
    """``autograder release --student-toolkit / --student-lab``: build and say what to do."""
    if toolkit:
        from .answer_overlap import answer_overlaps

        overlaps: list[str] = []
        wheel = build_student_toolkit(
            course.root / "student-toolkit", course.assignments_dir, unlocked=unlocked,
            inspect=lambda staged: overlaps.extend(
                answer_overlaps(staged, course.assignments_dir, unlocked)),
            assistant_rules=course.outline().assistant_rules)
        print(f"Student toolkit: {wheel}")
        locked = locked_assignments(course.assignments_dir, unlocked)
        print(f"Locked (answers stubbed or withheld): {', '.join(locked) or 'none'}; "
              f"unlocked: {', '.join(unlocked) or 'none'} (--unlock NAME after a deadline)")
        for overlap in overlaps:
            print(f"warning: {overlap}. Students can copy it: list it in that assignment's "
                  "`withhold` (assignment.toml), unless it only shares a pattern with the "
                  "answer.")
        print("Students install it with: pip install " + str(wheel) + " (the same command "
              "replaces an earlier build)")
    if lab:
        wheel = build_student_lab(course.root / "student-lab")
        print(f"Student lab: {wheel}\nOn a shared server, install it in the students' "
              "Jupyter environment beside the student toolkit and point it at `autograder "
              "serve-checks`, run as a user students are not: c.CheckService.socket = PATH "
              "(with --socket PATH) or c.CheckService.url = http://HOST:PORT (with --listen "
              "HOST:PORT --hub-api URL)")
