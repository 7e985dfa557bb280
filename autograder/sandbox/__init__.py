"""The grading kernel's life cycle: start it confined, run the notebook, stop it.

Owns everything between "here is a notebook" and "here is a live kernel that ran it":
:mod:`.execute` (the kernel session a grading job holds), :mod:`.launcher` (starting and
stopping one kernel: from scratch or from the fork server), :mod:`.forkserver` (the grader's
side of the fork server), :mod:`.isolation` (bubblewrap and the kernel's command line),
:mod:`.storage` (the submission's capped working directory, ``/tmp`` and ``/dev/shm``),
:mod:`.slots` (which uid a kernel runs as), :mod:`.gpu` (what a kernel needs to see a GPU)
and :mod:`.cell_notes` (how a note names a cell that failed).

What runs *inside* the sandbox, with only the standard library, lives in :mod:`.inside`.
"""
