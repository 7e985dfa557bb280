"""Every assignment's hidden checks tell right from wrong: `autograder validate` on each.

The reference solution must score full marks, the released stub zero, and every named
mutant in assignment.toml must lose points on each grade cell it says it breaks (and
the reference without its prepared files, where the assignment has some, on exactly the
cells that read them).
"""

import pytest

from autograder.authoring.validate import run_validation
from autograder.workspace.course import ASSIGNMENTS_DIR, Course, available_assignments

pytestmark = pytest.mark.slow


def validate(name, tmp_path):
    course = Course(tmp_path / "course")
    course.init()
    rows = run_validation(course, name, workers=2, progress=False, log=lambda *a: None)
    assert any(r["student"].startswith("mutant-") for r in rows), f"{name} names no mutants"
    failed = [f"{r['student']}: expected {r['expected']}, got {r['detail']}"
              + "".join(f"\n  - {line}" for line in r["why"]) for r in rows if not r["ok"]]
    assert not failed, "\n".join(failed)


def validation_class(name: str) -> type:
    """``TestValidate_<name>``: `make test` (``--dist loadscope``) hands each test class to
    a worker as a unit of its own, so the validations of two assignments run side by side
    (each grades its own throwaway course)."""
    @pytest.mark.parametrize("name", [name])
    def test_validate(self, name, tmp_path):
        validate(name, tmp_path)

    return type(f"TestValidate_{name.replace('-', '_')}", (), {"test_validate": test_validate})


for _name in available_assignments(ASSIGNMENTS_DIR):
    _cls = validation_class(_name)
    globals()[_cls.__name__] = _cls
