"""Everything the toolkit knows reaches a student: every public function and class of
``toolkit/`` is used by a lecture or an assignment notebook, or is listed below with the
reason it is not.

A notebook *uses* a toolkit name when a code cell imports it from a toolkit module
(``from toolkit.position import apply_rope``), reaches it through an imported toolkit
module (``P.apply_rope`` after ``from toolkit import position as P``), or, in an
assignment, defines it: the student writes that function, and its solution must match
the toolkit's (``tests/assignments/test_solutions_match_toolkit.py``). Lectures are those
of ``course/course.toml``; assignment notebooks those named in each ``assignment.toml``.
Source is read, never run. A name in a comment or a string does not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jupytext
from IPython.core.inputtransformer2 import TransformerManager

from autograder.course import ASSIGNMENTS_DIR, AssignmentSpec, available_assignments
from autograder.outline import COURSE_FILE, load_outline

ROOT = Path(__file__).resolve().parents[2]

#: Public names no notebook needs, and why. Keep each reason to one line.
NOT_FOR_NOTEBOOKS = {
    "check_dropout": "an argument check the toolkit's own modules call; no notebook builds dropout",
    "is_headless": "widget plumbing: every builder asks it whether to draw",
    "headless_placeholder": "widget plumbing: what a builder returns while grading",
    "figure_to_png": "widget plumbing: how every builder turns a figure into an image",
    "live_figure": "widget plumbing: the redraw loop every builder is built on",
    "main": "the command line `python -m toolkit.train`; lecture 07 trains through train()",
}

#: A widget's pure plotting function that a notebook sees through its builder only:
#: ``plot function -> builder``. The builder itself must be used.
DRAWN_BY_BUILDER = {
    "plot_rope_spectrum": "rope_spectrum_explorer",
    "plot_score_vs_distance": "score_vs_distance_explorer",
    "plot_alibi_heads": "alibi_explorer",
    "plot_train_short_test_long": "train_short_test_long_explorer",
}

#: Taught by lectures and assignments 05 (blocks) and 06 (beyond attention), written on
#: other branches: delete each line once its notebook uses the name.
TAUGHT_IN_05_06 = {
    "gelu_exact": "05-blocks: GELU, exact",
    "gelu_tanh": "05-blocks: GELU's tanh approximation",
    "GLU": "05-blocks: the GLU family",
    "ReGLU": "05-blocks: the GLU family",
    "GEGLU": "05-blocks: the GLU family",
    "GatedFeedForward": "05-blocks: the GLU family",
}


def public_toolkit_names() -> dict[str, str]:
    """``name -> module`` of every public top-level function and class of ``toolkit/``."""
    found = {}
    for path in sorted((ROOT / "toolkit").rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if any(p.startswith("_") for p in parts if p not in ("__init__", "__main__")):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                found[node.name] = ".".join(p for p in parts if p != "__init__")
    return found


def notebooks() -> dict[str, tuple[Path, bool]]:
    """``label -> (source, is_assignment)`` for every lecture and assignment notebook."""
    outline = load_outline(COURSE_FILE)
    found = {f"lecture {lec.stem}": (outline.lecture_source(lec), False)
             for lec in outline.lectures}
    for name in available_assignments(ASSIGNMENTS_DIR):
        spec = AssignmentSpec.load(name, ASSIGNMENTS_DIR)
        for nb in spec.notebooks:
            found[f"assignment {name}/{nb}"] = (spec.path / f"{nb}.py", True)
    return found


def used_names(source: Path, defines_count: bool) -> set[str]:
    """Toolkit names a notebook imports, reaches through a toolkit module, or defines."""
    if source.suffix == ".py":
        nb = jupytext.read(source, fmt="py:percent")
    else:
        nb = jupytext.read(source)
    code = "\n".join(TransformerManager().transform_cell(c.source)
                     for c in nb.cells if c.cell_type == "code")
    tree = ast.parse(code)
    modules, used = set(), set()  # local names bound to toolkit modules
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "toolkit":
                    modules.add(alias.asname or "toolkit")
                    used.update(alias.name.split(".")[1:] if alias.asname else [])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "toolkit":
            for alias in node.names:
                used.add(alias.name)
                modules.add(alias.asname or alias.name)  # harmless if it is not a module
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain, inner = [node.attr], node.value
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            if isinstance(inner, ast.Name) and inner.id in modules:
                used.update(chain)
        elif defines_count and isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            used.add(node.name)
    return used


def test_the_check_reads_imports_module_attributes_and_definitions(tmp_path):
    source = tmp_path / "nb.py"
    source.write_text(
        "# %%\n# %matplotlib inline\nfrom toolkit.masks import causal_mask as cm\n"
        "from toolkit import position as P\nimport toolkit.flash\nx = P.apply_rope\n"
        "y = toolkit.flash.online_softmax\n"
        "# %% [markdown]\n# alibi_bias in a comment\n# %%\ndef generate():\n    pass\n"
        "s = 'rope_cos_sin'\n")
    names = used_names(source, defines_count=True)
    assert {"causal_mask", "apply_rope", "online_softmax", "generate"} <= names
    assert not {"alibi_bias", "rope_cos_sin", "cm"} & names
    assert "generate" not in used_names(source, defines_count=False)


def test_every_public_toolkit_name_is_used_or_excused():
    public = public_toolkit_names()
    used = set()
    for source, is_assignment in notebooks().values():
        used |= used_names(source, defines_count=is_assignment)
    excused = set(NOT_FOR_NOTEBOOKS) | set(DRAWN_BY_BUILDER) | set(TAUGHT_IN_05_06)
    unused = sorted(f"{public[n]}.{n}" for n in set(public) - used - excused)
    assert not unused, (
        "public toolkit names that no lecture or assignment uses (show each in the lecture "
        "of its topic, or list it in this test with a one-line reason):\n  " + "\n  ".join(unused))
    unused_builders = sorted(b for b in DRAWN_BY_BUILDER.values() if b not in used)
    assert not unused_builders, (
        f"builders listed in DRAWN_BY_BUILDER that no notebook shows: {unused_builders}")


def test_the_exceptions_are_real_and_still_needed():
    public = public_toolkit_names()
    listed = [*NOT_FOR_NOTEBOOKS, *DRAWN_BY_BUILDER, *DRAWN_BY_BUILDER.values(), *TAUGHT_IN_05_06]
    assert not [n for n in listed if n not in public], "exceptions name no public toolkit name"
    used = set()
    for source, is_assignment in notebooks().values():
        used |= used_names(source, defines_count=is_assignment)
    stale = sorted(n for n in [*NOT_FOR_NOTEBOOKS, *DRAWN_BY_BUILDER] if n in used)
    assert not stale, f"now used by a notebook, so remove them from the exceptions: {stale}"
    assert all(reason and "\n" not in reason for reason in
               [*NOT_FOR_NOTEBOOKS.values(), *TAUGHT_IN_05_06.values()])
