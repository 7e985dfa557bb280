"""The check transport on a real sandboxed kernel: a student function that hangs or kills
its kernel in the middle of the checks costs that check only.

Each request is one ``autograder_request`` shell message that the bridge answers
(:meth:`SandboxedKernel.request`): a hang runs into the call's time limit and is
interrupted, a dead kernel is restarted and the notebook's good cells replayed, and the
next request is answered as if nothing had happened.
"""

from __future__ import annotations

import nbformat
import pytest
import torch

from autograder.limits import Limits
from autograder.protocol import kernel_side
from autograder.protocol.trusted import Submission, SubmissionError
from autograder.sandbox.kernel import SandboxedKernel

STUDENT = """
import os
import torch

def double(x):
    return 2 * x

def spin(x):
    while True:
        pass

def leave(x):
    os._exit(3)
"""


@pytest.fixture(scope="module")
def submission():
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(STUDENT)])
    with SandboxedKernel(Limits(cell_timeout=30)) as kernel:
        kernel.run_notebook(nb)
        kernel.install_bridge(kernel_side.kernel_source())
        yield Submission(kernel, nb, kernel.exchange_dir, call_timeout=2), kernel


def test_a_request_is_answered(submission):
    student, _ = submission
    x = torch.arange(4.0)
    assert torch.equal(student.call("double", x), 2 * x)


def test_a_hang_is_stopped_at_the_time_limit_and_the_next_request_answered(submission):
    student, kernel = submission
    with pytest.raises(SubmissionError, match="no answer within 2s"):
        student.call("spin", torch.ones(2))
    assert torch.equal(student.call("double", torch.ones(2)), torch.full((2,), 2.0))
    assert kernel.restarts == 0  # interrupted, not restarted


def test_a_kernel_that_dies_is_restarted_for_the_next_request(submission):
    student, kernel = submission
    restarts = kernel.restarts
    with pytest.raises(SubmissionError, match="kernel stopped|no answer"):
        student.call("leave", torch.ones(2))
    assert torch.equal(student.call("double", torch.ones(3)), torch.full((3,), 2.0))
    assert kernel.restarts == restarts + 1
    assert any("stopped answering" in event for event in kernel.events)


def test_an_error_in_the_students_function_comes_back_as_its_message(submission):
    student, _ = submission
    with pytest.raises(SubmissionError, match="no_such_function|not defined|NameError"):
        student.call("no_such_function", torch.ones(2))
