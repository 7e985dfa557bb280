"""Tools for the people who write assignments.

:mod:`.scaffold` (``autograder new``, from ``templates/``), :mod:`.submissions` (the
reference, the stub, each named mutant and hostile submissions, made to be graded),
:mod:`.validate` (prove the checks tell right from wrong), :mod:`.demo` (the whole course
loop on a throwaway course), :mod:`.prepare_checkpoint` (what a ``prepare`` script that
trains a checkpoint does) and :mod:`.warm_script` (run such scripts in a process that has
already imported torch).
"""
