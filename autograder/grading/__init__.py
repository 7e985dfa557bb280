"""Grading: from a submitted notebook to points in the gradebook.

:mod:`.grade` (``autograder grade``: every submission of an assignment, in parallel,
resumably), :mod:`.sanitize` (step 1: restore what a student may not change),
:mod:`.runner` (one notebook: run it in the sandbox, then the hidden checks),
:mod:`.scoring` (check results to points per grade cell), :mod:`.diagnosis` and
:mod:`.oracle` (name the classic mistake behind failing checks), :mod:`.upstream` (which
exercise builds on which), :mod:`.gradebook` (the single writer of results) and
:mod:`.workers` (worker processes that stop with the grader).
"""
