"""The course workspace and what nbgrader is told about it.

Owns the workspace on disk (:mod:`.course`: ``autograder init``'s layout, settings and
nbgrader's API), an assignment as its author wrote it (:mod:`.assignment_spec`), the
course outline (:mod:`.outline`), the settings written into ``nbgrader_config.py``
(:mod:`.nbgrader_settings`), where the gradebook lives (:mod:`.gradebook_url`), the class
list (:mod:`.roster`), the steps that make a released notebook (:mod:`.release_steps`) and
the bridge that makes formgrader's "Autograde" grade with this grader
(:mod:`.formgrader_bridge`). It imports no other layer of the autograder except the
shared contracts (:mod:`autograder.limits`).
"""
