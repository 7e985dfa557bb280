"""A solved assignment runs to the end in a course that installs the student toolkit.

``autograder release --student-toolkit`` stubs every exercise of an open assignment in the
toolkit students install, and an instructor unlocks each assignment once its deadline has
passed. So a student working on assignment N has a toolkit in which N's exercises (and
those of every later assignment) raise ``NotImplementedError``. The given code of N's
notebook (its imports, experiments, widgets and visible checks) must then run on the
student's own answers alone: a toolkit helper that builds one of N's exercises inside it
(a cache class derived from the one the student writes, a final norm built from the
toolkit's LayerNorm) would fail for a student whose every answer is right.

Each case installs the student toolkit with the assignments before N unlocked, runs N's
instructor notebook (the solutions in place of the student's answers) in a kernel of that
toolkit, and asks for no error and no widget that shows, instead of its figure, which function it
needs. (A widget placed before a later exercise of its notebook draws everything else and
says, in that panel or row, what it waits for.) The training cells are shortened to a few
steps (the shortening must still match the notebook).

The same wheel then runs N's notebook as released, every exercise a stub: what a student
sees at the first Run All. Every error must be one line saying what is missing
(``toolkit.notebook.friendly_errors``), including where given code calls a toolkit
function that the wheel stubs, never a traceback.
"""

from __future__ import annotations

import html
import re

import nbformat
import pytest
from nbclient import NotebookClient

from autograder.workspace.course import (
    ASSIGNMENTS_DIR,
    AssignmentSpec,
    Course,
    available_assignments,
    notebook_from_text,
)
from toolkit.notebook import MARK

pytestmark = pytest.mark.slow

ASSIGNMENTS = available_assignments(ASSIGNMENTS_DIR)

#: (text, shorter text) edits of an instructor notebook: its long training runs, cut to a
#: few steps. Each text must occur in the notebook, so an edit that no longer applies fails.
SHORTER = {
    "02-positional": [
        ("CONTEXT_STEPS = 1000 ", "CONTEXT_STEPS = 4 "),
        ("N_KEYS = 10 ", "N_KEYS = 1 "),
    ],
    "05-blocks": [
        ("WARMUP_STEPS = 100\nruns = warmup_experiment(WARMUP_STEPS, ",
         "WARMUP_STEPS = 2\nruns = warmup_experiment(WARMUP_STEPS, steps=4, "),
        ("STEPS = 600\n", "STEPS = 4\n"),
        ("distill(model, student, corpus, 300,", "distill(model, student, corpus, 2,"),
        ("pretrain(scratch, corpus, 300,", "pretrain(scratch, corpus, 2,"),
        ("FINETUNE_STEPS, FINETUNE_LR, FINETUNE_SEED = 120,",
         "FINETUNE_STEPS, FINETUNE_LR, FINETUNE_SEED = 4,"),
    ],
    "06-beyond-attention": [
        ("RECALL_STEPS = 600\n", "RECALL_STEPS = 2\n"),
    ],
    "07-capstone": [
        ("STEPS = 600\n", "STEPS = 4\n"),
        ("COMPARE_STEPS = 300\n", "COMPARE_STEPS = 2\n"),
    ],
    "08-encoder-decoder": [
        ("STEPS = 600\n", "STEPS = 4\n"),
    ],
}

#: What a widget shows in place of its whole figure when a function it needs is a stub
#: (a panel or a row that waits for a later exercise of the notebook says less).
WIDGET_STOPPED = "This widget needs"
#: Where nbclient stores the widgets' state in the executed notebook.
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def shortened_source(name: str, notebook: str) -> str:
    source = AssignmentSpec.load(name).source_text(notebook)
    for text, shorter in SHORTER.get(name, []):
        assert text in source, f"{name}: {text!r} is no longer in the notebook; update SHORTER"
        source = source.replace(text, shorter)
    return source


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_solved_notebook_runs_on_the_student_toolkit(name, student_kernel, notebook_env,
                                                          tmp_path):
    unlocked = ASSIGNMENTS[:ASSIGNMENTS.index(name)]
    student_kernel(unlocked)
    for notebook in AssignmentSpec.load(name).notebooks:
        nb = notebook_from_text(shortened_source(name, notebook))
        NotebookClient(nb, timeout=600, kernel_name="student", allow_errors=True,
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
        cells = [c for c in nb.cells if c.cell_type == "code"]
        problems = [f"code cell {i} ({c.source.splitlines()[0][:60]!r}): {o.ename}: "
                    f"{o.evalue[:300]}"
                    for i, c in enumerate(cells) for o in c.outputs if o.output_type == "error"]
        states = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
        problems += [f"a widget says: {html.unescape(re.sub('<[^>]+>', '', value))}"
                     for model in states.values()
                     if WIDGET_STOPPED in (value := str(model.get("state", {}).get("value", "")))]
        assert not problems, (
            f"{name}/{notebook}, solved, under the student toolkit (unlocked: "
            f"{', '.join(unlocked) or 'none'}):\n" + "\n".join(problems))


@pytest.mark.parametrize("name", ASSIGNMENTS)
def test_the_fresh_notebook_runs_on_the_student_toolkit(name, student_kernel, notebook_env,
                                                         tmp_path):
    unlocked = ASSIGNMENTS[:ASSIGNMENTS.index(name)]
    student_kernel(unlocked)
    course = Course(tmp_path / "course")
    course.init()
    folder = course.release(name, exchange=False)
    for path in sorted(folder.glob("*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        NotebookClient(nb, timeout=600, kernel_name="student", allow_errors=True,
                       resources={"metadata": {"path": str(folder)}}).execute()
        cells = [c for c in nb.cells if c.cell_type == "code"]
        errors = [(i, o) for i, c in enumerate(cells) for o in c.outputs
                  if o.output_type == "error"]
        assert errors, f"{path.name}: no stub raised; is this the released notebook?"
        problems = [f"code cell {i}: {o.ename}: {o.traceback[:3]}" for i, o in errors
                    if len(o.traceback) != 1 or not o.traceback[0].startswith(MARK)]
        assert not problems, (
            f"{name}/{path.name}, fresh, under the student toolkit (unlocked: "
            f"{', '.join(unlocked) or 'none'}):\n" + "\n".join(problems))
