"""Who calls whom, read from a notebook's code: the line that sends a student upstream."""

import nbformat

from autograder.grading.scoring import cell_report_markdown, score_cells, upstream_message
from autograder.grading.upstream import exercise_uses
from autograder.jobs import CheckRecord
from autograder.workspace.assignment_spec import AssignmentSpec
from autograder.workspace.course import notebook_from_text


def _cell(source, grade_id=None, test=False):
    cell = nbformat.v4.new_code_cell(source)
    if grade_id:
        cell.metadata["nbgrader"] = {"grade_id": grade_id, "grade": test, "solution": not test}
    return cell


def _notebook():
    return nbformat.v4.new_notebook(cells=[
        _cell("def norm(x):\n    return x"),
        _cell("def unused_helper():\n    pass", "norm"),
        _cell("", "test_norm", test=True),
        _cell("def residual(f, x):\n    return x + f(norm(x))"),  # given: followed through
        _cell("%timeit block(1)\ndef broken(:"),  # does not parse: skipped
        _cell("class Block:\n    def forward(self, x):\n        return residual(ffn, x)\n"
              "def ffn(x):\n    return later(x)", "block"),
        _cell("", "test_block", test=True),
        _cell("def later(x):\n    return x", "later"),
        _cell("", "test_later", test=True),
    ])


def test_an_exercise_reaches_earlier_ones_through_given_code_only():
    nb = _notebook()
    # norm is a given cell's here, and the solution cell of test_norm defines another name.
    assert exercise_uses(nb) == {}
    nb.cells[0].metadata["nbgrader"] = {"grade_id": "norm0", "grade": False, "solution": True}
    # Block -> residual (given) -> norm (test_norm's); `later` comes after: not counted.
    assert exercise_uses(nb) == {"test_block": {"test_norm": ["norm"]}}
    assert exercise_uses(None) == {}


def test_the_course_notebooks_say_what_builds_on_what():
    nb = notebook_from_text(AssignmentSpec.load("01-attention").source_text("attention"))
    uses = exercise_uses(nb)
    assert uses["test_decoder_block"]["test_masks"] == ["causal_mask", "combine_masks"]
    assert uses["test_multi_head_attention"] == {
        "test_attention_weights": ["attention_weights", "scaled_dot_product_attention"]}
    assert "test_attention_weights" not in uses


def _record(cell, passed, message="wrong"):
    return CheckRecord(id=f"{cell}-{passed}", module="m", description="d", grade_cell=cell,
                       passed=passed, message="" if passed else message)


def test_only_a_failing_exercise_with_a_failing_callee_is_sent_upstream():
    uses = {"test_block": {"test_norm": ["norm"]}}
    points = {"test_norm": 1, "test_block": 2}
    both_fail = score_cells(points, [_record("test_norm", False), _record("test_block", False)],
                            uses=uses)
    assert both_fail["test_block"]["upstream"] == [
        {"grade_cell": "test_norm", "names": ["norm"], "attempted": True}]
    assert both_fail["test_norm"]["upstream"] == []
    report = cell_report_markdown("test_block", both_fail["test_block"])
    assert "**Fix first:** This exercise calls `norm` (checked under `test_norm`, which fails)" \
        in report
    norm_passes = score_cells(points, [_record("test_norm", True), _record("test_block", False)],
                              uses=uses)
    assert norm_passes["test_block"]["upstream"] == []
    block_passes = score_cells(points, [_record("test_norm", False), _record("test_block", True)],
                               uses=uses)
    assert block_passes["test_block"]["upstream"] == []
    stub = score_cells(points, [_record("test_norm", False, "NotImplementedError: stub"),
                                _record("test_block", False)], uses=uses)["test_block"]
    assert "not written yet" in upstream_message(stub["upstream"])
    # A diagnosis that already points at the callee says it better.
    told = score_cells(points, [_record("test_norm", False), _record("test_block", False)],
                       [{"grade_cell": "test_block", "owner": "test_norm", "message": "m",
                         "checks": []}], uses=uses)
    assert told["test_block"]["upstream"] == []


def test_one_root_cause_per_exercise():
    """Exercise 4 calls exercise 3's heads, which fail only because exercise 1's weights do:
    a diagnosis of 4 that names 1, or a failing call of 1 from 4, says it; 3 is not named
    as well (its own functions pass their checks)."""
    uses = {"test_heads": {"test_weights": ["attention_weights"]},
            "test_block": {"test_heads": ["split_heads"], "test_weights": ["attention_weights"]}}
    points = {"test_weights": 1, "test_heads": 1, "test_block": 1}
    records = [_record("test_weights", False), _record("test_heads", False),
               _record("test_block", False)]
    scale = {"owner": "test_weights", "message": "no 1/sqrt(d_k)", "checks": []}
    diagnosed = score_cells(points, records, [
        {**scale, "grade_cell": "test_heads"}, {**scale, "grade_cell": "test_block"}], uses=uses)
    assert diagnosed["test_block"]["upstream"] == []  # the diagnosis names exercise 1
    plain = score_cells(points, records, uses=uses)
    assert plain["test_block"]["upstream"] == [
        {"grade_cell": "test_weights", "names": ["attention_weights"], "attempted": True}]
    # Reached only through exercise 3: sent to exercise 1 all the same.
    through = {**uses, "test_block": {"test_heads": ["MultiHeadAttention"]}}
    assert score_cells(points, records, uses=through)["test_block"]["upstream"] == [
        {"grade_cell": "test_weights", "names": ["attention_weights"], "attempted": True}]
    assert plain["test_heads"]["upstream"] == [
        {"grade_cell": "test_weights", "names": ["attention_weights"], "attempted": True}]


def test_an_exercise_that_only_reaches_an_earlier_stub_was_attempted():
    """A decoder block that is written but calls an unwritten causal_mask fails every check
    on the mask's NotImplementedError: the block is attempted, the mask is not."""
    stub = "SubmissionError: NotImplementedError (in `causal_mask`, line 2: raise ...)"
    uses = {"test_block": {"test_norm": ["causal_mask"]}}
    table = score_cells({"test_norm": 1, "test_block": 2},
                        [_record("test_norm", False, stub), _record("test_block", False, stub)],
                        uses=uses)
    assert not table["test_norm"]["attempted"] and table["test_block"]["attempted"]
    assert table["test_block"]["upstream"][0]["attempted"] is False
    own = "SubmissionError: NotImplementedError (in `Block.forward`, line 2: raise ...)"
    table = score_cells({"test_norm": 1, "test_block": 2},
                        [_record("test_norm", False, stub), _record("test_block", False, own)],
                        uses=uses)
    assert not table["test_block"]["attempted"]


def test_the_item_analysis_counts_failures_that_follow_an_earlier_exercise_apart():
    from autograder.reports.report import item_analysis

    def record(upstream):
        fail = {"exercise": "test_block", "check": "c", "description": "d", "pitfall": "p",
                "cause": None}
        return {"exercises": {"test_block": {"score": 0.0, "max_score": 2.0, "attempted": True,
                                             "upstream": upstream}},
                "failed_checks": [fail], "diagnoses": []}

    items = item_analysis([record(["test_norm"]), record([]), record([])])
    assert items["exercises"]["test_block"]["after_earlier"] == 1
    assert items["failed_checks"][0]["students"] == 2  # the block's own failures only


def test_the_cases_of_one_parametrised_check_are_one_line_of_the_item_analysis():
    from autograder.reports.report import as_table

    def record(student, levels):
        fails = [{"exercise": "test_checkpoint", "check": f"test_loss[{p}% of the points]",
                  "description": f"The loss reaches the level. [{p}% of the points]",
                  "pitfall": "Undertrained", "cause": None} for p in levels]
        fails.append({"exercise": "test_checkpoint", "check": "test_loads", "cause": None,
                      "description": "The checkpoint loads.", "pitfall": None})
        return {"student": student, "score": 0.0, "max_score": 4.0, "manual_score": 0.0,
                "manual_pending": 0, "manual_max": 0.0, "notes": [], "diagnoses": [],
                "failed_checks": fails,
                "exercises": {"test_checkpoint": {"score": 0.0, "max_score": 4.0,
                                                  "attempted": True, "upstream": []}}}

    table = as_table([record("a", (90, 100)), record("b", (80, 90, 100))])
    assert ("  1-2 x test_checkpoint: The loss reaches the level. (3 cases) -> Undertrained"
            in table), table
    assert "    2 x test_checkpoint: The checkpoint loads.\n" in table + "\n"
    assert "% of the points" not in table
