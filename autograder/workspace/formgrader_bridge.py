"""Formgrader's "Autograde" button, and ``nbgrader autograde``, run this course's grader.

Left alone, both run plain ``nbgrader autograde``: the student's notebook in an ordinary
kernel with no sandbox, scored by the visible test cells only. One click would silently
replace a student's sandboxed, hidden-check score in the gradebook (4.79 became 5.0 in a
test), and the next feedback would lose every hidden-check section.

``autograder init`` therefore writes, into the workspace's ``nbgrader_config.py``,
``Autograde.autograde_preprocessors = [GradeWithAutograder]``: nbgrader still checks the
submission in, sanitises it and writes the autograded notebook, but the grading step is
``autograder grade NAME --student ID --force`` (sandbox, hidden checks, our scores), and
the notebook nbgrader saves is the one our grader annotated. If that grading fails, the
button reports the error and the gradebook keeps the scores it had.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat
from nbgrader.preprocessors.base import NbGraderPreprocessor


class AutogradeRedirected(RuntimeError):
    """``autograder grade`` failed for this student; nothing was written."""


class GradeWithAutograder(NbGraderPreprocessor):
    """Grade the whole submission with ``autograder grade`` and hand back our notebook."""

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        assignment, student, notebook = info["assignment"], info["student"], info["notebook"]
        root = Path.cwd()  # nbgrader runs converters from the course root
        autograded = root / "autograded" / student / assignment / f"{notebook}.ipynb"
        # nbgrader calls this once per notebook; one `grade` covers the whole submission.
        if notebook == _first_notebook(root, assignment):
            command = [sys.executable, "-m", "autograder.cli", "grade", assignment,
                       "--student", student, "--force", "--quiet", "--course", str(root)]
            done = subprocess.run(command, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
            if done.returncode != 0:
                raise AutogradeRedirected(
                    "this course grades with `autograder grade` (sandboxed, hidden checks), "
                    f"which failed for {student}:\n{(done.stderr or done.stdout)[-2000:]}")
        if not autograded.is_file():
            raise AutogradeRedirected(
                f"`autograder grade {assignment} --student {student}` wrote no {autograded}")
        return nbformat.read(autograded, as_version=4), resources


def _first_notebook(root: Path, assignment: str) -> str:
    from .course import Course

    return Course(root).spec(assignment).notebooks[0]
