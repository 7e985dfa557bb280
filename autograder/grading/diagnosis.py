"""Diagnosis by fingerprint: name the classic mistake behind a group of failing checks.

A student who forgets the ``1/sqrt(d_k)`` scale fails most checks of the attention
exercise, and later exercises that call it fail too. Each failing check alone gives a
hint for its own symptom (masks, NaNs, shapes), which sends the student the wrong way.
The named mutants of an assignment already encode the classic mistakes, so we ask a
better question: *would that mistake have answered the same?*

For every failing check we know exactly what it asked the student's kernel and what came
back (:class:`autograder.protocol.trusted.Exchange`). The :mod:`.oracle` replays the same
requests against the instructor's notebook with one mutant applied. If the mutant's
answers equal the student's on every request the check made, that mistake explains the
failure: its fingerprint matches. The feedback then says so once, at the top of the
exercise, and lists the checks it explains without their (now misleading) hints. When
the mistake sits in a different exercise than the failing check (a decoder block that
calls a broken attention function), the feedback says where to look.

Only mutants that ``break`` the check's grade cell are tried, only failing checks with at
least one answered request are replayed, and answers the student did not give (an
unimplemented stub, a forbidden shortcut) are never matched, so a diagnosis costs little.
It never guesses either: a mistake is ruled out when the student passed in full a cell it
would break (an inverted mask in the attention function fails a decoder block as an
inverted ``causal_mask`` would, but ``causal_mask`` passed its own checks), and when on
one failing check it would have answered wrongly but not as the student did (fp16's
2 bytes left out halves an answer as a missing K and V factor 2 does; the fp32 case tells
them apart). Mistakes that are no named mutant get the line of
:mod:`autograder.grading.upstream` instead, when an earlier exercise they call fails too.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import itertools
import math
import re
from typing import Any

import torch

from ..jobs import CheckRecord
from ..protocol.trusted import Exchange, ForbiddenShortcut, SubmissionError, decode_reply
from ..workspace.assignment_spec import AssignmentSpec, apply_mutant, notebook_from_text
from .oracle import MistakeOracle, OracleError
from .scoring import check_key

#: What a failing stub says; such a check is "not attempted", never a mistake.
NOT_ATTEMPTED = "NotImplementedError"


@dataclasses.dataclass
class Diagnosis:
    """A named mistake that explains some failing checks of one grade cell."""

    grade_cell: str  # where the explained checks are
    mutant: str  # the mutant's name in assignment.toml
    pitfall: str  # its short name (item analysis)
    explanation: str  # what the student did, in a sentence written for them
    source_cell: str  # grade id of the solution cell that holds the mistake
    owner: str  # the grade cell whose checks test that solution cell
    checks: list[str]  # ids of the failing checks it explains

    def message(self) -> str:
        """The line shown at the top of the exercise's feedback."""
        if self.owner == self.grade_cell:
            return (f"Your answers match a classic mistake: {self.explanation}. It explains "
                    f"the {len(self.checks)} failing check(s) marked below.")
        return (f"These checks fail because `{self.source_cell}` (checked under "
                f"`{self.owner}`) has a mistake: {self.explanation}. Fix it there first; "
                "the code of this exercise may well be right.")

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "message": self.message()}


class Diagnoses(list):
    """The diagnoses of one notebook (a list of :class:`Diagnosis`), and what the evidence
    ruled out: ``ruled_out[grade cell]`` holds the pitfalls that no named mistake of that
    cell can be behind (each mutant with that pitfall was tried and answered otherwise, or
    breaks a cell the student passed in full)."""

    def __init__(self, items=(), ruled_out: dict[str, set[str]] | None = None):
        super().__init__(items)
        self.ruled_out = ruled_out or {}


# -- where a mistake sits ---------------------------------------------------------------------
def mistake_location(spec: AssignmentSpec, mutant) -> tuple[str, str]:
    """``(solution cell grade id, grade cell that checks it)`` for a mutant's text edit.

    The owner is the first autograded test cell after the solution cell, the layout every
    notebook of the course uses (exercise cells, then their test cell).
    """
    return _location(spec.source_text(mutant.notebook), mutant.find)


@functools.lru_cache(maxsize=256)
def _location(text: str, find: str) -> tuple[str, str]:
    """:func:`mistake_location` of the edit ``find`` in the notebook source ``text``: the
    same for every student, and reading a notebook's text costs a fifth of a second."""
    source_cell, owner = "", ""
    for cell_type, source, meta in _cells(text):
        if not source_cell:
            if cell_type == "code" and find in source:
                source_cell = meta.get("grade_id", "")
            continue
        if meta.get("grade") and not meta.get("solution"):
            owner = meta.get("grade_id", "")
            break
    return source_cell, owner


@functools.lru_cache(maxsize=16)
def _cells(text: str) -> tuple[tuple[str, str, dict], ...]:
    """``(cell type, source, nbgrader metadata)`` of each cell of a notebook's source."""
    return tuple((cell.cell_type, cell.source, dict(cell.metadata.get("nbgrader", {})))
                 for cell in notebook_from_text(text).cells)


def explanation_of(mutant) -> str:
    text = getattr(mutant, "explanation", "") or ""
    pitfall = mutant.pitfall
    first_word = pitfall.split(" ", 1)[0]
    # "Forgot ..." -> "forgot ...", but "KV cache ...", "RoPE ..." and "YaRN ..." stay.
    if first_word[1:].islower():
        pitfall = pitfall[:1].lower() + pitfall[1:]
    return text.strip().rstrip(".") or pitfall


# -- comparing answers ----------------------------------------------------------------------
#: Machine epsilon of the floating dtypes whose rounding the diagnosis tolerates.
_LOW_PRECISION_EPS = {dtype: torch.finfo(dtype).eps for dtype in (torch.float16, torch.bfloat16)}


def same_answer(student: Any, mistake: Any) -> bool:
    """Whether two decoded answers agree (to float tolerance, looser for half precision;
    structure and shape exact)."""
    if isinstance(student, torch.Tensor) or isinstance(mistake, torch.Tensor):
        if not (isinstance(student, torch.Tensor) and isinstance(mistake, torch.Tensor)):
            return False
        if student.shape != mistake.shape:
            return False
        if student.is_floating_point() or mistake.is_floating_point():
            a, b = student.double(), mistake.double()
            scale = max(1.0, float(b.nan_to_num(0, 0, 0).abs().max())) if b.numel() else 1.0
            # Half precision keeps 8 to 11 bits: the same code can round a last bit apart
            # in two processes, so two units in the last place of the coarser dtype count
            # as agreement there (a mistake moves answers far more than that).
            eps = max(_LOW_PRECISION_EPS.get(t.dtype, 0.0) for t in (student, mistake))
            rtol, atol = max(1e-4, 2 * eps), max(1e-6, 2 * eps) * scale
            return bool(torch.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True))
        return bool(torch.equal(student.long(), mistake.long()))
    if isinstance(student, (tuple, list)) and isinstance(mistake, (tuple, list)):
        return len(student) == len(mistake) and all(map(same_answer, student, mistake))
    if isinstance(student, dict) and isinstance(mistake, dict):
        return student.keys() == mistake.keys() and all(
            same_answer(student[k], mistake[k]) for k in student)
    if isinstance(student, float) or isinstance(mistake, float):
        if not all(isinstance(x, (int, float)) for x in (student, mistake)):
            return False
        return math.isclose(student, mistake, rel_tol=1e-6, abs_tol=1e-9) or (
            math.isnan(student) and math.isnan(mistake))
    return student == mistake


def _error_kind(text: str) -> str:
    """``'ValueError'`` from ``'ValueError: d_model=5 ... (line 3: ...)'`` (or from
    ``'NotImplementedError (in `f`, line 3)'``, an error without a message)."""
    text = str(text).strip()
    kind = re.match(r"[A-Za-z_][\w.]*(?=:|\s\(|$)", text)
    return kind.group(0) if kind else text.split(":", 1)[0].strip()


def _replies_differ(first: tuple[dict, dict], second: tuple[dict, dict]) -> bool:
    """Whether two replies to one request say different things (a value and an error,
    two different values, or errors of different kinds)."""
    (a, a_tensors), (b, b_tensors) = first, second
    if (a.get("ok") is True) != (b.get("ok") is True):
        return True
    if a.get("ok") is not True:
        return _error_kind(a.get("error", "")) != _error_kind(b.get("error", ""))
    try:
        return not same_answer(decode_reply(a, a_tensors), decode_reply(b, b_tensors))
    except SubmissionError:
        return True


def fingerprint_matches(exchanges: list[Exchange], replies: list[tuple[dict, dict]],
                        reference: list[tuple[dict, dict]] | None = None) -> bool:
    """True when the mistake answered every request as the student did, with at least one
    real value among them (errors alone prove nothing).

    With ``reference`` (the correct solution's replies to the same requests), the mistake
    must also answer at least one request *differently from the solution*: a mistake that
    is right on these inputs (at the diagnosis's tolerance) explains nothing, and the
    student's answers must be wrong in some other way (a dtype, a tiny rounding error).
    """
    if reference is not None and not any(
            map(_replies_differ, replies, reference)):
        return False
    return _all_alike(exchanges, replies) and _gives_a_value(exchanges)


def _all_alike(exchanges: list[Exchange], replies: list[tuple[dict, dict]]) -> bool:
    return all(map(_answered_alike, exchanges, replies))


def _gives_a_value(exchanges: list[Exchange]) -> bool:
    """The student answered at least one request with a value (errors alone prove nothing)."""
    return any(not isinstance(e.outcome, SubmissionError) for e in exchanges)


def _answered_alike(exchange: Exchange, reply: tuple[dict, dict]) -> bool:
    """Whether the mistake's reply to one request says what the student's did: the same
    kind of error, or the same value."""
    (reply, tensors), outcome = reply, exchange.outcome
    if isinstance(outcome, SubmissionError):
        return reply.get("ok") is not True and _error_kind(reply.get("error", "")) == (
            _error_kind(str(outcome)))
    if reply.get("ok") is not True:
        return False
    try:
        return same_answer(outcome, decode_reply(reply, tensors))
    except SubmissionError:
        return False


def _passed_in_full(checks: list[CheckRecord], grade_cell: str,
                    graded_cells: tuple[str, ...] | None = None) -> bool:
    """Whether every check of ``grade_cell`` passed. In a focused run (``graded_cells``:
    ``autograder validate`` grades a made mutant on the cells it breaks) a cell left out
    holds the reference's code and counts as passed: the evidence a whole grading would
    have, without which a mistake of a cell that was not graded (an inverted mask, for a
    decoder that drops its causal mask) could be named in the graded one's place."""
    if graded_cells is not None and grade_cell not in graded_cells:
        return True
    mine = [c for c in checks if c.grade_cell == grade_cell]
    return bool(mine) and all(c.passed for c in mine)


def usable(exchanges: list[Exchange]) -> bool:
    """A transcript worth replaying: something was answered, and nothing says the student
    has not started (a stub) or used a forbidden shortcut."""
    if not exchanges:
        return False
    for exchange in exchanges:
        outcome = exchange.outcome
        if isinstance(outcome, ForbiddenShortcut):
            return False
        if isinstance(outcome, SubmissionError) and NOT_ATTEMPTED in str(outcome):
            return False
    return any(not isinstance(e.outcome, SubmissionError) for e in exchanges)


# -- the diagnosis ------------------------------------------------------------------------------
def diagnose(
    spec: AssignmentSpec,
    notebook_id: str,
    checks: list[CheckRecord],
    transcripts: dict[str, list[Exchange]],
    oracle: MistakeOracle,
    graded_cells: tuple[str, ...] | None = None,
) -> Diagnoses:
    """The named mistakes that explain this notebook's failing checks, per grade cell.

    ``checks`` are the check records; ``transcripts`` maps a :func:`check_key` to the
    requests the check made; ``graded_cells``, in a focused run, the grade cells whose
    checks ran (see :func:`_passed_in_full`). Each grade cell gets the mutant that
    explains most of its failing checks, then the next one for the rest, and so on. The
    result also says which pitfalls the evidence rules out (:class:`Diagnoses`).
    """
    failing = [c for c in checks if not c.passed and usable(transcripts.get(check_key(c), []))]
    mutants = [m for m in spec.mutants if m.notebook == notebook_id]
    if not failing or not mutants:
        return Diagnoses()
    source = {m.name: _mutated_source(spec, m) for m in mutants}
    text = spec.source_text(notebook_id)
    solution = _variant(spec, notebook_id, "reference", text)
    reference: dict[str, list] = {}  # check key -> the correct solution's replies

    def replay(variant: str, variant_source: str, asked_by: list[CheckRecord]) -> list:
        """The variant's replies to the requests of ``asked_by``, a list per check (one
        message to the oracle for all of them)."""
        counts = [len(transcripts[check_key(c)]) for c in asked_by]
        asked = [(e.request, e.tensors) for c in asked_by for e in transcripts[check_key(c)]]
        replies = oracle.replay(variant, variant_source, spec.path, asked)
        ends = list(itertools.accumulate(counts))
        return [replies[end - n:end] for end, n in zip(ends, counts)]

    explained: dict[str, dict[str, list[str]]] = {}  # grade cell -> mutant -> check ids
    excluded: dict[str, set[str]] = {}  # grade cell -> mutants the evidence rules out
    for mutant in mutants:
        mine = [c for c in failing if c.grade_cell in mutant.breaks]
        if not mine:
            continue
        # The mistake loses points on every cell it breaks (autograder validate proves
        # it); a student who passed one of them in full has not made it.
        if any(_passed_in_full(checks, cell, graded_cells) for cell in mutant.breaks):
            for cell in mutant.breaks:
                excluded.setdefault(cell, set()).add(mutant.name)
            continue
        variant = _variant(spec, notebook_id, f"mutant-{mutant.name}", source[mutant.name])
        matched, contradicted = {}, set()
        # In messages of 1, 2, 4, ... checks: one check that contradicts the mistake
        # settles its cell, so the replays of the cell's other checks (a Triton kernel in
        # the interpreter each) would change nothing, and a wrong mistake is mostly
        # contradicted early; doubling keeps the messages few where it is not.
        pending, batch_size, failed = list(mine), 1, False
        while pending:
            batch, pending = pending[:batch_size], pending[batch_size:]
            batch_size *= 2
            unknown = [c for c in batch if check_key(c) not in reference]
            try:
                if unknown:  # what the correct solution answers: see fingerprint_matches
                    reference.update(zip(map(check_key, unknown), replay(solution, text, unknown)))
            except OracleError:
                return Diagnoses()  # no diagnosis is better than a wrong one
            try:
                answers = replay(variant, source[mutant.name], batch)
            except OracleError:
                failed = True  # this mistake says nothing; the others may
                break
            for check, answer in zip(batch, answers):
                key = check_key(check)
                exchanges = transcripts[key]
                if not any(map(_replies_differ, answer, reference[key])):
                    continue  # the mistake is right on these inputs: no evidence either way
                if not _all_alike(exchanges, answer):
                    contradicted.add(check.grade_cell)  # wrong, but not as the student was
                elif _gives_a_value(exchanges):
                    matched.setdefault(check.grade_cell, []).append(key)
            pending = [c for c in pending if c.grade_cell not in contradicted]
        if failed:
            continue
        # One check where the mistake would have answered wrongly, but not as the student
        # did, shows that the student's mistake is another one (or more than one): a
        # coincidence on the other checks (fp16's 2 bytes taken for K and V's factor 2)
        # must not name it.
        for grade_cell, ids in matched.items():
            if grade_cell not in contradicted:
                explained.setdefault(grade_cell, {})[mutant.name] = ids
        for grade_cell in contradicted:
            excluded.setdefault(grade_cell, set()).add(mutant.name)
    by_name = {m.name: m for m in mutants}
    diagnoses = Diagnoses(ruled_out=_pitfalls_ruled_out(mutants, excluded))
    for grade_cell, candidates in explained.items():
        left = {check for ids in candidates.values() for check in ids}
        while left:
            name = max(candidates, key=lambda n: len(left & set(candidates[n])))
            ids = [i for i in candidates[name] if i in left]
            if not ids:
                break
            mutant = by_name[name]
            source_cell, owner = mistake_location(spec, mutant)
            diagnoses.append(Diagnosis(
                grade_cell=grade_cell, mutant=name, pitfall=mutant.pitfall,
                explanation=explanation_of(mutant), source_cell=source_cell,
                owner=owner or grade_cell, checks=ids))
            left -= set(ids)
    return diagnoses


def _pitfalls_ruled_out(mutants, excluded: dict[str, set[str]]) -> dict[str, set[str]]:
    """grade cell -> the pitfalls whose every mutant breaking that cell is ruled out."""
    ruled_out: dict[str, set[str]] = {}
    for grade_cell, names in excluded.items():
        for pitfall in {m.pitfall for m in mutants if m.name in names}:
            behind = {m.name for m in mutants if m.pitfall == pitfall and grade_cell in m.breaks}
            if behind <= names:
                ruled_out.setdefault(grade_cell, set()).add(pitfall)
    return ruled_out


def _variant(spec: AssignmentSpec, notebook_id: str, label: str, source: str) -> str:
    """The oracle's key for one notebook variant: one helper serves every assignment a
    worker grades, and an edited source is a new variant."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:16]
    return f"{spec.name}/{notebook_id}/{label}/{digest}"


def _mutated_source(spec: AssignmentSpec, mutant) -> str:
    return apply_mutant(spec, mutant)


def annotate(checks: list[CheckRecord], diagnoses: list[Diagnosis]) -> None:
    """Mark each explained check record with its cause (the mutant's name), and each
    failing one whose pitfall the evidence ruled out (its "common mistake" would mislead)."""
    cause = {key: d.mutant for d in diagnoses for key in d.checks}
    ruled_out = getattr(diagnoses, "ruled_out", {})
    for check in checks:
        check.cause = cause.get(check_key(check), check.cause)
        if not check.passed and check.pitfall in ruled_out.get(check.grade_cell, ()):
            check.pitfall_ruled_out = True
