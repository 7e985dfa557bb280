"""How a grading note names a cell, and what went wrong in it.

Notes are read by the instructor in the report and by the student under "Check my work",
so they name a cell the way the student can find it in their notebook, never by what
only the kernel saw.
"""

from __future__ import annotations

import re


def cell_label(index: int, cell) -> str:
    """How the notes name a cell: its place in the notebook (markdown cells count, as in
    nbgrader) and its first line of code, which the student can search for: Jupyter's
    ``In [n]`` numbers change with every run and say nothing about the file."""
    first = next((line.strip() for line in cell.source.splitlines()
                  if line.strip() and not line.strip().startswith(("#", "%"))), "")
    if not first:
        return f"cell {index + 1}"
    return f"cell {index + 1} (`{first[:40]}{'...' if len(first) > 40 else ''}`)"


#: The file name IPython gives a cell's code (``3060051235.py``), which the student never sees.
_CELL_FILE = re.compile(r"\((?:[^()]*/)?\d+\.py, line (\d+)\)")


def error_note(label: str, error: dict) -> str:
    """``cell 7 (`def (f(`) raised SyntaxError: invalid syntax (line 1 of the cell)``."""
    value = _CELL_FILE.sub(r"(line \1 of the cell)", str(error.get("evalue")))
    return f"{label} raised {error.get('ename')}: {value}"[:300]
