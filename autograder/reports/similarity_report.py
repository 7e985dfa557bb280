"""``autograder report NAME --similarity``: near-copies in a class, and of the reference.

Reads the handed-in notebooks (``submitted/<student>/<assignment>/``), the released
notebooks (to tell what each student wrote from the scaffold they were given) and
the instructor's source (the reference solution), and compares them with
:mod:`autograder.reports.similarity`. It prints the pairs at or above the threshold and
writes an HTML page with the matching code side by side. It never opens the
gradebook: a flag is a reason for a human to look, never a change of score.
"""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import json
import sys
from pathlib import Path

from ..workspace.course import Course, CourseError
from .similarity import (
    REFERENCE,
    Region,
    Result,
    Settings,
    code_solution_cells,
    compare,
    given_names,
    read_notebook,
    region,
    shared_lines,
)

MAX_HTML_MATCHES = 200  # the page shows the most similar pairs first, up to this many


def load(course: Course, name: str) -> tuple[dict, dict, list[str]]:
    """(``{student: {exercise: Region}}``, reference regions, notes on unreadable work)."""
    spec = course.require_released(name)
    students: dict[str, dict[str, Region]] = {s: {} for s in course.students_with_submissions(name)}
    reference: dict[str, Region] = {}
    notes: list[str] = []
    for nb_id in spec.notebooks:
        released = read_notebook(course.path("release", name, f"{nb_id}.ipynb"))
        source = read_notebook(course.path("source", name, f"{nb_id}.ipynb"))
        if released is None or source is None:
            raise CourseError(f"'{name}' has not been released: run "
                              f"`{course.command(f'release {name}')}`")
        scaffold = code_solution_cells(released)
        code = [c.get("source", "") for c in released["cells"] if c.get("cell_type") == "code"]
        given = given_names(["".join(src) for src in code])
        prefix = "" if len(spec.notebooks) == 1 else f"{nb_id}:"
        for gid, answer in code_solution_cells(source).items():
            reference[prefix + gid] = region(scaffold.get(gid, ""), answer, given)
        for student in students:
            nb = read_notebook(course.path("submitted", student, name, f"{nb_id}.ipynb"))
            if nb is None:
                notes.append(f"{student}: {nb_id}.ipynb is missing or not a notebook (skipped)")
                continue
            for gid, answer in code_solution_cells(nb).items():
                if gid in scaffold:
                    students[student][prefix + gid] = region(scaffold[gid], answer, given)
    return students, reference, notes


def run(course: Course, name: str, settings: Settings | None = None, independent=None):
    """(result, students' regions, reference regions, notes). The comparison with the
    reference counts only what goes beyond the honest baseline of
    :mod:`autograder.reports.reference_baseline` (``independent``: the assignment's independent
    solutions as regions; default: those kept with its hidden checks); the baseline is
    ``result.baseline``."""
    from .reference_baseline import discount, load_independent

    students, reference, notes = load(course, name)
    result = compare(students, reference, settings or Settings())
    if independent is None:
        independent = load_independent(course, name)
    result.baseline = discount(result, reference, independent)
    return result, students, reference, notes


# -- text, JSON, CSV ----------------------------------------------------------------
def _detail(match, result: Result) -> str:
    return ", ".join(
        f"{ex} {match.exercise_score(ex):.0%}"
        for ex in result.compared
        if ex in match.exercises and match.exercises[ex][0]
    )


def as_text(result: Result, name: str, n_students: int, html_path: Path | None) -> str:
    pairs, ref = result.flagged()
    t = result.settings.threshold
    lines = [
        f"Similarity of {name}: {n_students} submissions; compared: "
        f"{', '.join(result.compared) or 'nothing'}",
    ]
    if result.skipped:
        lines.append(
            f"Too short to tell copying from the usual way of writing them (reference under "
            f"{result.settings.min_tokens} tokens): {', '.join(result.skipped)}"
        )
    lines += ["", f"Pairs of submissions with a similarity of {t:.0%} or more:"]
    lines += [f"  {m.a} ~ {m.b}  {m.score:.0%}  ({_detail(m, result)})" for m in pairs]
    lines += [] if pairs else ["  none"]
    lines += ["", f"Submissions with a similarity of {t:.0%} or more to {REFERENCE}, beyond "
              "what independent work reaches:"]
    lines += [f"  {m.a}  {m.score:.0%}  ({_detail(m, result)})" for m in ref]
    lines += [] if ref else ["  none"]
    if html_path is not None and (pairs or ref):
        lines += ["", f"Matching code side by side: {html_path}"]
    lines += [
        "",
        "Similarity: of the code the smaller side wrote that is not common to the class, the",
        "share the other side has too (names, comments, layout and literals normalised away).",
        *_baseline_lines(result),
        "A flag is a reason to look, not a verdict; no score was changed.",
    ]
    return "\n".join(lines)


def _baseline_lines(result: Result) -> list[str]:
    baseline = result.baseline
    if baseline is None:
        return []
    def per(values):
        return ", ".join(f"{ex} {b:.0%}" for ex, b in sorted(values.items())) or "none"

    source = (f"{len(baseline.independent)} independent solution(s) and the class median"
              if baseline.independent else "the class median (no independent solutions)")
    return ["Only the share beyond what honest work reaches counts, (s - b) / (1 - b) per",
            f"exercise. Against the reference, b from {source}: "
            f"{per(baseline.per_exercise)}.",
            f"Between students, b from the reference and those solutions: "
            f"{per(baseline.pairs)}."]


def _as_dict(match) -> dict:
    return {
        "a": match.a,
        "b": match.b,
        "score": match.score,
        "exercises": {
            ex: {"shared": n, "of": size, "score": round(n / size, 4) if size else 0.0}
            for ex, (n, size) in sorted(match.exercises.items())
        },
    }


def as_json(result: Result, name: str) -> str:
    pairs, ref = result.flagged()
    data = {
        "assignment": name,
        "threshold": result.settings.threshold,
        "compared": result.compared,
        "skipped": result.skipped,
        "pairs": [_as_dict(m) for m in pairs],
        "reference": [_as_dict(m) for m in ref],
    }
    baseline = result.baseline
    if baseline is not None:
        data["reference_baseline"] = {ex: round(b, 4)
                                      for ex, b in sorted(baseline.per_exercise.items())}
    return json.dumps(data, indent=2, sort_keys=True)


def as_csv(result: Result) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["a", "b", "score", *result.compared])
    pairs, ref = result.flagged()
    for m in pairs + ref:
        per = [f"{m.exercise_score(ex):.4f}" if ex in m.exercises else "" for ex in result.compared]
        writer.writerow([m.a, m.b, f"{m.score:.4f}", *per])
    return out.getvalue()


# -- HTML: the matching code side by side ----------------------------------------------
_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h2 { border-top: 1px solid #ccc; padding-top: .8em; }
table.side { border-collapse: collapse; width: 100%; table-layout: fixed; }
table.side td { vertical-align: top; width: 50%; padding: 0 .5em; }
pre { font-size: 12px; background: #fafafa; padding: .4em; overflow-x: auto; }
pre span { display: block; white-space: pre; }
span.same { background: #ffd9a8; }
span.gap { color: #999; }
.note { color: #555; }
"""


def _code(reg: Region, marked: set[int]) -> str:
    """The lines the author wrote (the released scaffold between them elided), shared
    ones highlighted. Student text is escaped: it is untrusted."""
    out, previous = [], None
    for i in reg.written:
        if previous is not None and i > previous + 1:
            out.append('<span class="gap">...</span>')
        text = html.escape(reg.lines[i]) or " "
        out.append(f'<span class="{"same" if i in marked else "line"}">{text}</span>')
        previous = i
    return "<pre>" + "".join(out) + "</pre>"


def write_html(path: Path, result: Result, name: str, students: dict, reference: dict) -> None:
    pairs, ref = result.flagged()
    k = result.settings.k
    parts = [
        f"<!doctype html><meta charset='utf-8'><title>Similarity: {html.escape(name)}</title>",
        f"<style>{_STYLE}</style><h1>Similarity of {html.escape(name)}</h1>",
        "<p class='note'>Code is compared after names, comments, layout and literal values "
        "are normalised away; code most of the class writes alike is ignored. Highlighted "
        "lines hold a shared run of tokens. A flag is a reason to look, not a verdict.</p>",
    ]
    shown = sorted(
        [(m, students[m.b]) for m in pairs] + [(m, reference) for m in ref],
        key=lambda item: -item[0].score,
    )[:MAX_HTML_MATCHES]
    if not shown:
        parts.append(f"<p>No pair reaches {result.settings.threshold:.0%}.</p>")
    for m, right in shown:
        left = students[m.a]
        title = f"{m.a} and {m.b}: similarity {m.score:.0%}"
        parts.append(f"<h2>{html.escape(title)}</h2>")
        for ex in result.compared:
            if ex not in m.exercises or not m.exercises[ex][0]:
                continue
            ra, rb = left[ex], right[ex]
            la, lb = shared_lines(ra, rb, result.common.get(ex, set()), k)
            parts.append(
                f"<h3>{html.escape(ex)}: {m.exercise_score(ex):.0%}</h3><table class='side'><tr>"
                f"<td><b>{html.escape(m.a)}</b>{_code(ra, la)}</td>"
                f"<td><b>{html.escape(m.b)}</b>{_code(rb, lb)}</td></tr></table>"
            )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts) + "\n")


def main(course: Course, args) -> int:
    """``autograder report NAME --similarity [--threshold T] [--min-tokens N] [--html FILE]``."""
    settings = Settings()
    if args.threshold is not None:  # a share in (0, 1]: the command line checked it
        settings = dataclasses.replace(settings, threshold=args.threshold)
    if args.min_tokens is not None:
        settings = dataclasses.replace(settings, min_tokens=max(args.min_tokens, settings.k))
    result, students, reference, notes = run(course, args.name, settings)
    html_path = Path(args.html or course.root / "reports" / f"{args.name}-similarity.html")
    write_html(html_path, result, args.name, students, reference)
    if args.format == "json":
        print(as_json(result, args.name))
    elif args.format == "csv":
        print(as_csv(result), end="")
    else:
        print(as_text(result, args.name, len(students), html_path))
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
