"""What instructors and students read once grading is done.

:mod:`.report` (``autograder report``: scores, causes, item analysis),
:mod:`.check_my_work_progress` (``report --checks``: where the class stands from its
"Check my work" results), :mod:`.similarity` and :mod:`.similarity_report` (near-copies),
:mod:`.export` (grades out of the gradebook) and :mod:`.feedback_page` (the HTML feedback
nbgrader's ``generate_feedback`` renders for a student).
"""
