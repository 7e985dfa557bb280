"""A grading kernel runs as a uid that has no passwd entry (one per sandbox slot), yet
libraries that ask who the user is get an answer.

``getpass.getuser()`` reads USER/LOGNAME first and falls back to the passwd database,
which raises ``KeyError`` for such a uid. PyTorch 2.11 names its compiler cache after
the user, so on a GPU grading machine with it the capstone's train-step checks and 04's
score-matrix check failed with ``KeyError: 'getpwuid(): uid not found'`` before the kernel
environment set both variables.
"""

from __future__ import annotations

import pytest

from autograder.grading import oracle
from autograder.limits import Limits
from autograder.sandbox import isolation as sandbox


def test_the_kernel_environment_names_a_user(tmp_path):
    env = sandbox.kernel_environment(tmp_path)
    assert env["USER"] == env["LOGNAME"] == sandbox.SANDBOX_USER


@pytest.mark.slow
def test_getuser_answers_inside_the_sandbox(run_cell):
    code = "import getpass, os\nprint(getpass.getuser(), os.getuid() != 0)\n"
    text, _ = run_cell(code, Limits(cell_timeout=60))
    assert text.split() == [sandbox.SANDBOX_USER, "True"], text


def test_the_mistake_oracle_replays_where_the_kernel_ran(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert oracle.MistakeOracle().environment()["TRITON_INTERPRET"] == "1"
    assert oracle.MistakeOracle(uses_gpu=True).environment()["TRITON_INTERPRET"] == "0"
    monkeypatch.setattr(oracle, "_shared", {})
    on_gpu = oracle.shared_oracle(uses_gpu=True)
    assert on_gpu.uses_gpu and oracle.shared_oracle(uses_gpu=True) is on_gpu
    assert oracle.shared_oracle() is not on_gpu and not oracle.shared_oracle().uses_gpu
