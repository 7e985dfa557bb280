"""Sanitising a submission: our steps against nbgrader's own, on broken metadata too.

The grader runs nbgrader's preprocessors, two of them through thin subclasses
(``OverwriteCellsFromGradebook`` on the grader's open gradebook, ``CheckCellMetadataOnce``
with the schema's validator built once). Each case here is sanitised both ways and must
come out the same: the same notebook, the same findings.
"""

from __future__ import annotations

import copy

import nbformat
import pytest
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    OverwriteCells,
    OverwriteKernelspec,
)

from autograder.grading.sanitize import sanitize, tamper_report


def _nbgrader_sanitize(nb, *, db_url, assignment, notebook_id, student, gradebook):
    """What :func:`sanitize` did with nbgrader's preprocessors used as they come."""
    findings = tamper_report(nb, gradebook, notebook_id, assignment)
    resources = {"nbgrader": {"db_url": db_url, "assignment": assignment,
                              "notebook": notebook_id, "student": student}}
    steps = [ClearOutput(), DeduplicateIds(), OverwriteKernelspec(),
             OverwriteCells(add_missing_cells=True), CheckCellMetadata()]
    for step in steps:
        try:
            nb, resources = step.preprocess(nb, resources)
        except Exception as exc:
            findings.append(f"{type(step).__name__} could not process the notebook: {exc}"[:300])
    return nb, findings


def _graded(nb):
    return [c for c in nb.cells if "nbgrader" in c.metadata]


def _as_is(nb):
    return nb


def _points_not_a_number(nb):
    _graded(nb)[-1].metadata.nbgrader["points"] = "ten"


def _unknown_cell_kind(nb):
    _graded(nb)[0].metadata.nbgrader["grade"] = "sometimes"


def _schema_too_old(nb):
    _graded(nb)[0].metadata.nbgrader["schema_version"] = 1


def _schema_too_new(nb):
    _graded(nb)[0].metadata.nbgrader["schema_version"] = 99


def _grade_id_missing(nb):
    del _graded(nb)[0].metadata.nbgrader["grade_id"]


def _test_cell_deleted(nb):
    test_cells = [c for c in _graded(nb) if c.metadata.nbgrader.get("grade")
                  and not c.metadata.nbgrader.get("solution")]
    nb.cells.remove(test_cells[0])


@pytest.mark.parametrize("damage", [
    _as_is, _points_not_a_number, _unknown_cell_kind, _schema_too_old, _schema_too_new,
    _grade_id_missing, _test_cell_deleted,
], ids=lambda f: f.__name__.strip("_"))
def test_sanitising_matches_nbgraders_own_steps(tiny_course, damage):
    course = tiny_course
    spec = course.spec("00-tiny")
    notebook_id = spec.notebooks[0]
    released = nbformat.read(course.path("release", "00-tiny", f"{notebook_id}.ipynb"), 4)
    damage(released)
    with course.gradebook() as gb:
        ours, our_findings = sanitize(copy.deepcopy(released), db_url=course.db_url,
                                      assignment="00-tiny", notebook_id=notebook_id,
                                      student="someone", gradebook=gb)
        theirs, their_findings = _nbgrader_sanitize(
            copy.deepcopy(released), db_url=course.db_url, assignment="00-tiny",
            notebook_id=notebook_id, student="someone", gradebook=gb)
    assert our_findings == their_findings
    assert ours == theirs
    if damage is not _as_is:  # each damage is one nbgrader notices or repairs
        assert our_findings or ours != released
