"""One grading job's path through the autograder, measured: the job talks to one object.

``grade_notebook(job)`` of a submission that makes a named mistake (so the notebook runs,
the checks call into the kernel, one fails and the diagnosis asks the mistake oracle) is
traced with :class:`grading_path.ModulePath`, every thread included. Consecutive calls
within a module are one stay; a loop that repeats the same crossing (a cell, a check
request) is the same entry on the path. What must hold, with the fork server and
without it (a fresh interpreter per kernel):

* no call backs: no module is entered again by a module it called (before the kernel
  object, ``execute`` handed ``storage`` a launcher method to call back, the fork
  server's provisioner called back into the launcher for its settings, and the runner
  handed the session a function to pick the cells to skip);
* each module of the sandbox (the kernel's life cycle) is entered from two places at
  most: another module of the sandbox, or the job (the runner, the checks' transport);
* the job enters the sandbox through the kernel object, and otherwise only where
  ``protocol/trusted.py`` gives its exchange files to the slot's uid and where the
  oracle frames its messages (:mod:`autograder.sandbox.inside.channel`).
"""

from __future__ import annotations

import pytest
from grading_path import ModulePath

from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading import grade as grading
from autograder.grading.runner import grade_notebook
from autograder.grading.sanitize import grade_cell_ids
from autograder.sandbox import forkserver

pytestmark = pytest.mark.slow

#: Where the job may enter the sandbox: the kernel object (which also hands the checks'
#: exchange files to its uid); the framing the oracle borrows.
DOORS = {"autograder.sandbox.kernel", "autograder.sandbox.inside.channel"}


@pytest.fixture(scope="module")
def mistaken_job(tiny_course):
    """The job of a submission that makes the tiny assignment's named mistake."""
    spec = tiny_course.spec("00-tiny")
    student = next(s for s in make_class(tiny_course, spec) if s.startswith("mutant-"))
    write_submissions(tiny_course, spec, {student: make_class(tiny_course, spec)[student]},
                      progress=False)
    with tiny_course.gradebook() as gb:
        points, _ = grade_cell_ids(gb, "tiny", spec.name)
        return grading._job(tiny_course, spec, student, "tiny", gb, points)


@pytest.mark.parametrize("fork_server", [True, False], ids=["fork-server", "fresh"])
def test_one_job_enters_each_module_of_the_sandbox_from_two_places_at_most(
        mistaken_job, fork_server, monkeypatch):
    if fork_server and not forkserver.enabled():
        pytest.skip("no fork server on this machine")
    if not fork_server:
        monkeypatch.setenv("AUTOGRADER_FORKSERVER", "0")
    with ModulePath() as path:
        result = grade_notebook(mistaken_job)
    # The whole path was walked: the notebook ran, the checks asked the kernel, one
    # failed, and the diagnosis named the mistake.
    assert not any(e.startswith("grading error") for e in result.events), result.events
    assert [c.passed for c in result.checks].count(False) == 1
    assert [d["mutant"] for d in result.diagnoses] == ["no-shift"]

    assert path.call_backs() == []
    places = path.entered_from_places()
    assert "autograder.sandbox.kernel" in places
    assert {m: sorted(p) for m, p in places.items() if len(p) > 2} == {}
    assert {m for m, p in places.items() if "the job" in p} <= DOORS
