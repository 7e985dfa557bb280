"""The ``autograder`` command line (console script ``autograder = "autograder.cli:main"``).

:mod:`.commands` parses and dispatches each command; :mod:`.options` checks what the
command line accepts before any work is done. ``python -m autograder.cli`` runs it too.
"""

from .commands import main  # noqa: F401
