"""How `make test` shares the suite between its pytest-xdist workers, and which
checkpoint cache it uses.

`make test` runs ``pytest -n 2 --dist loadscope --no-loadscope-reorder``, with xdist's
public means only. (Two workers leave about half of two cores idle, waiting on kernels,
browsers and servers, yet a third worker made the run slower: benchmarks/README.md,
"The test suite".)

* ``--dist loadscope`` hands out each test file whole (the suite has no test classes but
  one kind), so a module fixture (a class graded once, a JupyterLab server) is built once,
  on one worker; a module whose tests ran on two workers would see half of what its
  fixture made. The `autograder validate` cases (close to half of the suite's work) are
  one test class per assignment (``TestValidate_<name>``), each a unit of its own.
* ``--no-loadscope-reorder`` keeps the units in collection order, which
  :func:`pytest_collection_modifyitems` sets: the :data:`LONGEST_FIRST` units start first,
  longest first, and the rest follow with the units of most tests first, so that short
  files fill the gaps at the end.

(``--dist loadgroup`` with an ``xdist_group`` per file would read as well, but with
pytest 9.2 and pytest-xdist 3.8 the group never reaches the test's id, so the tests of
one file were spread over both workers.)

The made submissions of 05 to 08 train checkpoints. They come from the checkpoint
cache (``~/.cache/autograder/checkpoints``, shared with `make demo` and `autograder
validate`), keyed by everything training reads, so an unchanged training run is reused
and a changed one trains again. ``AUTOGRADER_TEST_RETRAIN=1`` (`make test-retrain`)
gives the run a cache of its own, so that every checkpoint is trained afresh, as on a
new machine."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import Counter


def pytest_configure(config):
    if os.environ.get("AUTOGRADER_TEST_RETRAIN") == "1":
        config._checkpoint_cache = tempfile.mkdtemp(prefix="autograder-test-checkpoints-")
        os.environ["AUTOGRADER_CHECKPOINT_CACHE"] = config._checkpoint_cache


def pytest_unconfigure(config):
    if getattr(config, "_checkpoint_cache", None):
        shutil.rmtree(config._checkpoint_cache, ignore_errors=True)


#: The longest units, longest first (seconds each, in a `make test` at 00bdf27 on a 2-core
#: machine whose caches held every checkpoint and measurement): they start at once, and
#: the short files fill the gaps around them.
_VALIDATE = "tests/assignments/test_validate_assignments.py::TestValidate_"
LONGEST_FIRST = (
    "tests/course/test_assignments_student_toolkit.py",  # 118 in all, 16 notebooks
    "tests/autograder/test_recovery_and_dask.py",  # 82 in all, its longest test 25
    "tests/browser/test_run_all_released.py",    # 72
    "tests/course/test_lectures.py",             # about 70 in all, its longest lecture 21
    f"{_VALIDATE}05_blocks",                     # 46
    "tests/autograder/test_postgres.py",         # 42
    "tests/browser/test_course_panel.py",        # 38
    f"{_VALIDATE}06_beyond_attention",           # 37
    "tests/autograder/test_caps.py",             # 31
    "tests/labext/test_handlers.py",             # 30
    f"{_VALIDATE}04_flash_attention",            # 28
    f"{_VALIDATE}03_efficient_attention",        # 28
    f"{_VALIDATE}02_positional",                 # 27
    "tests/browser/test_student_round.py",       # 26
    "tests/course/test_lectures_student_toolkit.py",  # 25
    f"{_VALIDATE}07_capstone",                   # 23
    "tests/browser/test_nbgrader_day.py",        # 22
    f"{_VALIDATE}08_encoder_decoder",            # 18
    f"{_VALIDATE}01_attention",                  # 16
)


def pytest_collection_modifyitems(config, items):
    """The units in the order they should start: LONGEST_FIRST, then most tests first."""
    if not getattr(config.option, "loadscopereorder", True):  # --no-loadscope-reorder
        rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
        size = Counter(map(_unit, items))
        # sorted() is stable: the tests of a unit stay in their order.
        items[:] = sorted(items, key=lambda item: (rank.get(_unit(item), len(rank)),
                                                   -size[_unit(item)]))


def _unit(item) -> str:
    """What ``--dist loadscope`` hands out whole: the test's class, else its file."""
    path = item.nodeid.split("::", 1)[0]
    return f"{path}::{item.cls.__name__}" if item.cls is not None else path
