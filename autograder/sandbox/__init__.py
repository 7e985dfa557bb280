"""The grading kernel's life cycle: start it confined, run the notebook, stop it.

Owns everything between "here is a notebook" and "here is a live kernel that ran it".
A grading job talks to one object, :class:`.kernel.SandboxedKernel` (:mod:`.kernel`: its
slot, storage, start, cells, check transport and stop); the rest serves it:
:mod:`.launcher` (the start strategies, chosen once per kernel: from the fork server or a
fresh interpreter), :mod:`.forkserver` (the grader's side of the fork server),
:mod:`.isolation` (bubblewrap and the kernel's command line and environment),
:mod:`.storage` (the submission's capped working directory, ``/tmp`` and ``/dev/shm``),
:mod:`.slots` (which uid a kernel runs as, and killing what it left), :mod:`.gpu` (what
a kernel needs to see a GPU) and :mod:`.cell_notes` (how a note names a cell that failed).

What runs *inside* the sandbox, with only the standard library, lives in :mod:`.inside`,
and so does the one framing of the helper processes' pipes (:mod:`.inside.channel`).
"""
