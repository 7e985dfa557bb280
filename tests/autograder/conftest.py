import shutil
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@pytest.fixture(scope="module")
def tiny_course(tmp_path_factory):
    """A course workspace wired to the tiny fixture assignment, released."""
    from autograder.course import Course

    root = tmp_path_factory.mktemp("course")
    assignments = root / "assignments"
    shutil.copytree(FIXTURES / "assignments", assignments)
    shutil.copytree(FIXTURES / "checks", root / "checks")
    course = Course(root / "workspace", assignments)
    course.init()
    course.release("00-tiny")
    return course
