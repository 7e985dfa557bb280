"""The course autograder: nbgrader's formats and gradebook, trusted checks, sandboxed kernels.

One package per layer, each depending only on those above it in this list:

* :mod:`autograder.jobs`, :mod:`autograder.limits`: the shared contracts (a job in, a
  result out; what one submission may use);
* :mod:`autograder.workspace`: the course workspace and nbgrader's configuration;
* :mod:`autograder.sandbox`: the grading kernel's life cycle, confined;
* :mod:`autograder.protocol`: how trusted hidden checks talk to the student's kernel;
* :mod:`autograder.grading`: sanitize, run, check, score, diagnose, record;
* :mod:`autograder.reports`: reports, similarity, export, the students' feedback pages;
* :mod:`autograder.authoring`: ``new``, ``validate``, ``demo``, made submissions;
* :mod:`autograder.student`: the wheels students install;
* :mod:`autograder.labext`: the JupyterLab extension (student side, service side);
* :mod:`autograder.cli`: the ``autograder`` command.

docs/architecture.md follows one submission through them.
"""

__version__ = "0.1.0"

# The names modules had before the packages above (a workspace's nbgrader_config.py, old
# hidden checks and prepare scripts use them): see autograder/old_names.py.
from . import old_names as _old_names  # noqa: E402

_old_names.install()
