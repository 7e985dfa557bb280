"""How `make test` shares the suite between its pytest-xdist workers, and which
checkpoint cache it uses.

`make test` runs ``pytest -n 2 --dist loadgroup --no-loadscope-reorder`` (public
pytest-xdist options). Every test gets the group of its file here, so each file goes
whole to one worker and a module fixture (a class graded once, a JupyterLab server) is
built once; the `autograder validate` cases (close to half of the suite's work) are
groups of their own, since each grades its own throwaway course. Without reordering,
xdist hands the groups out in collection order, which :func:`pytest_collection_modifyitems`
sets: the longest units first, the short files filling the gaps around them.

The made submissions of 05, 07 and 08 train checkpoints. They come from the checkpoint
cache (``~/.cache/autograder/checkpoints``, shared with `make demo` and `autograder
validate`), keyed by everything training reads, so an unchanged training run is reused
and a changed one trains again. ``AUTOGRADER_TEST_RETRAIN=1`` (`make test-retrain`)
gives the run a cache of its own, so that every checkpoint is trained afresh, as on a
new machine."""

from __future__ import annotations

import collections
import os
import shutil
import tempfile

import pytest


def pytest_configure(config):
    if os.environ.get("AUTOGRADER_TEST_RETRAIN") == "1":
        config._checkpoint_cache = tempfile.mkdtemp(prefix="autograder-test-checkpoints-")
        os.environ["AUTOGRADER_CHECKPOINT_CACHE"] = config._checkpoint_cache


def pytest_unconfigure(config):
    if getattr(config, "_checkpoint_cache", None):
        shutil.rmtree(config._checkpoint_cache, ignore_errors=True)


#: Test files whose tests share no module fixture, each test a unit of its own.
SPLIT_PER_TEST = ("tests/assignments/test_validate_assignments.py",)

#: The longest units, longest first (seconds each, setup to teardown, in a `make test` on
#: an idle 2-core machine that trained every checkpoint): they start at once, and the
#: short files fill the gaps around them.
_VALIDATE = "tests/assignments/test_validate_assignments.py::test_validate"
LONGEST_FIRST = (
    f"{_VALIDATE}[05-blocks]",                   # 326
    f"{_VALIDATE}[07-capstone]",                 # 229
    f"{_VALIDATE}[08-encoder-decoder]",          # not timed idle: 8 trainings of 21 s CPU
    "tests/autograder/test_recovery_and_dask.py",  # 164
    "tests/browser/test_run_all_released.py",    # 107
    f"{_VALIDATE}[04-flash-attention]",          # 90
    "tests/autograder/test_postgres.py",         # 64
    f"{_VALIDATE}[02-positional]",               # 61
    f"{_VALIDATE}[06-beyond-attention]",         # 60
    "tests/browser/test_course_panel.py",        # 59
    "tests/labext/test_handlers.py",             # 55
    "tests/course/test_assignments_student_toolkit.py",  # 70 alone
    f"{_VALIDATE}[03-efficient-attention]",      # 43
    f"{_VALIDATE}[01-attention]",                # 36
)


def work_unit(nodeid: str) -> str:
    """The xdist group of a test: its file, or the test itself in :data:`SPLIT_PER_TEST`."""
    path = nodeid.split("::", 1)[0]
    return nodeid if path in SPLIT_PER_TEST else path


def pytest_collection_modifyitems(config, items):
    """Group each test with its file (see :func:`work_unit`) and put the longest units
    first; the rest follow with the units of the most tests first (the order xdist's own
    reordering gives). Without xdist only the order changes."""
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    units = {item: work_unit(item.nodeid) for item in items}
    sizes = collections.Counter(units.values())
    items.sort(key=lambda item: (rank.get(units[item], len(rank)), -sizes[units[item]]))
    for item in items:
        item.add_marker(pytest.mark.xdist_group(units[item]))
