"""The HTML feedback a student receives: named exercises, points apart, maths offline.

``autograder feedback`` (and formgrader's "Generate feedback") run nbgrader's
``generate_feedback`` with two changes, configured by ``autograder init``:

* :class:`CourseFeedback` runs after nbgrader's ``GetGrades`` and puts a summary at the
  top: every graded part under the name a student knows it by (the heading above it,
  "Exercise 1a: attention weights"), its points, and whether they come from the hidden
  checks or from a person (written answers), with the totals apart and together. A
  written answer no person has graded yet reads "pending" there and "Not graded yet" above
  the answer (nbgrader's own page gives it "Score: 0.0").
* It turns the LaTeX of markdown cells and of the check reports into MathML, which
  browsers draw without any script, so the page needs no network (nbgrader's own template
  loads MathJax from a CDN, and maths stays raw LaTeX offline).

The page itself is ``templates/course-feedback`` (an nbconvert template of this package),
rendered by :class:`FeedbackExporter`; formgrader's own pages keep nbgrader's templates.
"""

from __future__ import annotations

import copy
import html
import re
from pathlib import Path

import nbformat
from latex2mathml.converter import convert as latex_to_mathml
from nbconvert.exporters import HTMLExporter
from nbgrader.api import Gradebook
from nbgrader.preprocessors.base import NbGraderPreprocessor
from traitlets.config import Config

from ..workspace.release_steps import HEADING

TEMPLATE_DIR = Path(__file__).resolve().parent / "templates"
TEMPLATE_NAME = "course-feedback"

MATHML_NAMESPACE = "http://www.w3.org/1998/Math/MathML"

# Fenced code, inline code, display maths, inline maths (an unescaped $ not followed by a
# space, closing on a $ not preceded by one): code is matched first and left alone.
_SEGMENTS = re.compile(
    r"(?P<fence>```.*?```|~~~.*?~~~)"
    r"|(?P<code>`[^`\n]*`)"
    r"|\$\$(?P<display>.+?)\$\$"
    r"|(?<![\\$])\$(?P<inline>[^\s$](?:[^$\n]*?[^\s$\\])?)\$(?!\d)",
    re.DOTALL,
)


def maths_to_mathml(markdown: str) -> str:
    """Markdown with every ``$...$`` and ``$$...$$`` replaced by MathML (code untouched).

    A formula the converter cannot read stays as it was, inside a ``<code>`` span.
    """
    def replace(match: re.Match) -> str:
        latex, display = match.group("display"), True
        if latex is None:
            latex, display = match.group("inline"), False
        if latex is None:
            return match.group(0)  # code
        try:
            mathml = latex_to_mathml(latex.strip(), display="block" if display else "inline")
        except Exception:  # noqa: BLE001 - any unreadable formula is shown as written
            return f"<code>{html.escape(match.group(0))}</code>"
        # HTML knows <math> without its XML namespace; with it, nbconvert's heading anchors
        # (which parse and re-serialise a heading) write ns0:math, which no browser draws.
        mathml = mathml.replace(f' xmlns="{MATHML_NAMESPACE}"', "")
        return f"\n\n{mathml}\n\n" if display else mathml

    return _SEGMENTS.sub(replace, markdown)


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) or {}


def waiting_for_a_person(nb, resources) -> set[str]:
    """Grade ids of the written answers that no person has graded yet.

    nbgrader's ``GetGrades`` writes such an answer's score as 0.0 (its gradebook sums
    missing scores as 0); the gradebook still tells "not graded" (neither a manual nor an
    automatic score) from a 0 given, or from nbgrader's 0 for an answer left unchanged.
    """
    written = [_meta(c)["grade_id"] for c in nb.cells
               if _meta(c).get("grade") and _meta(c).get("solution")]
    ids = resources.get("nbgrader", {})
    if not written or "db_url" not in ids:
        return set()
    with Gradebook(ids["db_url"]) as gradebook:
        grades = {gid: gradebook.find_grade(gid, ids["notebook"], ids["assignment"],
                                            ids["student"]) for gid in written}
        return {gid for gid, g in grades.items()
                if g.manual_score is None and g.auto_score is None}


class CourseFeedback(NbGraderPreprocessor):
    """Summary of named exercises and points, and offline maths (see the module doc)."""

    def preprocess(self, nb, resources):
        waiting = waiting_for_a_person(nb, resources)
        headings: list[str] = []  # the headings since the last graded part
        parts = []
        for cell in nb.cells:
            meta = _meta(cell)
            if cell.cell_type == "markdown":
                if not (meta.get("solution") or meta.get("grade")):  # not a student's answer
                    headings += [h.strip().rstrip(":") for h in HEADING.findall(cell.source)]
                cell.source = maths_to_mathml(cell.source)
            for output in cell.get("outputs", []):
                data = output.get("data", {})
                if "text/markdown" in data:
                    data["text/markdown"] = maths_to_mathml(data["text/markdown"])
            if not meta.get("grade"):
                continue
            written = bool(meta.get("solution"))
            if meta.get("grade_id") in waiting:
                meta["score"] = None  # the template says "Not graded yet", not "Score: 0.0"
            parts.append({
                "grade_id": meta.get("grade_id", ""),
                "name": part_name(headings) or meta.get("grade_id", ""),
                "kind": "written answer, graded by a person" if written else "hidden checks",
                "manual": written,
                "score": meta.get("score"),
                "points": float(meta.get("points") or 0),
            })
            headings = []
        summary = nbformat.v4.new_markdown_cell(summary_markdown(parts))
        summary.metadata["autograder_feedback_summary"] = True
        nb.cells.insert(0, summary)
        return nb, resources


def summary_markdown(parts: list[dict]) -> str:
    """The table at the top of the feedback: every graded part by name, then the totals."""
    def points(score, maximum):
        return f"{maximum:g} pending" if score is None else f"{score:g} / {maximum:g}"

    automatic = [p for p in parts if not p["manual"]]
    manual = [p for p in parts if p["manual"]]
    rows = ["| part | graded by | points |", "|---|---|---|"]
    rows += [f"| [{html.escape(p['name'])}](#{p['grade_id']}) | {p['kind']} | "
             f"{points(p['score'], p['points'])} |" for p in parts]
    auto_score = sum(p["score"] or 0 for p in automatic)
    auto_max = sum(p["points"] for p in automatic)
    lines = ["## Your results", "", *rows, "",
             f"- **Automatic points** (hidden checks): {auto_score:g} / {auto_max:g}"]
    if manual:
        given = [p for p in manual if p["score"] is not None]
        waiting = sum(p["points"] for p in manual if p["score"] is None)
        lines.append(f"- **Written answers** (graded by a person): "
                     f"{sum(p['score'] for p in given):g} / {sum(p['points'] for p in manual):g}"
                     + (f", {waiting:g} point(s) not graded yet" if waiting else ""))
    total = sum(p["score"] or 0 for p in parts)
    lines.append(f"- **Total**: {total:g} / {sum(p['points'] for p in parts):g}")
    return "\n".join(lines)


def part_name(headings: list[str]) -> str:
    """What a graded part is called: the exercises it grades ("Exercise 1a: ... + Exercise
    1b: ..."), else the last heading before it."""
    exercises = [_plain(h) for h in headings if h.lower().startswith("exercise")]
    return " + ".join(exercises) if exercises else (_plain(headings[-1]) if headings else "")


def _plain(heading: str) -> str:
    """A heading without markdown emphasis: "Exercise 4: `DecoderBlock`" -> "...: DecoderBlock".

    Underscores go only where they mark emphasis (``_word_``, ``__word__``): the ones
    inside a name (``top_k_gating``) stay.
    """
    text = re.sub(r"[`*]", "", heading)
    return re.sub(r"(?<![A-Za-z0-9])_+|_+(?![A-Za-z0-9])", "", text).strip()


class FeedbackExporter(HTMLExporter):
    """nbconvert's HTML exporter with the course's feedback template.

    nbgrader configures every ``HTMLExporter`` of a feedback run with its own template;
    this one takes ours, which extends nbgrader's (found in nbgrader's template folder).
    """

    def __init__(self, config=None, **kwargs):
        import nbgrader

        # The exporter reads its template while it is built, so the choice goes into the
        # configuration it is built with (a section of its own outranks HTMLExporter's).
        parent = kwargs.get("parent")
        config = copy.deepcopy(config if config is not None else getattr(parent, "config", None)
                               or Config())
        formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
        config.FeedbackExporter.template_name = TEMPLATE_NAME
        config.FeedbackExporter.extra_template_basedirs = [
            str(TEMPLATE_DIR), str(formgrader / "templates")]
        # ...where ``extends 'feedback/index.html.j2'`` and nbgrader's stylesheet are found.
        config.FeedbackExporter.extra_template_paths = [
            str(formgrader / "templates"),
            str(formgrader / "static" / "node_modules" / "bootstrap" / "dist" / "css")]
        super().__init__(config=config, **kwargs)
