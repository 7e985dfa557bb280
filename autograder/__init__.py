"""The course autograder: nbgrader's formats and gradebook, trusted checks, sandboxed kernels.

Grading one submission takes four steps (docs/architecture.md tells the whole story):

1. :mod:`autograder.sanitize`  restore locked and test cells from the gradebook.
2. :mod:`autograder.execute`   run the notebook in a fresh kernel inside :mod:`autograder.sandbox`,
   writing only to its capped storage (:mod:`autograder.storage`).
3. :mod:`autograder.runner`    run the hidden pytest checks in *this* (trusted) process;
   they reach the student's code only through :mod:`autograder.protocol`.
4. :mod:`autograder.gradebook` score each grade cell and write nbgrader's gradebook.
"""

__version__ = "0.1.0"
