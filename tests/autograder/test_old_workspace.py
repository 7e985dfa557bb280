"""A workspace made before the autograder was split into packages still works.

``autograder init`` writes, into the workspace's ``nbgrader_config.py``, the dotted names
of the classes nbgrader loads (the release step, the Autograde bridge, the feedback page).
A workspace made by the earlier layout names them by their old modules; nbgrader's own
commands (formgrader's buttons run the same code) must still find them, through
``autograder/old_names.py``.
"""

import importlib
import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.submissions import fill_solutions
from autograder.old_names import OLD_NAMES
from autograder.workspace import nbgrader_settings
from autograder.workspace.course import notebook_from_text

NAME = "00-tiny"
STUDENT = "early-bird"
#: The classes the earlier layout's ``autograder init`` named in ``nbgrader_config.py``.
OLD_CLASSES = {
    "autograder.workspace.release_steps.PrepareStudentNotebook":
        "autograder.release_steps.PrepareStudentNotebook",
    "autograder.workspace.formgrader_bridge.GradeWithAutograder":
        "autograder.formgrader_bridge.GradeWithAutograder",
    "autograder.reports.feedback_page.FeedbackExporter": "autograder.feedback.FeedbackExporter",
    "autograder.reports.feedback_page.CourseFeedback": "autograder.feedback.CourseFeedback",
}


def _import_class(dotted: str):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def test_every_class_nbgrader_is_told_about_exists():
    names = [value for _why, _key, values in nbgrader_settings.settings(_Stub())
             for value in (values if isinstance(values, list) else [values])
             if isinstance(value, str) and value.startswith("autograder.")]
    assert sorted(names) == sorted(OLD_CLASSES)
    for dotted in names:
        assert isinstance(_import_class(dotted), type), dotted


def test_old_names_are_the_same_modules():
    for old, new in OLD_NAMES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
        assert importlib.import_module(new).__name__ == new  # the module keeps its name
    for old, new in OLD_CLASSES.items():
        assert _import_class(old) is _import_class(new)
    # What hidden checks and prepare scripts of the earlier layout import.
    from autograder.checklib import CheckFailure
    from autograder.prepare_checkpoint import prepare_checkpoint  # noqa: F401

    from autograder.protocol import ForbiddenShortcut, SubmissionError
    from autograder.protocol.checklib import CheckFailure as new_failure

    assert CheckFailure is new_failure and issubclass(ForbiddenShortcut, SubmissionError)


def test_old_names_resolve_in_a_fresh_interpreter():
    """As nbgrader's commands meet them: the first import of autograder is the old name."""
    code = ("import traitlets.utils.importstring as s; "
            "print(s.import_item('autograder.feedback.FeedbackExporter').__module__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "autograder.reports.feedback_page"


class _Stub:
    root = Path("/nowhere")
    db_url = "sqlite:////nowhere/gradebook.db"
    exchange = root / "exchange"
    exchange_cache = root / "exchange-cache"


def _nbgrader(course, *args):
    done = subprocess.run([str(Path(sys.executable).parent / "nbgrader"), *args],
                          cwd=course.root, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return done


@pytest.mark.slow
def test_a_workspace_made_by_the_old_layout_releases_grades_and_gives_feedback(tiny_course):
    course = tiny_course
    config = course.root / "nbgrader_config.py"
    text = config.read_text()
    for new, old in OLD_CLASSES.items():
        assert new in text
        text = text.replace(new, old)
    config.write_text(text)  # as the earlier `autograder init` wrote it
    settings = "".join(line for line in text.splitlines(True) if line.startswith("c."))
    assert "autograder.workspace" not in settings and "autograder.reports" not in settings

    # generate_assignment runs the old release step (stubs that name their exercise).
    _nbgrader(course, "generate_assignment", NAME, "--force")
    released = nbformat.read(course.path("release", NAME, "tiny.ipynb"), 4)
    assert "softmax" in "".join(c.source for c in released.cells
                                if "NotImplementedError" in c.source)

    # A submission, graded by formgrader's Autograde: the old bridge runs our grader.
    source = notebook_from_text(course.spec(NAME).source_text("tiny"))
    submitted = course.path("submitted", STUDENT, NAME)
    submitted.mkdir(parents=True)
    nbformat.write(fill_solutions(released, source), submitted / "tiny.ipynb")
    _nbgrader(course, "autograde", NAME, "--student", STUDENT, "--force")
    results = json.loads((course.results_dir(NAME) / f"{STUDENT}.json").read_text())
    cells = results["notebooks"]["tiny"]["cells"]
    assert cells["test_softmax"]["score"] == cells["test_softmax"]["max_score"] == 2

    # The feedback page, by the old exporter and preprocessor.
    _nbgrader(course, "generate_feedback", NAME, "--student", STUDENT, "--force")
    html = (course.path("feedback", STUDENT, NAME) / "tiny.html").read_text()
    assert "Hidden checks" in html and "given by a person" in html
