"""What a student may see of a check: the trusted result, cut to the instructor's setting.

The trusted result (:func:`.check_my_work.check_notebook`) holds each hidden
check's record. A record's message is written for feedback after grading and may quote
reference values (``expected 2,621,440``) and the check's inputs (``causal_mask(6)``),
and the student's own code can put what it was given into an exception message. So
before anything leaves the server:

* a check's name is the first line of its docstring, which authors write for students;
  a parametrised case is numbered (``(case 2)``) instead of showing its parameters;
* a message keeps its first line only, loses its hint (shown apart), and has every
  number and every quoted string replaced by ``…``, except, in a check's own message, a
  shape written as a tuple (``has shape (2, 5, 3, 4), expected (2, 3, 5, 4)``): it says
  what went wrong and compares no value. The student's own exception text loses those
  too, since their code could write the hidden inputs into it as a tuple;
* hints and pitfalls, which authors write as advice, are shown as written;
* an internal error of the grader becomes a plain sentence.

The visibility setting then decides how much of that goes out (``full``, ``names``,
``score``); ``off`` never reaches here, the check is refused.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

from ...grading.scoring import raised_in, readable_message, upstream_message, waiting_on_values
from ...protocol.kernel_side import UNDEFINED_ADVICE

_CASE_ID = re.compile(r"\s*\[[^\]]*\]\s*$")
_HINT = re.compile(r"\.?\s*Hint:\s*", re.IGNORECASE)
_QUOTED = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
# A number that is not part of a name (float32, log2, d_k2 stay): 3, -1.5e-3, 2,621,440.
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:[,_]\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?(?![\w])")
_RANGE = re.compile(r"\d+\s*\.\.\s*\d+")
_REPEATS = re.compile(r"…(?:\s*[,x×]\s*…)+")
# A tuple of sizes standing on its own, as Python prints a shape: (2, 5, 12), (6,), ().
# Not a call's arguments (kv_cache_bytes(80, 8)): those are a check's inputs.
_SHAPE = re.compile(r"(?<![\w\])])\((?:(?:\s*\d+\s*,)+(?:\s*\d+\s*)?|\s*)\)")
_KEPT = "\ue000"  # stands in for a kept shape while the rest is scrubbed
# Part of a formula an author wrote, not a value: an axis (``dim=-1``, ``q.size(-1)``,
# ``.transpose(-2, -1)``) or a reciprocal (``1/sqrt(d_k)``). Kept as written.
_FORMULA = re.compile(r"\bdim\s*=\s*-?\d\b|\.\w+\(\s*-\d(?:\s*,\s*-\d)*\s*\)"
                      r"|(?<![\w.])1/(?=[A-Za-z(])")
# What scrubbing leaves of a label and its value, "(largest difference …)": says nothing.
_EMPTY_ASIDE = re.compile(r"\s+\([A-Za-z][A-Za-z _-]*\s…\)")
MAX_TEXT = 300
INTERNAL_ERROR = ("the checks could not finish for this notebook; your notebook may be "
                  "fine: try again, and tell your instructor if it happens again")


def scrub(text: str, keep_shapes: bool = True) -> str:
    """One line of a check message with numbers and quoted strings replaced by ``…``
    (shapes kept, unless ``keep_shapes`` is False)."""
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    line = _QUOTED.sub("…", line)
    shapes: list[str] = []
    kept_parts = _FORMULA if not keep_shapes else re.compile(
        f"{_FORMULA.pattern}|{_SHAPE.pattern}")
    line = kept_parts.sub(lambda m: shapes.append(m[0]) or _KEPT, line.replace(_KEPT, ""))
    line = _RANGE.sub("…", line)
    line = _NUMBER.sub("…", line)
    line = _REPEATS.sub("…", line)
    line = _EMPTY_ASIDE.sub("", line)
    kept = iter(shapes)
    line = re.sub(_KEPT, lambda _: next(kept), line)
    return _clip(line)


def split_hint(message: str) -> tuple[str, str | None]:
    """``"what went wrong. Hint: what to try"`` -> (what went wrong, what to try)."""
    parts = _HINT.split(message or "", maxsplit=1)
    if len(parts) == 2:
        return parts[0], _clip(" ".join(parts[1].split())) or None
    return message or "", None


def student_message(record: dict) -> tuple[str | None, str | None]:
    """(message, hint) that may be shown for a failed check record."""
    if record.get("passed"):
        return None, None
    message = record.get("message") or ""
    kind, _, rest = message.partition(": ")
    if kind == "ForbiddenShortcut":
        return scrub(rest, keep_shapes=False), None
    if kind == "SubmissionError":
        return scrub(_submission_error(rest), keep_shapes=False), None
    if re.fullmatch(r"[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)", kind) and not rest:
        return INTERNAL_ERROR, None
    if re.fullmatch(r"[A-Za-z_][\w.]*(Error|Exception)", kind):
        # The check itself raised (say, a TypeError on a result of the wrong kind).
        return f"this check could not use your result ({kind})", None
    text, hint = split_hint(message)
    return scrub(text) or "this check failed", hint


def _ran(record: dict) -> bool:
    """Whether the student's code ran and gave an answer (that the check judged)."""
    message = record.get("message") or ""
    return not message.startswith(("SubmissionError:", "ForbiddenShortcut:"))


#: What the kernel says when a check asks for a name the notebook never defined
#: (``kernel_side``); only an identifier is kept, never other text of the student's.
_UNDEFINED = re.compile(r"NameError: '([A-Za-z_]\w{0,40}(?:\.[A-Za-z_]\w{0,40})?)' is not "
                        rf"defined: ({re.escape(UNDEFINED_ADVICE)})")


def _submission_error(text: str) -> str:
    """The student's code raised: say which exception, and where its message says so."""
    first = text.strip().splitlines()[0] if text.strip() else ""
    if first.startswith("NotImplementedError"):
        where = raised_in(first)
        return not_written([where] if where else [])
    undefined = _UNDEFINED.fullmatch(first)
    if undefined:  # the grader's own words for a name the check asked for: keep the name
        return f"`{undefined[1]}` is not defined: {undefined[2]}"
    return readable_message(f"SubmissionError: {first}") if first else (
        "your code raised an exception")


def not_written(names: list[str]) -> str:
    """The line for checks that failed on unimplemented stubs (``names``: where they raised)."""
    if not names:
        return "not written yet: the function still raises NotImplementedError"
    quoted = [f"`{name}`" for name in names]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    return f"not written yet: {listed} still raise{'s' if len(names) == 1 else ''} " \
        "NotImplementedError"


_NOT_WRITTEN = re.compile(r"not written yet: `([^`]+)` still raises NotImplementedError")


def shared_reason(checks: list[dict]) -> str | None:
    """One line for all of an exercise's failing checks, when one cause fails them all: the
    same message each time, or stubs not written yet (an exercise of several functions
    fails on each of them: they are named together)."""
    messages = list(dict.fromkeys(c["message"] for c in checks if not c["passed"]))
    if not messages or not all(messages):
        return None
    if len(messages) == 1:
        return messages[0] if sum(not c["passed"] for c in checks) > 1 else None
    stubs = [_NOT_WRITTEN.fullmatch(m) for m in messages]
    return not_written([m[1] for m in stubs]) if all(stubs) else None


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1].rstrip() + "…"


def check_names(records: list[dict]) -> list[str]:
    """Display names: the docstring's first line; parametrised cases numbered."""
    bases = [_CASE_ID.sub("", r.get("description") or r.get("id") or "check").strip()
             for r in records]
    counts = {b: bases.count(b) for b in bases}
    seen: dict[str, int] = {}
    names = []
    for base in bases:
        if counts[base] > 1:
            seen[base] = seen.get(base, 0) + 1
            names.append(f"{base} (case {seen[base]})")
        else:
            names.append(base)
    return names


def restrict(checks: list[dict], visibility: str) -> list[dict]:
    """Saved check views cut to the current setting (an instructor may lower it later)."""
    if visibility in ("score", "off"):
        return []
    if visibility == "names":
        return [{**c, "message": None, "hint": None, "pitfall": None} for c in checks]
    return checks


#: Under a written answer left as released: no check grades it, so it never "fails".
UNANSWERED = "not written yet: write your answer in its cell; a person grades it after you submit"


def exercise_status(score: float | None, max_score: float, *, manual=False, answered=False):
    """``passing`` or ``failing`` for an exercise the checks grade; ``waiting`` (for a
    person) for a written answer, written or not (:data:`UNANSWERED` says which)."""
    if manual:
        return "waiting"
    return "passing" if score is not None and score >= max_score else "failing"


def student_view(trusted: dict, visibility: str, order: list[str] | None = None) -> dict:
    """The answer to ``POST /autograder/api/check`` for one trusted result.

    ``order`` lists the grade cell ids in notebook order (default: as they come).
    """
    exercises = []
    cells = trusted.get("cells", {})
    manual = trusted.get("manual", {})
    for grade_id in order or [*cells, *manual]:
        if grade_id in cells:
            entry = cells[grade_id]
            records = entry.get("checks", [])
            checks = []
            # Under a failing earlier exercise, its classic mistakes would mislead.
            upstream = bool(entry.get("upstream"))
            if visibility in ("full", "names"):
                for record, name in zip(records, check_names(records)):
                    message, hint = student_message(record) if visibility == "full" else (None,
                                                                                           None)
                    # A check a diagnosis explains gets no hint of its own: the diagnosis,
                    # shown first, names the cause, and its own hint would point elsewhere.
                    explained = bool(record.get("cause"))
                    checks.append({
                        "name": name,
                        "passed": bool(record.get("passed")),
                        "message": message,
                        "hint": None if explained else hint,
                        # The mistake a check points to, once the code runs at all.
                        # (Not one the diagnosis ruled out: the student did not make it.)
                        "pitfall": (record.get("pitfall") if visibility == "full" and not explained
                                    and not upstream and not record.get("passed")
                                    and not record.get("pitfall_ruled_out")
                                    and _ran(record) else None),
                    })
            exercises.append({
                "name": grade_id,
                "kind": "auto",
                # A classic mistake the checks recognised, in the words written for students.
                # An earlier exercise it calls that fails too comes first: fix that one.
                "diagnoses": ((([upstream_message(entry["upstream"])] if entry.get("upstream")
                                else []) + [d["message"] for d in entry.get("diagnoses", [])])
                              if visibility == "full" else []),
                "score": entry["score"],
                "max_score": entry["max_score"],
                "status": exercise_status(entry["score"], entry["max_score"]),
                "passed": entry.get("passed", 0) if visibility != "score" else None,
                "total": entry.get("total", 0) if visibility != "score" else None,
                "checks": checks,
                # Said once above the list instead of under every failing check.
                "shared_reason": shared_reason(checks) if visibility == "full" else None,
                # Passing checks of names, shapes or properties that earn nothing yet.
                "waiting_on_values": waiting_on_values([
                    SimpleNamespace(passed=bool(r.get("passed")), structural=r.get("structural"),
                                    property=r.get("property")) for r in records]) if checks else 0,
            })
        elif grade_id in manual:
            entry = manual[grade_id]
            exercises.append({
                "name": grade_id,
                "kind": "manual",
                "diagnoses": [],
                "score": None,
                "max_score": entry["max_score"],
                "status": exercise_status(None, entry["max_score"], manual=True,
                                          answered=entry["answered"]),
                "passed": None,
                "total": None,
                "checks": [],
                "shared_reason": (None if entry["answered"] or visibility != "full"
                                  else UNANSWERED),
                "waiting_on_values": 0,
            })
    auto = [e for e in exercises if e["kind"] == "auto"]
    return {
        "score": round(sum(e["score"] for e in auto), 4),
        "max_score": round(sum(e["max_score"] for e in auto), 4),
        "waiting_score": round(sum(e["max_score"] for e in exercises if e["kind"] == "manual"), 4),
        "visibility": visibility,
        "exercises": exercises,
        "notes": notes(trusted),
    }


def notes(trusted: dict) -> list[str]:
    """What happened to the notebook itself: restored cells, errors, time-outs.

    These describe the student's own cells run on their own data, so they are shown;
    the grader's internal errors are not (they can quote the hidden checks)."""
    out = []
    for note in [*trusted.get("findings", []), *trusted.get("events", [])]:
        if note.startswith(("grading error", "not graded")):
            out.append(INTERNAL_ERROR)
        else:
            out.append(_clip(note))
    return list(dict.fromkeys(out))
