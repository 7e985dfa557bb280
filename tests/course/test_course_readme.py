"""The course README's "What you will build" table gives each assignment's real points.

Students plan their week by it, so its points must be those of the notebooks' grade
cells: the automatic ones (check cells) and those a person reads (written answers).
"""

import re

import pytest

from autograder.workspace.assignment_spec import AssignmentSpec
from autograder.workspace.course import ASSIGNMENTS_DIR, PROJECT_ROOT, available_assignments

README = PROJECT_ROOT / "course" / "README.md"


def _points_in_readme() -> dict[str, str]:
    """``{"01": "11 + 2 read by a person", ...}`` from the table's rows."""
    rows = re.findall(r"^\| (\d\d) [^|]+\|[^|]+\| ([^|]+?) \|$", README.read_text(), re.M)
    return dict(rows)


@pytest.mark.parametrize("name", available_assignments(ASSIGNMENTS_DIR))
def test_the_table_gives_the_points_of_the_grade_cells(name):
    automatic, manual = AssignmentSpec.load(name).points()
    expected = f"{automatic:g}" + (f" + {manual:g} read by a person" if manual else "")
    assert _points_in_readme().get(name[:2]) == expected, (
        f"{README}: the row of {name} should say {expected!r}")
