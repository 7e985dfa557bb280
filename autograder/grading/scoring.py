"""Step 4 of grading: turn check results into points per nbgrader grade cell.

A grade cell's score is ``points x (weight of passed checks) / (weight of all its
checks)``. Two kinds of checks count only when a value check of the same cell passes:
``structural`` ones (names, shapes, error handling: names alone are not an
implementation) and ``property`` ones (invariances such as "the future never changes
the past" or "shuffling the input shuffles the output", which a constant answer
satisfies trivially). Only the hidden checks count: what a test cell printed in the
student's kernel, warnings on stderr included, never costs or earns points.
"""

from __future__ import annotations

import html
import re

from ..jobs import CheckRecord

#: Every score is rounded to this many decimals where it is computed, so the Course panel,
#: ``autograder report``, the feedback page and formgrader (which shows two) all print the
#: same digits: 4.29, never 4.2946 in one place and 4.29 in another.
POINT_DECIMALS = 2


def score_cells(
    points: dict[str, float], checks: list[CheckRecord], diagnoses: list[dict] = (),
    uses: dict[str, dict[str, list[str]]] | None = None,
) -> dict[str, dict]:
    """``{grade_id: {"score", "max_score", "passed", "total", "checks", "diagnoses",
    "attempted", "upstream"}}``; ``diagnoses`` are
    :meth:`autograder.grading.diagnosis.Diagnosis.as_dict`, ``uses`` is
    :func:`autograder.grading.upstream.exercise_uses` of the notebook."""
    table, uses = {}, uses or {}
    for grade_id, max_score in points.items():
        mine = [c for c in checks if c.grade_cell == grade_id]
        callees = {n for names in uses.get(grade_id, {}).values() for n in names}
        total = sum(c.weight for c in mine)
        # Structural and property checks earn points only next to at least one passing
        # value check: names, shapes and invariances alone are not an implementation.
        values_ok = values_pass(mine)
        passed = sum(c.weight for c in mine if c.passed and (values_ok or not gated(c)))
        score = round(max_score * passed / total, POINT_DECIMALS) if total else 0.0
        table[grade_id] = {
            "score": score,
            "max_score": float(max_score),
            "passed": sum(1 for c in mine if c.passed),
            "total": len(mine),
            "checks": mine,
            "diagnoses": [d for d in diagnoses if d["grade_cell"] == grade_id],
            "attempted": attempted(mine, callees),
        }
    for grade_id, entry in table.items():
        entry["upstream"] = failing_callees(grade_id, table, uses)
    return table


def failing_callees(grade_id: str, table: dict, uses: dict) -> list[dict]:
    """The earlier exercises that ``grade_id`` calls and that fail their own checks, when it
    fails too: ``[{"grade_cell", "names", "attempted"}]``. A callee a diagnosis of this
    exercise already points to is left to the diagnosis."""
    entry = table[grade_id]
    if entry["score"] >= entry["max_score"]:
        return []
    named = {d.get("owner") for d in entry["diagnoses"]}
    failing = [callee for callee in uses.get(grade_id, {})
               if callee in table and callee != grade_id
               and table[callee]["score"] < table[callee]["max_score"]]
    # One root cause: a callee that fails only for something a diagnosis here names is
    # left to it; one that fails because of an exercise it calls in turn sends the student
    # to that one (the earliest failing exercise down the chain), named once.
    roots: dict[str, list[str]] = {}
    for callee in failing:
        if callee in named or _causes(callee, table, uses, {grade_id}) & named:
            continue
        for root, names in _roots(callee, uses[grade_id][callee], table, uses, {grade_id}):
            if root not in named:
                roots.setdefault(root, [])
                roots[root] += [n for n in names if n not in roots[root]]
    return [{"grade_cell": root, "names": names, "attempted": table[root]["attempted"]}
            for root, names in roots.items()]


def _failing(grade_id: str, table: dict) -> bool:
    return table[grade_id]["score"] < table[grade_id]["max_score"]


def _roots(callee: str, names: list[str], table: dict, uses: dict,
           seen: set[str]) -> list[tuple[str, list[str]]]:
    """``[(exercise, functions)]`` at the bottom of ``callee``'s failure: ``callee`` itself
    (reached through ``names``) unless it calls failing earlier exercises, then theirs."""
    seen = seen | {callee}
    deeper = [(c, n) for c, n in uses.get(callee, {}).items()
              if c in table and c not in seen and _failing(c, table)]
    if not deeper:
        return [(callee, names)]
    return [root for c, n in deeper for root in _roots(c, n, table, uses, seen)]


def _causes(grade_id: str, table: dict, uses: dict, seen: set[str]) -> set[str]:
    """The exercises that ``grade_id``'s failure is put down to: its diagnoses' owners and
    its failing callees, and theirs in turn."""
    seen = seen | {grade_id}
    causes = {d.get("owner") for d in table[grade_id]["diagnoses"]} - {grade_id, None}
    for callee in uses.get(grade_id, {}):
        if callee in table and callee not in seen and _failing(callee, table):
            causes |= {callee} | _causes(callee, table, uses, seen)
    return causes


def upstream_message(callees: list[dict]) -> str:
    """One sentence for the top of an exercise whose callees fail (see failing_callees)."""
    parts = []
    for item in callees:
        names = ", ".join(f"`{name}`" for name in item["names"])
        state = "not written yet" if not item["attempted"] else "which fails"
        parts.append(f"{names} (checked under `{item['grade_cell']}`, {state})")
    one = len(callees) == 1 and len(callees[0]["names"]) == 1
    return (f"This exercise calls {'; '.join(parts)}. Fix {'that' if one else 'those'} first, "
            "from the top of the notebook: the failures below may follow from "
            f"{'it' if one else 'them'}.")


def gated(check: CheckRecord) -> bool:
    """A check that counts only when a value check of its cell passes."""
    return check.structural or check.property


def values_pass(checks: list[CheckRecord]) -> bool:
    """Whether a check of the values passes, which lets the gated checks count."""
    return any(c.passed and not gated(c) for c in checks)


def waiting_on_values(checks: list[CheckRecord]) -> int:
    """How many passing checks earn nothing yet, for want of a passing check of the values."""
    return 0 if values_pass(checks) else sum(1 for c in checks if c.passed and gated(c))


def attempted(checks: list[CheckRecord], callees: set[str] = frozenset()) -> bool:
    """False when every check of an exercise that tells anything failed on an
    unimplemented stub of its own; a stub among ``callees`` (earlier exercises' names it
    calls) is not its own. A passing structural or property check tells nothing alone: a
    stub's ``__init__`` can already create the parameters its ``forward`` raises on."""
    def own_stub(check):
        where = raised_in(check.message)
        return "NotImplementedError" in check.message and not (
            where and where.split(".")[0] in callees)  # StaticKVCache.update: StaticKVCache
    return (not checks or values_pass(checks)
            or any(not c.passed and not own_stub(c) for c in checks))


def raised_in(message: str) -> str | None:
    """The student's function an error message places itself in (``in `causal_mask```)."""
    found = re.search(r"\(in `([^`]+)`", message or "")
    return found[1] if found else None


def cell_report_markdown(grade_id: str, entry: dict) -> str:
    """The report written into an autograded test cell (shown in formgrader and feedback).

    A diagnosed mistake comes first, with the failing checks it explains listed under it
    (their own hints would point elsewhere); then the other checks.
    """
    lines = [
        f"**Hidden checks for `{grade_id}`: {entry['score']:g} / {entry['max_score']:g} points**"
        f" ({entry['passed']} of {entry['total']} checks passed)",
        "",
    ]
    if not entry["total"]:
        lines.append(
            "- no result: the checks could not run for this submission (see the notes above)"
        )
    elif not entry.get("attempted", True):
        lines.append("- not attempted yet: the exercise still raises NotImplementedError")
    if entry.get("upstream"):
        lines.append(f"- **Fix first:** {html.escape(upstream_message(entry['upstream']))}")
    explained = set()
    for diagnosis in entry.get("diagnoses", []):
        lines.append(f"- **Diagnosis:** {html.escape(diagnosis['message'])}")
        mine = [c for c in entry["checks"] if check_key(c) in diagnosis["checks"]]
        for check in mine:
            lines.append(f"  - ✘ {html.escape(check.description)}")
        explained |= {check_key(c) for c in mine}
    values_ok = values_pass(entry["checks"])
    said = {}  # one cause often fails many checks, with other numbers each time: say it once
    for check in entry["checks"]:
        if check_key(check) in explained:
            continue
        mark = "✔" if check.passed else "✘"
        line = f"- {mark} {html.escape(check.description)}"
        if check.passed and gated(check) and not values_ok:
            line += " (counts once a check of the values passes)"
        if not check.passed and check.message:
            message = readable_message(check.message)
            gist = _gist(message)
            first = said.get(gist)
            if first is None:
                said[gist] = message
                line += f"  \n  {html.escape(message)}"
            else:
                line += "  \n  (the same reason as above" + (
                    ")" if first == message else ", on other inputs)")
        lines.append(line)
    return "\n".join(lines)


def readable_message(message: str) -> str:
    """A check's message as a student reads it: the grader's own class names left out.

    ``SubmissionError: RuntimeError: ...`` (the student's code raised) becomes ``your code
    raised RuntimeError: ...``; a message of the grader's about the run (``no answer within
    10s``) or the answer (``your function returned a numpy.ndarray``) is kept as it is.
    """
    kind, _, rest = message.partition(": ")
    if kind == "ForbiddenShortcut":
        return rest
    if kind != "SubmissionError":
        return message
    if re.match(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Warning|Iteration)\b", rest):
        return f"your code raised {rest}"
    return rest


def _gist(message: str) -> str:
    """A message with its numbers and flags left out: the same mistake on other inputs
    (another shape, ``causal=True``) reads the same."""
    return re.sub(r"\d+(\.\d*)?(e[-+]?\d+)?|\b(True|False|None)\b", "#", message)


def check_key(check: CheckRecord) -> str:
    """A check's name, unique within an assignment: ``module::test id``."""
    return f"{check.module}::{check.id}"
