"""What a released notebook needs so that a student can press Run All on day one.

nbgrader's ``ClearSolutions`` replaces every solution with the same bare
``raise NotImplementedError()``. A student who runs the whole fresh notebook then stops
at the first visible check, with a traceback that names no exercise, and never sees the
widgets further down. :class:`PrepareStudentNotebook` runs right after ``ClearSolutions``
inside ``nbgrader generate_assignment`` (so checksums and the gradebook's copies see the
final cells) and:

* turns every bare stub into one that says which function is missing and which exercise
  it belongs to: ``NotImplementedError("`attention_weights` is not written yet (Exercise
  1a: attention weights): write it in its cell, in place of this `raise` line")``;
* tags every code cell after the first exercise that is not itself an exercise with
  ``raises-exception``: JupyterLab's Run All goes on past such a cell when it fails, and
  nbgrader's Validate still counts a failing test cell as failed (it reads the error
  output, not the tag).

Instructor sources stay as they are: this only shapes what students receive.
"""

from __future__ import annotations

import ast
import re

from nbgrader.preprocessors.base import NbGraderPreprocessor

#: JupyterLab and nbclient let execution continue past a failing cell with this tag.
CONTINUE_TAG = "raises-exception"
BARE_STUB = re.compile(r"^(?P<indent>[ \t]*)raise NotImplementedError\(\)[ \t]*$", re.MULTILINE)
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*$", re.MULTILINE)


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {}) or {}


def is_exercise(cell) -> bool:
    """A cell the student writes in (code or a written answer)."""
    return bool(_meta(cell).get("solution"))


def is_visible_check(cell) -> bool:
    meta = _meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def enclosing_names(source: str, line_number: int) -> str:
    """``'Class.method'`` or ``'function'``: the definitions around a line (1-based)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ""
    path: list[str] = []

    def visit(body, trail):
        for node in body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.lineno <= line_number <= (node.end_lineno or node.lineno):
                trail = trail + [node.name]
                path[:] = trail
                visit(node.body, trail)
                return

    visit(tree.body, [])
    return ".".join(path)


def stub_message(name: str, exercise: str) -> str:
    what = f"`{name}` is not written yet" if name else "this part is not written yet"
    where = f" ({exercise})" if exercise else ""
    return f"{what}{where}: write it in its cell, in place of this `raise` line"


def name_stubs(source: str, exercise: str) -> str:
    """Replace each bare ``raise NotImplementedError()`` by one that says what is missing."""
    # Names come from the cell as it is, with the bare stubs (still valid Python).
    def replace(match: re.Match) -> str:
        line = source.count("\n", 0, match.start()) + 1
        message = stub_message(enclosing_names(source, line), exercise)
        return f"{match.group('indent')}raise NotImplementedError({message!r})"

    return BARE_STUB.sub(replace, source)


class PrepareStudentNotebook(NbGraderPreprocessor):
    """nbgrader preprocessor: named stubs and Run All that reaches the end (see above)."""

    def preprocess(self, nb, resources):
        exercise = ""  # the latest markdown heading: "Exercise 1a: attention weights"
        seen_exercise = False
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                headings = HEADING.findall(cell.source)
                if headings:
                    exercise = headings[-1].strip().rstrip(":")
                continue
            if cell.cell_type != "code":
                continue
            if is_exercise(cell):
                seen_exercise = True
                cell.source = name_stubs(cell.source, exercise)
                continue
            if seen_exercise or is_visible_check(cell):
                tags = cell.metadata.setdefault("tags", [])
                if CONTINUE_TAG not in tags:
                    tags.append(CONTINUE_TAG)
        return nb, resources


