"""A lecture comes before its assignment, so in a course that installs the student toolkit
(``autograder release --student-toolkit``) it meets that assignment's exercises as stubs.
Run All must still reach the end: each cell that needs an exercise says so in one line
(``‖ This cell needs ...``, from ``toolkit.notebook.friendly_errors``), widgets say what
they need, and nothing else fails.

The wheel is built with every assignment locked (the strictest case: lecture 01 before
anything is unlocked) and installed in a fresh virtual environment whose own ``toolkit``
is the wheel's; a kernel of that environment runs each lecture as ``autograder init``
builds it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from nbclient import NotebookClient

from autograder.workspace.outline import COURSE_FILE, lecture_notebook, load_outline
from toolkit.notebook import MARK

pytestmark = pytest.mark.slow

OUTLINE = load_outline(COURSE_FILE)
LECTURES = list(OUTLINE.lectures)


@pytest.mark.parametrize("lecture", LECTURES, ids=[lecture.stem for lecture in LECTURES])
def test_run_all_reaches_the_end_with_one_line_per_missing_exercise(
    lecture, student_kernel, notebook_env, tmp_path
):
    site = student_kernel(unlocked=())
    nb = lecture_notebook(OUTLINE.lecture_source(lecture))
    nb.cells.append(nb.cells[0].__class__(  # a last cell: which toolkit the kernel imported
        cell_type="code", metadata={}, outputs=[], execution_count=None,
        source="import toolkit\nprint(toolkit.__file__)"))
    NotebookClient(nb, timeout=180, kernel_name="student",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = [c for c in nb.cells if c.cell_type == "code"]
    printed = "".join(o.get("text", "") for o in cells[-1].outputs if o.output_type == "stream")
    assert Path(printed.strip()).is_relative_to(site), printed  # the wheel's toolkit
    errors = [(i, o) for i, c in enumerate(cells) for o in c.outputs if o.output_type == "error"]
    loud = [f"code cell {i}: {o.ename}: {o.evalue}" for i, o in errors
            if not (len(o.traceback) == 1 and o.traceback[0].startswith(MARK))]
    assert not loud, f"{lecture.notebook} under the student toolkit:\n" + "\n".join(loud)
