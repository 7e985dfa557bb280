"""How `make test` shares the suite between its pytest-xdist workers, and which
checkpoint cache it uses.

`make test` runs ``pytest -n 2 --dist loadfile``: each test file goes whole to one
worker, so a module fixture (a class graded once, a JupyterLab server) is built once.
Left as it is, xdist hands out the files with the most tests first, so the file of
`autograder validate` cases (close to half of the suite's work) went to one worker as
one unit, late in the run. Here each of those cases is a unit of its own (each grades
its own throwaway course, so nothing is built twice) and the longest units start first,
the rest following in xdist's usual order.

The made submissions of 05, 07 and 08 train checkpoints. They come from the checkpoint
cache (``~/.cache/autograder/checkpoints``, shared with `make demo` and `autograder
validate`), keyed by everything training reads, so an unchanged training run is reused
and a changed one trains again. ``AUTOGRADER_TEST_RETRAIN=1`` (`make test-retrain`)
gives the run a cache of its own, so that every checkpoint is trained afresh, as on a
new machine."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections import OrderedDict


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


def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None  # any other --dist keeps xdist's own scheduler
    from xdist.scheduler import LoadFileScheduling

    class LongestFirst(LoadFileScheduling):
        """``--dist loadfile``, with :data:`SPLIT_PER_TEST` split and
        :data:`LONGEST_FIRST` handed out before everything else."""

        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return nodeid if path in SPLIT_PER_TEST else path

        def _assign_work_unit(self, node) -> None:
            if not self.ordered:  # the queue is complete by the first assignment
                rank = {scope: i for i, scope in enumerate(LONGEST_FIRST)}
                order = sorted(self.workqueue, key=lambda s: rank.get(s, len(rank)))
                self.workqueue = OrderedDict((s, self.workqueue[s]) for s in order)
                self.ordered = True
            super()._assign_work_unit(node)

    return LongestFirst(config, log)
