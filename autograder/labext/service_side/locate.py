"""Which assignment, and which of its notebooks, a saved notebook is.

Three kinds of evidence, weighed in this order:

1. **its cells**: the nbgrader ``grade_id`` of each graded and locked cell, compared with
   every released notebook's cells in the gradebook. Students rename and move files;
   they rarely rewrite the metadata of every cell. The notebook that shares the most
   ids wins.
2. **its metadata**: ``metadata.autograder`` (``{"assignment", "notebook"}``), which
   ``autograder init`` stamps on every source notebook and nbgrader carries into the
   release. It breaks ties, and names the notebook when its cells were all deleted.
3. **its path**: ``.../<assignment>/<notebook>.ipynb``, as released and fetched.

Where the evidence disagrees the cells win and a note says so.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePosixPath

from ...workspace.course import Course


class NotAnAssignment(Exception):
    """The notebook belongs to no assignment of this course; the message says why."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(frozen=True)
class Located:
    assignment: str
    notebook_id: str
    notes: tuple[str, ...] = ()


def released_cells(course: Course, names: list[str]) -> dict[tuple[str, str], set[str]]:
    """``{(assignment, notebook id): {grade and locked cell ids}}`` for released assignments."""
    table: dict[tuple[str, str], set[str]] = {}
    with course.gradebook() as gb:
        for name in names:
            try:
                assignment = gb.find_assignment(name)
            except Exception:  # not released (not in the gradebook)
                continue
            for notebook in assignment.notebooks:
                ids = {c.name for c in notebook.grade_cells}
                ids |= {c.name for c in notebook.source_cells if c.locked}
                table[(name, notebook.name)] = ids
    return table


def cell_ids(nb) -> set[str]:
    ids = set()
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader")
        if isinstance(meta, dict) and isinstance(meta.get("grade_id"), str):
            ids.add(meta["grade_id"])
    return ids


def locate(nb, path: PurePosixPath, released: dict[tuple[str, str], set[str]],
           listed: list[str]) -> Located:
    """Decide which released notebook ``nb`` (saved at ``path``) is; see the module doc.

    ``listed`` is every assignment of the course outline, released or not, so that the
    error for a known but unreleased assignment can say so.
    """
    ids = cell_ids(nb)
    overlap = {key: len(ids & cells) for key, cells in released.items()}
    best = max(overlap.values(), default=0)
    by_cells = [key for key, n in overlap.items() if n == best and n > 0]

    meta = nb.get("metadata", {}).get("autograder")
    claimed = None
    if isinstance(meta, dict) and isinstance(meta.get("assignment"), str):
        claimed = (meta["assignment"], str(meta.get("notebook") or path.stem))
    by_path = (path.parent.name, path.stem) if path.parent.name else None

    def pick(candidates):
        for hint in (claimed, by_path):
            if hint in candidates:
                return hint
        return None

    notes = []
    if len(by_cells) == 1:
        choice = by_cells[0]
    elif by_cells:
        choice = pick(by_cells)
        if choice is None:
            raise NotAnAssignment(
                f"{path} has cells of several notebooks ({_names(by_cells)}); open the "
                "notebook released for the assignment you are working on")
    else:
        choice = pick(list(released))
        if choice is None:
            raise _unknown(path, claimed, by_path, released, listed)
    if claimed and claimed != choice:
        notes.append(f"the notebook's metadata names {claimed[0]}/{claimed[1]}, but its "
                     f"cells are those of {choice[0]}/{choice[1]}: checked as the latter")
    return Located(choice[0], choice[1], tuple(notes))


def _names(keys) -> str:
    return ", ".join(f"{a}/{n}" for a, n in sorted(keys))


def _unknown(path, claimed, by_path, released, listed) -> NotAnAssignment:
    name = (claimed or by_path or (None, None))[0]
    if name in listed:
        if not any(a == name for a, _ in released):
            return NotAnAssignment(
                f"assignment '{name}' has not been released yet: ask your instructor, or "
                f"run `autograder release {name}`", status=409)
        nb_names = sorted(n for a, n in released if a == name)
        return NotAnAssignment(
            f"{path.name} is not a notebook of {name} (its notebooks: "
            f"{', '.join(n + '.ipynb' for n in nb_names)}); check that one", status=404)
    if claimed:
        return NotAnAssignment(
            f"{path} belongs to assignment '{claimed[0]}', which this course does not have "
            f"(it has: {', '.join(listed) or 'none'})", status=404)
    return NotAnAssignment(
        f"{path} is not an assignment notebook of this course: open one released under "
        "release/<assignment>/ and check that", status=404)
