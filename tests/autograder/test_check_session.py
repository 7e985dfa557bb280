"""The hidden checks are collected once per grading process and run per submission
(autograder.grading.check_session), and the mistake oracle keeps its answers: nothing of
one submission may reach the next one's records."""

import os
import sys
import types

import pytest
import torch

from autograder.grading import check_session
from autograder.grading.oracle import MistakeOracle, _read, _write, request_key
from autograder.grading.runner import run_checks

CHECKS = '''
import pytest

pytestmark = pytest.mark.grade_cell("test_model")
SET_UP = []


@pytest.fixture(scope="module")
def table():
    SET_UP.append("up")
    yield {}
    SET_UP.append("down")


@pytest.mark.weight(2)
def test_answer(submission, table, record_property):
    """The answer is right."""
    table[submission.name] = True
    assert len(table) == 1, "a fixture outlived its submission"
    if submission.name == "measured":
        record_property("measured", "accuracy 90%")
    assert submission.name != "wrong", "wrong answer"
    if submission.name == "interrupt":
        raise KeyboardInterrupt  # what a worker's stop signal raises


@pytest.mark.parametrize("k", [1, 2])
def test_parametrised(submission, k):
    """Each k."""
    submission.transcript.append(k)
'''


def _submission(name):
    return types.SimpleNamespace(name=name, transcript=None)


def test_runs_one_after_another_keep_nothing_of_the_previous_submission(tmp_path):
    (tmp_path / "test_model.py").write_text(CHECKS)
    first, first_transcripts = run_checks(tmp_path, _submission("measured"))
    second, second_transcripts = run_checks(tmp_path, _submission("wrong"))
    third, _ = run_checks(tmp_path, _submission("right"))

    answers = [{r.id: r for r in records}["test_answer"] for records in (first, second, third)]
    assert [a.passed for a in answers] == [True, False, True]
    assert answers[0].measured == "accuracy 90%"
    assert answers[1].measured == "" and answers[2].measured == ""
    assert answers[1].message == "wrong answer" and answers[1].weight == 2.0
    assert answers[1].grade_cell == "test_model"
    assert {r.description for r in first if r.id.startswith("test_parametrised")} == {
        "Each k. [1]", "Each k. [2]"}
    assert first_transcripts["test_model::test_parametrised[2]"] == [2]
    assert second_transcripts["test_model::test_parametrised[1]"] == [1]
    # The module's fixture was set up and torn down once per submission.
    module = next(m for m in list(sys.modules.values())
                  if getattr(m, "__file__", None) == str(tmp_path / "test_model.py"))
    assert module.SET_UP == ["up", "down"] * 3


def test_the_checks_are_collected_once_and_again_when_their_files_change(tmp_path):
    (tmp_path / "test_model.py").write_text(CHECKS)
    run_checks(tmp_path, _submission("right"))
    session = check_session._sessions[tmp_path.resolve()]
    run_checks(tmp_path, _submission("right"))
    assert check_session._sessions[tmp_path.resolve()] is session

    (tmp_path / "test_more.py").write_text(
        'import pytest\n\n@pytest.mark.grade_cell("more")\n'
        'def test_more(submission):\n    """More."""\n')
    records, _ = run_checks(tmp_path, _submission("right"))
    assert "test_more" in {r.id for r in records}
    assert check_session._sessions[tmp_path.resolve()] is not session


def test_a_check_file_that_does_not_import_stops_the_checks_with_its_error(tmp_path):
    (tmp_path / "test_broken.py").write_text("import no_such_module_here\n")
    with pytest.raises(RuntimeError, match="no_such_module_here"):
        run_checks(tmp_path, _submission("right"))
    assert tmp_path.resolve() not in check_session._sessions


def test_a_run_that_raises_is_not_reused(tmp_path):
    (tmp_path / "test_model.py").write_text(CHECKS)
    run_checks(tmp_path, _submission("right"))
    session = check_session._sessions[tmp_path.resolve()]
    with pytest.raises(KeyboardInterrupt):
        run_checks(tmp_path, _submission("interrupt"))
    assert tmp_path.resolve() not in check_session._sessions
    records, _ = run_checks(tmp_path, _submission("right"))
    assert all(r.passed for r in records)
    assert check_session._sessions[tmp_path.resolve()] is not session
    module = next(m for m in list(sys.modules.values())
                  if getattr(m, "__file__", None) == str(tmp_path / "test_model.py"))
    assert module.SET_UP == ["up", "down"] * 3  # the interrupted run's fixture too


def test_pytest_version_is_set_only_while_the_checks_run(tmp_path):
    (tmp_path / "test_env.py").write_text(
        'import os\n\ndef test_env(submission):\n    """Env."""\n'
        '    assert os.environ.get("PYTEST_VERSION")\n')
    before = os.environ.get("PYTEST_VERSION")
    [record], _ = run_checks(tmp_path, _submission("right"))
    assert record.passed
    assert os.environ.get("PYTEST_VERSION") == before


@pytest.mark.parametrize("tensor", [
    torch.randn(3, 4, dtype=torch.float64), torch.tensor(3.0), torch.zeros(0, 5),
    torch.tensor([[True, False]]), torch.randn(4, 6).t(), torch.randn(2, dtype=torch.bfloat16),
    torch.arange(5)[1:3], torch.tensor(float("nan")), torch.nn.Parameter(torch.randn(2)),
], ids=["f64", "scalar", "empty", "bool", "transposed", "bf16", "slice", "nan", "parameter"])
def test_tensors_cross_the_oracle_pipe_unchanged(tensor):
    read_end, write_end = os.pipe()  # the oracle's frames travel through a real pipe
    with os.fdopen(read_end, "rb") as reader, os.fdopen(write_end, "wb") as writer:
        _write(writer, {"twice": [tensor, tensor]})
        first, second = _read(reader, timeout=10)["twice"]
    assert first is second  # sent once
    assert first.dtype == tensor.dtype and first.shape == tensor.shape
    assert torch.equal(first.detach().nan_to_num(), tensor.detach().nan_to_num())


def test_the_oracle_answers_a_request_it_has_seen_without_asking_again(tmp_path):
    source = "# %%\ndef double(x):\n    return 2 * x\n"
    request = {"kind": "call", "name": "double", "args": [{"type": "tensor", "key": "a0"}]}
    inputs = {"a0": torch.arange(4.0)}
    oracle = MistakeOracle()
    try:
        [(reply, tensors)] = oracle.replay("reference", source, tmp_path, [(request, inputs)])
        assert reply["ok"] and torch.equal(tensors[reply["result"]["key"]], 2 * torch.arange(4.0))
    finally:
        oracle.close()
    # The helper is gone: the same request is answered from what was kept ...
    [(again, _)] = oracle.replay("reference", source, tmp_path, [(request, inputs)])
    assert again == reply and oracle._process is None
    # ... and other inputs, another variant or another request are not.
    assert request_key("reference", request, {"a0": torch.arange(1.0, 5.0)}) != (
        request_key("reference", request, inputs))
    assert request_key("mutant", request, inputs) != request_key("reference", request, inputs)
    assert request_key("reference", {**request, "name": "triple"}, inputs) != (
        request_key("reference", request, inputs))
    try:
        [(other, tensors)] = oracle.replay("reference", source, tmp_path,
                                           [(request, {"a0": torch.ones(2)})])
        assert oracle._process is not None
        assert torch.equal(tensors[other["result"]["key"]], torch.full((2,), 2.0))
    finally:
        oracle.close()


def test_two_folders_with_a_check_file_of_the_same_name_each_run_their_own(tmp_path):
    """pytest names a check module after its file: 07's and 08's test_attention.py must
    not be taken for each other in a process that grades both (Check my work)."""
    for folder, value in (("first", 1), ("second", 2)):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "test_same_name.py").write_text(
            f'def test_which(submission):\n    """Which."""\n    assert {value} == 1, "second"\n')
    [first], _ = run_checks(tmp_path / "first", _submission("right"))
    [second], _ = run_checks(tmp_path / "second", _submission("right"))
    [first_again], _ = run_checks(tmp_path / "first", _submission("right"))
    assert first.passed and first_again.passed
    assert not second.passed and second.message == "second"
