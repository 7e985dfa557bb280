"""What travels between the layers of grading: a job in, a result out.

``autograder grade`` (:mod:`autograder.grading.grade`) turns each notebook of each submission
into a :class:`Job`; a worker (a local process, or a Dask worker on another machine)
runs it with :func:`autograder.grading.runner.grade_notebook` and returns a
:class:`NotebookResult`, with one :class:`CheckRecord` per hidden check; the single
writer (:mod:`autograder.grading.gradebook`) scores and records it. All three are plain
dataclasses of plain values, so they pickle across a process pool and a Dask cluster
unchanged, and ``CheckRecord`` is also what the per-student results file stores.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import nbformat

from .limits import Limits


@dataclasses.dataclass
class Job:
    """One notebook of one submission, ready to run (sanitised, with its limits)."""

    student: str
    assignment: str
    notebook_id: str
    #: The sanitised notebook (locked and test cells restored from the gradebook).
    notebook: nbformat.NotebookNode
    #: What the student handed in: the notebook's neighbours are copied from here.
    submission_dir: Path
    #: The grade cells whose points the hidden checks decide (not run in the kernel).
    test_cell_ids: tuple[str, ...]
    #: The hidden pytest checks.
    checks_dir: Path
    #: The assignment's folder: its named mutants let the diagnosis name a mistake.
    assignment_dir: Path | None = None
    limits: Limits = dataclasses.field(default_factory=Limits)
    #: Functions the student's code may not call while the checks run.
    forbid: tuple[str, ...] = ()
    #: Host folders the sandbox must not show (the workspace, the checks, the sources).
    hidden: tuple[Path, ...] = ()
    #: Modules the fork server's template imports for this assignment, besides its own
    #: (the assignment's ``kernel_preload``).
    kernel_preload: tuple[str, ...] = ()
    #: What sanitising found (tampered cells), for the report.
    findings: list[str] = dataclasses.field(default_factory=list)
    #: When set, only the hidden checks of these grade cells run, and the other cells score
    #: nothing: ``autograder validate`` grades a named mutant on the cells it breaks.
    grade_cells: tuple[str, ...] | None = None


@dataclasses.dataclass
class CheckRecord:
    """The outcome of one hidden check, as the student and the item analysis see it."""

    id: str
    module: str
    #: The first docstring line of the check (plus its parameters).
    description: str
    grade_cell: str | None
    weight: float = 1.0
    #: The named mistake this check points to, for the item analysis.
    pitfall: str | None = None
    #: Counts only when a value check of the same grade cell passes (names, shapes,
    #: error handling).
    structural: bool = False
    #: Counts only when a value check of the same grade cell passes: an invariance a
    #: constant answer satisfies ("the future never changes the past").
    property: bool = False
    passed: bool = False
    message: str = ""
    #: The named mistake (a mutant's name) the diagnosis found behind this failure.
    cause: str | None = None
    #: The diagnosis ruled out every named mistake with this check's pitfall (each answered
    #: otherwise, or breaks an exercise the student passed in full): it is not theirs.
    pitfall_ruled_out: bool = False
    #: What the check measured, shown beside the score even when it passes (a trained
    #: checkpoint's accuracy or loss): the check's ``record_property("measured", text)``.
    measured: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CheckRecord:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


@dataclasses.dataclass
class NotebookResult:
    """What grading one notebook produced; never written by a worker, only returned."""

    student: str
    assignment: str
    notebook_id: str
    #: The executed notebook, or None when it could not be read at all.
    notebook: nbformat.NotebookNode | None
    checks: list[CheckRecord] = dataclasses.field(default_factory=list)
    #: Time-outs, restarts, caps reached, processes killed: notes for the report.
    events: list[str] = dataclasses.field(default_factory=list)
    findings: list[str] = dataclasses.field(default_factory=list)
    #: Named mistakes that explain failing checks (autograder.grading.diagnosis.Diagnosis.as_dict).
    diagnoses: list[dict] = dataclasses.field(default_factory=list)
    #: The isolation and the caps that were in force (printed in the feedback).
    isolation: str = ""
    seconds: float = 0.0
    #: Seconds per phase: warm_up (a worker's first kernel only), kernel_start, notebook,
    #: checks, diagnosis.
    timings: dict[str, float] = dataclasses.field(default_factory=dict)

    def __post_init__(self):
        # A notebook that crossed a process or machine boundary may arrive as a dict.
        if self.notebook is not None and not isinstance(self.notebook, nbformat.NotebookNode):
            self.notebook = nbformat.from_dict(self.notebook)

    @classmethod
    def not_run(cls, job: Job, reason: str, isolation: str) -> NotebookResult:
        """The result of a job that failed before or around its kernel (a grader error)."""
        return cls(job.student, job.assignment, job.notebook_id, job.notebook,
                   events=[reason[:500]], findings=list(job.findings), isolation=isolation)


class WorkerSetupError(RuntimeError):
    """The machine that took a job cannot see the files the job names by path (a Dask
    worker without the grader's checkout or workspace). A fault of the grading set-up,
    never of the submission: such a job is not recorded, and the next run grades it."""
