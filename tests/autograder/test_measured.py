"""A check can say what it measured (a trained checkpoint's accuracy), and that text
reaches the check's record, the results file and `autograder demo`'s log."""

import types

from autograder.grading.runner import run_checks
from autograder.jobs import CheckRecord

CHECKS = '''
import pytest

pytestmark = pytest.mark.grade_cell("test_model")


def test_accuracy(submission, record_property):
    """The model is accurate enough."""
    record_property("measured", "exact match 72.5% on held-out numbers")


def test_plain(submission):
    """Nothing measured here."""
    assert False, "wrong"
'''


def test_a_check_s_measurement_reaches_its_record(tmp_path):
    (tmp_path / "test_model.py").write_text(CHECKS)
    records, _ = run_checks(tmp_path, types.SimpleNamespace(transcript=None))
    by_id = {r.id: r for r in records}
    assert by_id["test_accuracy"].passed
    assert by_id["test_accuracy"].measured == "exact match 72.5% on held-out numbers"
    assert not by_id["test_plain"].passed and by_id["test_plain"].measured == ""


def test_results_written_before_measurements_still_read():
    old = {"id": "t", "module": "m", "description": "d", "grade_cell": "g", "passed": True}
    assert CheckRecord.from_dict(old).measured == ""
