"""Unit tests of the trusted side: reply validation and scoring (no kernel needed)."""

import os

import pytest
import torch

from autograder.grading.scoring import score_cells, waiting_on_values
from autograder.jobs import CheckRecord
from autograder.protocol import trusted as protocol
from autograder.protocol.checklib import (
    CheckFailure,
    assert_close,
    expect_tensor,
    expect_value_error,
)


def test_decode_rebuilds_nested_values():
    tensors = {"t0": torch.ones(2)}
    spec = {
        "type": "list",
        "items": [
            {"type": "tensor", "key": "t0"},
            {"type": "float", "value": 1.5},
            {"type": "dict", "items": {"a": {"type": "none"}}},
        ],
    }
    out = protocol._decode(spec, tensors, 0)
    assert torch.equal(out[0], torch.ones(2)) and out[1] == 1.5 and out[2] == {"a": None}


@pytest.mark.parametrize(
    "spec",
    [
        {"type": "tensor", "key": "missing"},
        {"type": "pickle", "value": "x"},
        {"type": "int", "value": "not an int"},
        {"type": "list", "items": [{"type": "none"}] * (protocol.MAX_ITEMS + 1)},
        "not a dict",
    ],
)
def test_decode_refuses_malformed_replies(spec):
    with pytest.raises(protocol.SubmissionError):
        protocol._decode(spec, {}, 0)


def test_decode_refuses_deep_nesting():
    spec = {"type": "none"}
    for _ in range(protocol.MAX_DEPTH + 2):
        spec = {"type": "list", "items": [spec]}
    with pytest.raises(protocol.SubmissionError):
        protocol._decode(spec, {}, 0)


def test_reply_files_must_be_regular_and_small(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("gradebook")
    link = tmp_path / "reply.json"
    os.symlink(secret, link)
    with pytest.raises(protocol.SubmissionError):
        protocol._read_bytes(link, 1000)
    big = tmp_path / "big"
    big.write_bytes(b"0" * 2000)
    with pytest.raises(protocol.SubmissionError, match="too large"):
        protocol._read_bytes(big, 1000)


def test_checklib_messages_name_the_problem():
    with pytest.raises(CheckFailure, match="shape"):
        expect_tensor(torch.zeros(2, 3), shape=(3, 2))
    with pytest.raises(CheckFailure, match="NaN"):
        expect_tensor(torch.tensor([float("nan")]))
    with pytest.raises(CheckFailure, match="Hint: scale"):
        assert_close(torch.zeros(2), torch.ones(2), hint="scale")
    with pytest.raises(CheckFailure, match="torch.Tensor"):
        expect_tensor([1, 2])


def test_a_bad_input_must_raise_value_error_and_a_stub_says_it_is_not_written():
    def raising(error):
        with expect_value_error("n = 0", "n = 0 was accepted: raise ValueError"):
            if error:
                raise error
    raising(protocol.SubmissionError("ValueError: n must be positive"))  # passes
    with pytest.raises(CheckFailure, match="n = 0 was accepted"):
        raising(None)
    with pytest.raises(CheckFailure, match="n = 0 should raise ValueError, got: TypeError"):
        raising(protocol.SubmissionError("TypeError: bad operand"))
    # An unimplemented stub keeps its own error, which the feedback reads as "not written yet".
    with pytest.raises(protocol.SubmissionError, match="^NotImplementedError"):
        raising(protocol.SubmissionError("NotImplementedError: `f` is not written yet"))
    with pytest.raises(protocol.ForbiddenShortcut):
        raising(protocol.ForbiddenShortcut("ValueError from torch.softmax"))


def _check(grade_cell, weight, passed, structural=False):
    return CheckRecord(id="t", module="m", description="d", grade_cell=grade_cell,
                       weight=weight, passed=passed, structural=structural)


def test_score_is_points_times_weighted_fraction_passed():
    checks = [_check("a", 1.0, True), _check("a", 3.0, False), _check("b", 1.0, True)]
    table = score_cells({"a": 4, "b": 2, "c": 1}, checks)
    assert table["a"]["score"] == 1.0
    assert table["b"]["score"] == 2.0
    assert table["c"]["score"] == 0.0  # no checks ran: no points


def test_structural_checks_count_only_next_to_a_passing_value_check():
    names = _check("a", 1.0, True, structural=True)
    wrong, right = _check("a", 1.0, False), _check("a", 1.0, True)
    assert score_cells({"a": 2}, [names, wrong])["a"]["score"] == 0.0
    assert score_cells({"a": 2}, [names, wrong, right])["a"]["score"] == 1.33  # two decimals
    assert waiting_on_values([names, wrong]) == 1 and waiting_on_values([names, right]) == 0


def test_the_same_tensor_can_be_sent_twice():
    x = torch.randn(3)
    tensors = {}
    protocol._encode((x, x), tensors, "a")
    from safetensors.torch import save  # refuses shared memory, so encoding must not share

    save(tensors)


def test_an_answer_that_returns_its_input_or_a_view_can_be_sent_back():
    """The kernel's side too: a student's function that returns its input (forgot a
    clone) or views of one tensor must come back as values, so only the checks about
    aliasing fail, not the transport (safetensors refuses tensors that share memory)."""
    from safetensors.torch import load, save

    from autograder.protocol.kernel_side import make_bridge

    def forgot_to_clone(x):
        return x, x, x[1:], x.view(2, 2)

    bridge = make_bridge({"forgot_to_clone": forgot_to_clone})
    x = torch.arange(4.0)
    reply, tensors = bridge.respond(
        {"kind": "call", "name": "forgot_to_clone", "args": [{"type": "tensor", "key": "x"}]},
        {"x": x})
    assert reply["ok"], reply
    back = load(save(tensors))
    keys = [item["key"] for item in reply["result"]["items"]]
    assert [back[k].tolist() for k in keys] == [x.tolist(), x.tolist(), x[1:].tolist(),
                                                 x.view(2, 2).tolist()]


def test_a_missing_parameter_is_explained_from_the_module_side():
    """A student who keeps a weight as a plain tensor (no nn.Parameter) hears that their
    module lacks it, not that the check's tensor is 'unexpected'."""
    from autograder.protocol.kernel_side import load_exercise_state

    class Forgot(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.ones(3)  # not registered
            self.scale = torch.nn.Parameter(torch.ones(1))  # not in the exercise

    with pytest.raises(KeyError) as err:
        load_exercise_state(Forgot(), {"weight": torch.zeros(3)})
    text = str(err.value)
    assert "Forgot's parameters differ" in text
    assert "no parameter or buffer named ['weight']" in text and "nn.Parameter" in text
    assert "['scale'], which the exercise does not name" in text
    module = torch.nn.Linear(2, 2, bias=False)
    load_exercise_state(module, {}, may_miss=("weight",))  # allowed to be absent
    load_exercise_state(module, {"weight": torch.eye(2)})
    assert torch.equal(module.weight, torch.eye(2))


def test_notes_name_a_cell_by_its_place_and_first_line():
    import nbformat

    from autograder.sandbox.cell_notes import cell_label

    cell = nbformat.v4.new_code_cell("# Exercise 2\n%matplotlib inline\n\nout = attention_weights("
                                     "q, k, mask=causal_mask(4), scale=None)\n")
    assert cell_label(3, cell) == "cell 4 (`out = attention_weights(q, k, mask=causa...`)"
    assert cell_label(0, nbformat.v4.new_code_cell("# only a comment")) == "cell 1"


def test_a_reason_that_fails_many_checks_is_said_once_per_cell():
    from autograder.grading.scoring import cell_report_markdown

    reason = "ForbiddenShortcut: your code called torch.nn.functional.layer_norm (in `LN.forward`)"
    checks = [CheckRecord(id=f"t{i}", module="m", description=f"share {i}", grade_cell="g",
                          passed=False, message=reason) for i in range(3)]
    checks.append(CheckRecord(id="other", module="m", description="other", grade_cell="g",
                              passed=False, message="shape (2, 3), expected (3, 2)"))
    entry = score_cells({"g": 3}, checks)["g"]
    text = cell_report_markdown("g", entry)
    assert text.count("torch.nn.functional.layer_norm") == 1
    assert text.count("(the same reason as above)") == 2
    assert "shape (2, 3), expected (3, 2)" in text


def test_the_same_mistake_on_other_inputs_is_said_once_and_gated_passes_are_labelled():
    from autograder.grading.scoring import cell_report_markdown

    def failing(i, message):
        return CheckRecord(id=f"t{i}", module="m", description=f"case {i}", grade_cell="g",
                           passed=False, message=message)

    checks = [failing(i, f"SubmissionError: RuntimeError: size [8, {i}] (in `f`, line 3: x)")
              for i in range(3)]
    checks.append(CheckRecord(id="names", module="m", description="names", grade_cell="g",
                              passed=True, structural=True))
    text = cell_report_markdown("g", score_cells({"g": 3}, checks)["g"])
    assert text.count("your code raised RuntimeError: size [8, 0] (in `f`, line 3: x)") == 1
    assert text.count("(the same reason as above, on other inputs)") == 2
    assert "SubmissionError" not in text
    assert "names (counts once a check of the values passes)" in text


def test_messages_read_as_words_not_class_names():
    from autograder.grading.scoring import readable_message

    assert readable_message("SubmissionError: KeyError: 'w' (line 2: x)") == (
        "your code raised KeyError: 'w' (line 2: x)")
    assert readable_message("SubmissionError: NotImplementedError (in `f`, line 2)") == (
        "your code raised NotImplementedError (in `f`, line 2)")
    assert readable_message("SubmissionError: no answer within 10s (an infinite loop?)") == (
        "no answer within 10s (an infinite loop?)")
    assert readable_message("ForbiddenShortcut: your code called torch.softmax") == (
        "your code called torch.softmax")
    assert readable_message("out differs. Hint: x") == "out differs. Hint: x"


def test_an_error_names_the_students_function_and_line():
    """The kernel side places an error at the last line of the notebook's own code it went
    through (a cell runs in __main__), with the function's qualified name; never at a
    library's line or the check's own code."""
    from autograder.protocol.kernel_side import make_bridge

    namespace = {"__name__": "__main__", "torch": torch}
    exec(compile("def causal_mask(t):\n    raise NotImplementedError()\n\n"
                 "class Block:\n    def forward(self, x):\n        return causal_mask(x)\n\n"
                 "def numbers():\n    return 1.5\n", "<cell 3>", "exec"), namespace)
    bridge = make_bridge(namespace)
    reply, _ = bridge.respond({"kind": "exec", "code": "result = Block().forward(3)"}, {})
    assert reply["error"] == "NotImplementedError (in `causal_mask`, line 2)"
    reply, _ = bridge.respond({"kind": "exec", "code": "result = numbers().backward()"}, {})
    assert reply["error"] == ("AttributeError: 'float' object has no attribute 'backward' "
                              "(raised by the check's code, on what your function returned)")
    reply, _ = bridge.respond({"kind": "call", "name": "numbers"}, {})
    assert reply["ok"] and reply["result"] == {"type": "float", "value": 1.5}


def test_numpy_numbers_are_numbers_and_arrays_are_refused():
    import numpy as np

    from autograder.protocol.kernel_side import make_bridge

    bridge = make_bridge({"count": lambda: np.int64(512), "array": lambda: np.zeros(3)})
    reply, _ = bridge.respond({"kind": "call", "name": "count"}, {})
    assert reply["ok"] and reply["result"] == {"type": "int", "value": 512}
    reply, _ = bridge.respond({"kind": "call", "name": "array"}, {})
    assert not reply["ok"] and reply["error"].startswith(
        "your function returned a numpy.ndarray: return a torch.Tensor")
