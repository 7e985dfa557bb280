"""Released notebooks: every stub names its exercise, and Run All goes on past failures."""

import nbformat

from autograder.workspace.release_steps import (
    CONTINUE_TAG,
    PrepareStudentNotebook,
    enclosing_names,
    name_stubs,
)

CELL = '''\
class Block(nn.Module):
    def __init__(self, d):
        # YOUR CODE HERE
        raise NotImplementedError()

    def forward(self, x):
        """Docstring stays."""
        # YOUR CODE HERE
        raise NotImplementedError()


def helper(x):
    raise NotImplementedError("already named: left alone")
'''


def test_enclosing_names_follow_classes_and_methods():
    assert enclosing_names(CELL, 4) == "Block.__init__"
    assert enclosing_names(CELL, 9) == "Block.forward"
    assert enclosing_names(CELL, 13) == "helper"
    assert enclosing_names("x = 1\n", 1) == ""


def test_bare_stubs_get_a_message_with_name_and_exercise():
    named = name_stubs(CELL, "Exercise 4: a block")
    assert "raise NotImplementedError()" not in named
    assert ("raise NotImplementedError('`Block.forward` is not written yet (Exercise 4: a "
            "block): write it in its cell, in place of this `raise` line')") in named
    assert '"already named: left alone"' in named
    compile(named, "<cell>", "exec")  # still valid Python, indentation kept


def _nb():
    meta = lambda **kw: {"nbgrader": {"schema_version": 3, "locked": False, **kw}}  # noqa: E731
    cells = [
        nbformat.v4.new_code_cell("import torch"),
        nbformat.v4.new_markdown_cell("### Exercise 1: softmax"),
        nbformat.v4.new_code_cell("def softmax(x):\n    raise NotImplementedError()",
                                  metadata=meta(grade=False, solution=True, grade_id="softmax")),
        nbformat.v4.new_code_cell("assert softmax(1)", metadata=meta(
            grade=True, solution=False, grade_id="test_softmax", points=1, locked=True)),
        nbformat.v4.new_code_cell("softmax_demo()", metadata={"tags": ["skip-grading"]}),
    ]
    return nbformat.v4.new_notebook(cells=cells)


def test_preprocessor_names_stubs_and_tags_cells_after_the_first_exercise():
    nb, _ = PrepareStudentNotebook().preprocess(_nb(), {})
    setup, _, exercise, check, demo = nb.cells
    assert CONTINUE_TAG not in setup.metadata.get("tags", [])  # a broken import should stop
    assert "Exercise 1: softmax" in exercise.source and "`softmax`" in exercise.source
    assert CONTINUE_TAG not in exercise.metadata.get("tags", [])
    assert CONTINUE_TAG in check.metadata["tags"]
    assert demo.metadata["tags"] == ["skip-grading", CONTINUE_TAG]


def test_released_notebook_has_named_stubs(tiny_course):
    nb = nbformat.read(tiny_course.path("release", "00-tiny", "tiny.ipynb"), as_version=4)
    sources = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "raise NotImplementedError()" not in sources
    assert "`softmax` is not written yet" in sources
    checks = [c for c in nb.cells
              if c.metadata.get("nbgrader", {}).get("grade_id") == "test_softmax"]
    assert CONTINUE_TAG in checks[0].metadata["tags"]
