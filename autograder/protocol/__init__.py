"""The check protocol: how a trusted hidden check asks the student's kernel for answers.

:mod:`.trusted` is the grader's half (write a request, read back and validate the reply);
:mod:`.kernel_side` and :mod:`.kernel_guard` are the kernel's half, whose *source* is
executed in the student's kernel; :mod:`.checklib` is what hidden checks
(``assignments/<name>/checks/``) import to compare and explain, and :mod:`.checkpoints`
what checks of a checkpoint handed in beside the notebook import.

``from autograder.protocol import SubmissionError, ForbiddenShortcut`` is how hidden
checks written before the autograder was split into packages name the protocol's
errors (``autograder.protocol`` was then a module); it keeps working.
"""

from .trusted import ForbiddenShortcut, SubmissionError  # noqa: F401  (hidden checks' API)
