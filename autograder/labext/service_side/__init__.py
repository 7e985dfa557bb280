"""The half of the server extension that holds the course and runs "Check my work".

:mod:`.course_lab` (``CourseLab``: one per server; queues, caches and records checks),
:mod:`.check_my_work` (one saved notebook through the grading pipeline, recording
nothing), :mod:`.serve_checks` (``autograder serve-checks``: this side as a service of its
own for a shared server), :mod:`.catalog` (what the Course panel lists), :mod:`.locate`
(which assignment a notebook is) and :mod:`.visibility` (a result cut to what the
instructor lets students see). It runs where students cannot read: in the laptop's own
server, or in the service.
"""
