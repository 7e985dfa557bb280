"""Copies of the reference, told apart from honest work that follows the same formulas.

A notebook that states the formula, the shapes, the attribute names and the hints leaves
an honest student little room: much of a correct answer is *dictated*, and a student who
writes it the most direct way writes much of what the reference writes. Comparing such
a student with the reference the way two students are compared
(:func:`autograder.reports.similarity.compare`) flags honest work; a disguised copy (names
changed, comments dropped) is still nearer, but not by a margin the raw share shows.

So the comparison with the reference is measured against an *honest baseline*: how
similar to the reference independent work gets on each exercise. The baseline of an
exercise is the larger of

* the highest similarity to the reference among the assignment's **independent
  solutions**: correct answers written from the released notebook alone, without the
  reference, kept with the hidden checks (``<checks>/independent/<author>.txt``, one
  section ``# %% <grade_id>`` per solution cell, see :func:`read_solutions`); write one
  the most direct way the formulas allow, and others in other styles;
* the class's **median** similarity to the reference (what most students reach), when
  at least ``common_min`` submissions answered the exercise. (A class in which most
  copied the reference has a median near 1: those copies are then found as pairs of
  students, not against the reference.)

A submission's score against the reference is then its similarity *beyond* the baseline,
on the scale that is left, as Cohen's kappa corrects agreement for chance: per exercise
``(s - b) / (1 - b)`` (0 below the baseline), pooled over the exercises by the
fingerprints the baseline leaves to tell (:func:`beyond_baseline`). A disguised copy
(``s`` near 1) keeps a score near 1 whatever ``b``; an independent solution at or below
what other independent solutions reach scores 0.

Pairs of students get the same treatment with the baseline of honest pairs: the highest
similarity between two of the reference and the independent solutions. Two students
who both write the formulas the direct way are no more alike than the reference and
such a solution, and neither is a student who follows the formulas to one who copied
the reference.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
import statistics
from pathlib import Path

from .similarity import (
    REFERENCE,
    Match,
    Region,
    Result,
    code_solution_cells,
    compare,
    fingerprints,
    given_names,
    read_notebook,
    region,
)

#: Where an assignment keeps its independent solutions, inside its hidden checks folder.
INDEPENDENT_DIR = "independent"
#: A released stub, named by the release (``raise NotImplementedError("...")``).
_STUB = re.compile(r"^([ \t]*)# YOUR CODE HERE\n\1raise NotImplementedError\([^\n]*\)", re.M)


def read_solutions(text: str) -> dict[str, list[str]]:
    """``{grade_id: [code for each stub of the cell]}`` from one author's file: a line
    ``# %% <grade_id>`` starts a solution cell, ``# %% ---`` its next stub (a class's
    ``forward`` after ``__init__``); code is written at indentation 0."""
    solutions: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith("# %% ---") and current is not None:
            current.append("")
        elif line.startswith("# %% "):
            current = solutions.setdefault(line[5:].strip(), [""])
        elif current is not None:
            current[-1] += line + "\n"
    return solutions


def fill_cell(scaffold: str, parts: list[str]) -> str:
    """The released cell ``scaffold`` with its stubs replaced, in order, by ``parts``
    (each indented to its stub's place); stubs beyond ``parts`` stay."""
    answers = iter(parts)

    def replace(match: re.Match) -> str:
        code = next(answers, None)
        if code is None:
            return match.group(0)
        indent = match.group(1)
        return "\n".join(indent + line if line.strip() else ""
                         for line in code.rstrip().splitlines())

    return _STUB.sub(replace, scaffold)


def independent_regions(folder: Path, scaffold: dict[str, str], given: set[str],
                        prefix: str = "") -> dict[str, dict[str, Region]]:
    """``{author: {exercise: Region}}`` of the independent solutions in ``folder`` (one
    ``<author>.txt`` each), filled into the released cells ``scaffold`` (``{grade_id:
    source}``); exercises are named ``prefix + grade_id`` as the report names them."""
    authors: dict[str, dict[str, Region]] = {}
    for path in sorted(Path(folder).glob("*.txt")) if Path(folder).is_dir() else []:
        regions = authors.setdefault(path.stem, {})
        for section, parts in read_solutions(path.read_text()).items():
            # ``notebook:grade_id`` in an assignment of several notebooks.
            grade_id = section.removeprefix(prefix) if prefix else section
            if grade_id in scaffold:
                filled = fill_cell(scaffold[grade_id], parts)
                regions[prefix + grade_id] = region(scaffold[grade_id], filled, given)
    return authors


def shares(a: dict[str, Region], b: dict[str, Region], result: Result) -> dict[str, float]:
    """``{exercise: similarity}`` of two authors' regions, measured as
    :func:`~autograder.reports.similarity.compare` measures two students (the class's common code
    left out on both sides; the share of the smaller side's own fingerprints)."""
    found = {}
    for ex in result.compared:
        if ex not in a or ex not in b or min(len(a[ex].tokens), len(b[ex].tokens)) < \
                result.settings.k:
            continue
        common = result.common.get(ex, set())
        prints_a = set(fingerprints(a[ex], result.settings)) - common
        prints_b = set(fingerprints(b[ex], result.settings)) - common
        size = min(len(prints_a), len(prints_b))
        if size:
            found[ex] = len(prints_a & prints_b) / size
    return found


def honest_baseline(result: Result, to_reference: dict[str, dict[str, float]],
                    class_median: bool = True) -> dict[str, float]:
    """``{exercise: baseline}``: the highest of ``to_reference`` (``{author: shares}``)
    and, with ``class_median``, the class's median share of the reference."""
    baseline = {}
    for ex in result.compared:
        values = [found[ex] for found in to_reference.values() if ex in found]
        class_shares = [m.exercise_score(ex) for m in result.reference if ex in m.exercises]
        # A median of a handful says little (two copies would make it 1): the class
        # counts from as many submissions as common code needs.
        if class_median and len(class_shares) >= result.settings.common_min:
            values.append(statistics.median(class_shares))
        baseline[ex] = max(values, default=0.0)
    return baseline


@dataclasses.dataclass
class BeyondBaseline(Match):
    """A match scored beyond the honest baseline: ``exercises`` holds, per exercise,
    ``(fingerprints shared beyond the baseline, fingerprints the baseline leaves to
    tell)``; ``raw`` the plain ``(shared, size)`` it came from, whose shared
    fingerprints count towards ``min_shared`` (the amount of code in common)."""

    raw: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)

    @property
    def shared(self) -> int:
        return sum(n for n, _ in self.raw.values())


def beyond_baseline(match: Match, baseline: dict[str, float]) -> BeyondBaseline:
    """``match`` scored beyond ``baseline``. Of an exercise's ``size`` fingerprints, the
    baseline ``b`` explains ``b * size`` and leaves ``(1 - b) * size`` to tell honest
    work from copying; the match shares ``max(0, shared - b * size)`` of those. The score
    pools them over the exercises: an exercise that honest work reproduces entirely
    (``b = 1``) says nothing either way and weighs nothing."""
    exercises = {}
    for ex, (shared, size) in match.exercises.items():
        b = min(max(baseline.get(ex, 0.0), 0.0), 1.0)
        exercises[ex] = (round(max(0.0, shared - b * size), 2), round((1.0 - b) * size, 2))
    told = sum(size for _, size in exercises.values())
    score = sum(n for n, _ in exercises.values()) / told if told else 0.0
    return BeyondBaseline(match.a, match.b, round(min(score, 1.0), 4), exercises,
                          raw=dict(match.exercises))


@dataclasses.dataclass
class Baseline:
    """What :func:`discount` used: the baselines per exercise and where they came from."""

    per_exercise: dict[str, float]  # against the reference
    pairs: dict[str, float]  # between two students
    independent: dict[str, dict[str, float]]  # author -> exercise -> share of the reference


def discount(result: Result, reference: dict[str, Region],
             independent: dict[str, dict[str, Region]]) -> Baseline:
    """Replace ``result.reference`` and ``result.pairs`` by their matches beyond the
    honest baselines (in place; most similar first) and return the baselines.

    Against the reference: the independent solutions' highest share of it, or the
    class median. Between two students: the highest share between two honest authors,
    the reference and the independent solutions (two students who both write the
    formulas the direct way are as alike as the reference and such a solution; and one
    who copied the reference is as alike to an honest formula-follower as the reference
    itself is)."""
    to_reference = {author: shares(regions, reference, result)
                    for author, regions in independent.items()}
    baseline = honest_baseline(result, to_reference)
    honest = {REFERENCE: reference, **independent}
    between = {f"{a} ~ {b}": shares(honest[a], honest[b], result)
               for a, b in itertools.combinations(sorted(honest), 2)}
    pair_baseline = honest_baseline(result, between, class_median=False)
    order = lambda m: (-m.score, m.a, m.b)  # noqa: E731
    result.reference = sorted((beyond_baseline(m, baseline) for m in result.reference),
                              key=order)
    result.pairs = sorted((beyond_baseline(m, pair_baseline) for m in result.pairs), key=order)
    return Baseline(baseline, pair_baseline, to_reference)


def load_independent(course, name: str) -> dict[str, dict[str, Region]]:
    """The independent solutions of assignment ``name`` (its hidden checks folder's
    ``independent/``), as regions of the released notebooks; ``{}`` when it has none."""

    spec = course.spec(name)
    folder = spec.checks_dir() / INDEPENDENT_DIR
    if not folder.is_dir():
        return {}
    authors: dict[str, dict[str, Region]] = {}
    for nb_id in spec.notebooks:
        released = read_notebook(course.path("release", name, f"{nb_id}.ipynb")) or {"cells": []}
        scaffold = code_solution_cells(released)
        code = ["".join(c.get("source", "")) for c in released["cells"]
                if c.get("cell_type") == "code"]
        prefix = "" if len(spec.notebooks) == 1 else f"{nb_id}:"
        found = independent_regions(folder, scaffold, given_names(code), prefix)
        for author, regions in found.items():
            authors.setdefault(author, {}).update(regions)
    return authors


#: The name under which :func:`left_out` hands in the reference's own code.
DISGUISED = "disguised copy of the reference"


def panel_and_reference(course, name: str, folder: Path) -> tuple[dict, dict]:
    """``({author: regions}, reference regions)`` of the independent solutions in
    ``folder`` and of the instructor's source, both on the released scaffold."""

    spec = course.spec(name)
    authors: dict[str, dict[str, Region]] = {}
    reference: dict[str, Region] = {}
    for nb_id in spec.notebooks:
        released = read_notebook(course.path("release", name, f"{nb_id}.ipynb")) or {"cells": []}
        source = read_notebook(course.path("source", name, f"{nb_id}.ipynb")) or {"cells": []}
        scaffold = code_solution_cells(released)
        given = given_names(["".join(c.get("source", "")) for c in released["cells"]
                             if c.get("cell_type") == "code"])
        prefix = "" if len(spec.notebooks) == 1 else f"{nb_id}:"
        for grade_id, answer in code_solution_cells(source).items():
            reference[prefix + grade_id] = region(scaffold.get(grade_id, ""), answer, given)
        for author, regions in independent_regions(folder, scaffold, given, prefix).items():
            authors.setdefault(author, {}).update(regions)
    return authors, reference


def left_out(authors: dict[str, dict[str, Region]], reference: dict[str, Region]
             ) -> list[tuple[str, float, float, bool, bool]]:
    """How the reference comparison treats each independent solution and a disguised
    copy of the reference, in a class of just those: ``(author, raw score, score beyond
    the baseline, flagged raw, flagged beyond it)``. Each author is judged with the
    *other* authors as the baseline, never with itself. (Renaming locals and dropping
    comments leave the normalised tokens as they are, so the reference's own code, on
    the exercises the authors answered, stands for every such disguise.)"""

    answered = set().union(*(set(r) for r in authors.values())) if authors else set()
    students = {**authors, DISGUISED: {ex: reference[ex] for ex in answered}}
    rows = []
    for who in students:
        result = compare(students, reference)
        raw = next(m for m in result.reference if m.a == who)
        flagged_raw = raw in result.flagged()[1]
        discount(result, reference, {a: r for a, r in authors.items() if a != who})
        now = next(m for m in result.reference if m.a == who)
        rows.append((who, raw.score, now.score, flagged_raw, now in result.flagged()[1]))
    return rows
