"""Step 1 of grading: read a submitted notebook and restore what the student may not change.

nbgrader's own preprocessors do the work (ClearOutput, DeduplicateIds,
OverwriteKernelspec, OverwriteCells with missing cells added back,
CheckCellMetadata). Before they run we compare the submission with the
gradebook's copy of every locked cell, so the report can say *what* was
tampered with: deleted, edited or re-ordered test cells, edited points.

Two of nbgrader's steps run through thin subclasses that change what they cost, not what
they do (a test holds them to nbgrader's results): ``OverwriteCells`` on the gradebook the
grader has open, where nbgrader's opens a new one per notebook, and ``CheckCellMetadata``
with the schema's validator built once, where nbgrader's checks the schema again for
every cell.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import jsonschema
import nbformat
from nbgrader.nbgraderformat import MetadataValidator
from nbgrader.nbgraderformat.common import BaseMetadataValidator
from nbgrader.preprocessors import (
    CheckCellMetadata,
    ClearOutput,
    DeduplicateIds,
    OverwriteCells,
    OverwriteKernelspec,
)
from nbgrader.preprocessors.base import NbGraderPreprocessor

from ..jobs import Job
from ..sandbox.isolation import hidden_from_kernels

MAX_NOTEBOOK_BYTES = 20 * 2**20


class NotGradable(Exception):
    """The notebook cannot be graded at all; the message says why, for the report."""


def read_submission(path: Path) -> nbformat.NotebookNode:
    """Read a submitted notebook, turning every way it can be broken into NotGradable."""
    if not path.is_file():
        raise NotGradable(f"{path.name} is missing from the submission{_found_instead(path)}")
    size = path.stat().st_size
    if size == 0:
        raise NotGradable(f"{path.name} is empty")
    if size > MAX_NOTEBOOK_BYTES:
        raise NotGradable(f"{path.name} is {size / 2**20:.0f} MiB, over the "
                          f"{MAX_NOTEBOOK_BYTES // 2**20} MiB limit")
    try:
        raw = json.loads(path.read_bytes())
    except (ValueError, UnicodeDecodeError) as exc:
        raise NotGradable(f"{path.name} is not valid notebook JSON ({exc})"[:300]) from None
    if not isinstance(raw, dict) or "cells" not in raw and "worksheets" not in raw:
        raise NotGradable(f"{path.name} is JSON but not a notebook")
    try:
        nb = nbformat.reads(json.dumps(raw), as_version=4)  # converts nbformat 3 notebooks
    except Exception as exc:
        raise NotGradable(f"{path.name} could not be read as a notebook ({exc})"[:300]) from None
    return nb


def _found_instead(path: Path) -> str:
    """The other notebooks handed in (a renamed copy, one in a sub-folder), for the note:
    which one is the work is for a person to decide, never for the grader to guess."""
    if not path.parent.is_dir():
        return ""
    others = sorted(str(p.relative_to(path.parent)) for p in path.parent.rglob("*.ipynb")
                    if ".ipynb_checkpoints" not in p.parts)
    if not others:
        return ""
    shown = ", ".join(repr(name) for name in others[:5]) + (", ..." if len(others) > 5 else "")
    return (f"; it holds {shown}: if that is the work, move it to {path.name} at the top of "
            "the submission folder and grade this student again with --force")


def _source(cell) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else str(src)


def tamper_report(
    nb: nbformat.NotebookNode, gradebook, notebook_id: str, assignment: str
) -> list[str]:
    """Differences between the submission's locked/grade cells and the gradebook's copies."""
    findings: list[str] = []
    source_nb = gradebook.find_notebook(notebook_id, assignment)
    locked = {c.name: c for c in source_nb.source_cells if c.locked}
    points = {c.name: c.max_score for c in source_nb.grade_cells}
    seen: list[str] = []
    for cell in nb.cells:
        meta = cell.get("metadata", {}).get("nbgrader", {})
        grade_id = meta.get("grade_id") if isinstance(meta, dict) else None
        if grade_id is None:
            continue
        seen.append(grade_id)
        if grade_id in locked and _source(cell).strip() != locked[grade_id].source.strip():
            findings.append(f"locked cell '{grade_id}' was edited (restored from the gradebook)")
        if grade_id in points and meta.get("points") not in (None, points[grade_id]):
            findings.append(
                f"points of '{grade_id}' changed to {meta.get('points')} "
                f"(reset to {points[grade_id]:g})"
            )
    for name in locked:
        if name not in seen:
            findings.append(f"locked cell '{name}' was deleted (restored from the gradebook)")
    expected_order = [c.name for c in source_nb.source_cells if c.name in seen]
    if [s for s in seen if s in expected_order] != expected_order:
        findings.append(
            "graded cells were re-ordered (grading uses the hidden checks, not the order)"
        )
    return findings


class OverwriteCellsFromGradebook(OverwriteCells):
    """nbgrader's ``OverwriteCells`` on the gradebook the grader has open: its own
    ``preprocess`` opens a new ``Gradebook`` (a new database engine, its tables inspected)
    for every notebook. The rest is nbgrader's."""

    def __init__(self, gradebook, **kwargs):
        super().__init__(**kwargs)
        self._open_gradebook = gradebook

    def preprocess(self, nb, resources):
        self.notebook_id = resources["nbgrader"]["notebook"]
        self.assignment_id = resources["nbgrader"]["assignment"]
        self.db_url = resources["nbgrader"]["db_url"]
        self.gradebook = self._open_gradebook
        nb, resources = NbGraderPreprocessor.preprocess(self, nb, resources)  # cell by cell
        if self.add_missing_cells:
            nb, resources = self.add_missing_grade_cells(nb, resources)
            nb, resources = self.add_missing_task_cells(nb, resources)
        return nb, resources


@functools.cache
def _metadata_schema_validator() -> jsonschema.protocols.Validator:
    schema = MetadataValidator().schema
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    return validator_class(schema)


class _SchemaValidatorOnce(BaseMetadataValidator):
    """The schema part of nbgrader's cell validation with the schema's validator built
    once: ``jsonschema.validate``, which nbgrader calls for every cell, checks the schema
    itself each time first. Same checks, same errors."""

    def validate_cell(self, cell) -> None:
        meta = cell.metadata.get("nbgrader")
        if meta is None or meta.get("schema_version", 0) != self.schema_version:
            return super().validate_cell(cell)  # nothing to check, or its version error
        error = jsonschema.exceptions.best_match(_metadata_schema_validator().iter_errors(meta))
        if error is not None:
            raise error


class _MetadataValidatorOnce(MetadataValidator, _SchemaValidatorOnce):
    """nbgrader's metadata validator (its own checks first, then its base's, which
    :class:`_SchemaValidatorOnce` stands in front of: ``MetadataValidator``'s ``super()``
    reaches it before nbgrader's base)."""


class CheckCellMetadataOnce(CheckCellMetadata):
    """nbgrader's ``CheckCellMetadata`` through :class:`_MetadataValidatorOnce`, failing
    as nbgrader's does."""

    def preprocess(self, nb, resources):
        try:
            _MetadataValidatorOnce().validate_nb(nb)
        except jsonschema.ValidationError as exc:
            raise jsonschema.ValidationError(
                "Notebook failed to validate; the nbgrader metadata may be corrupted."
            ) from exc
        return nb, resources


def sanitize(nb, *, db_url: str, assignment: str, notebook_id: str, student: str, gradebook):
    """Return (sanitised notebook, findings). Never raises for a student's edits.

    ``gradebook``: an open nbgrader ``Gradebook`` of ``db_url``."""
    findings = tamper_report(nb, gradebook, notebook_id, assignment)
    resources = {
        "nbgrader": {
            "db_url": db_url,
            "assignment": assignment,
            "notebook": notebook_id,
            "student": student,
        }
    }
    steps = {  # nbgrader's name -> the step
        "ClearOutput": ClearOutput(),
        "DeduplicateIds": DeduplicateIds(),
        "OverwriteKernelspec": OverwriteKernelspec(),
        "OverwriteCells": OverwriteCellsFromGradebook(gradebook, add_missing_cells=True),
        "CheckCellMetadata": CheckCellMetadataOnce(),
    }
    for name, step in steps.items():
        try:
            nb, resources = step.preprocess(nb, resources)
        except Exception as exc:  # e.g. metadata that fails nbgrader's schema
            findings.append(f"{name} could not process the notebook: {exc}"[:300])
    return nb, findings


def grade_cell_ids(gradebook, notebook_id: str, assignment: str) -> tuple[dict, set]:
    """(autograded test cells {grade_id: points}, manually graded cell ids) from the gradebook."""
    source_nb = gradebook.find_notebook(notebook_id, assignment)
    solution_ids = {c.name for c in source_nb.solution_cells}
    auto = {c.name: c.max_score for c in source_nb.grade_cells if c.name not in solution_ids}
    manual = {c.name for c in source_nb.grade_cells if c.name in solution_ids}
    return auto, manual


def sanitized_job(course, spec, student: str, notebook_id: str, submission_dir: Path,
                  gradebook, test_cell_ids) -> Job:
    """One notebook of one submission as a :class:`~autograder.jobs.Job`: read from
    ``submission_dir``, sanitised against the gradebook, with the assignment's checks,
    limits and forbidden calls and what no kernel may see of the course. ``autograder
    grade`` and "Check my work" both build their jobs here.

    Raises :class:`NotGradable` with ``.job`` set (the job without its notebook), from
    which the caller can make the result that says why.
    """
    job = Job(
        student=student,
        assignment=spec.name,
        notebook_id=notebook_id,
        notebook=None,
        submission_dir=Path(submission_dir),
        test_cell_ids=tuple(sorted(test_cell_ids)),
        checks_dir=spec.checks_dir(),
        assignment_dir=spec.path,
        limits=spec.limits,
        forbid=tuple(spec.forbid),
        hidden=hidden_from_kernels(course, spec),
        kernel_preload=tuple(spec.kernel_preload),
    )
    try:
        nb = read_submission(job.submission_dir / f"{notebook_id}.ipynb")
        job.notebook, job.findings = sanitize(nb, db_url=course.db_url, assignment=spec.name,
                                              notebook_id=notebook_id, student=student,
                                              gradebook=gradebook)
    except NotGradable as exc:
        exc.job = job
        raise
    return job
