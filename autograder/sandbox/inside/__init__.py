"""The only files of the autograder a sandbox shows (read-only, in ``confine.INSIDE_DIR``).

:mod:`.confine` (private storage, rlimits, an unprivileged uid), :mod:`.limits_launcher`
(confine, then ``exec`` the kernel), :mod:`.zygote` (the fork server's sandboxed side) and
:mod:`.channel` (the one framing of every helper process's pipe: the zygote's, the warm
script server's and the mistake oracle's).
They import only the standard library and each other, as top-level modules (``import
confine``), since inside the sandbox nothing else of the project is visible; the grader
runs them as scripts by path, never as ``autograder.sandbox.inside.*``, except
:mod:`.confine`, which it also imports for its constants, and :mod:`.channel`, which the
grader's ends of the pipes import.
"""
