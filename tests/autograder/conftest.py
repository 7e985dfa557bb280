import pytest


@pytest.fixture(scope="module")
def tiny_course(tmp_path_factory):
    """A course workspace with one assignment, ``00-tiny``, released.

    ``00-tiny`` is the project's minimal example, made exactly as ``autograder new``
    makes one (``autograder/templates/``), in a temporary assignments folder with its
    hidden checks beside it.
    """
    from autograder.course import Course
    from autograder.scaffold import new_assignment

    root = tmp_path_factory.mktemp("course")
    new_assignment("00-tiny", root / "assignments", title="Tiny: softmax")
    course = Course(root / "workspace", root / "assignments")
    course.init()
    course.release("00-tiny")
    return course
