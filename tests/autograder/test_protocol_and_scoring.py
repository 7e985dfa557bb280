"""Unit tests of the trusted side: reply validation and scoring (no kernel needed)."""

import os

import pytest
import torch

from autograder import protocol
from autograder.checklib import CheckFailure, assert_close, expect_tensor
from autograder.jobs import CheckRecord
from autograder.scoring import score_cells


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
    assert score_cells({"a": 2}, [names, wrong, right])["a"]["score"] == round(2 * 2 / 3, 4)


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

    from autograder.kernel_side import make_bridge

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
