"""What students install: the wheels ``autograder release`` builds.

:mod:`.toolkit_wheel` (the course's toolkit without the answers), :mod:`.answer_overlap`
(does that build still hold an answer?), :mod:`.lab_wheel` (the Course panel for students'
own servers on a shared machine) and :mod:`.release` (``release --student-toolkit /
--student-lab``: build them and say what to do).
"""
