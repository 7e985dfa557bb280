"""What nbgrader is told about a course workspace, in one list.

nbgrader reads its settings twice over: its own commands and formgrader read the
workspace's ``nbgrader_config.py``; the autograder calls nbgrader's API in process. Both
come from :func:`settings`, so the two can never disagree.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

COURSE_ID = "transformers-course"
#: A template base dir whose classic/mathjax.html.j2 (nbconvert's ``mathjax`` macro, found
#: before base/'s) has formgrader load MathJax from the server itself.
FORMGRADER_MATHS = Path(__file__).resolve().parent / "formgrader-maths"

# The classes nbgrader loads by name. Written here as names, not imported, so that reading
# a workspace's settings imports neither nbconvert nor the feedback page; a test imports
# each name. A workspace made before this layout names the classes by their old modules
# (``autograder.reports.feedback_page``...), which autograder/old_names.py still resolves.

#: ``GenerateAssignment.preprocessors``: nbgrader's own list with ours after ClearSolutions
#: (the checksums and the gradebook's copies of the cells are computed after it).
GENERATE_ASSIGNMENT_PREPROCESSORS = [
    "nbgrader.preprocessors.IncludeHeaderFooter",
    "nbgrader.preprocessors.InstantiateTests",
    "nbgrader.preprocessors.LockCells",
    "nbgrader.preprocessors.ClearSolutions",
    "autograder.workspace.release_steps.PrepareStudentNotebook",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.CheckCellMetadata",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.SaveCells",
    "nbgrader.preprocessors.ClearHiddenTests",
    "nbgrader.preprocessors.ClearMarkScheme",
    "nbgrader.preprocessors.ComputeChecksums",
    "nbgrader.preprocessors.CheckCellMetadata",
]

#: The grading step of ``nbgrader autograde`` in a course workspace.
AUTOGRADE_PREPROCESSORS = ["autograder.workspace.formgrader_bridge.GradeWithAutograder"]

#: ``GenerateFeedback.exporter_class``.
FEEDBACK_EXPORTER = "autograder.reports.feedback_page.FeedbackExporter"
#: ``GenerateFeedback.preprocessors``: nbgrader's, then ours.
GENERATE_FEEDBACK_PREPROCESSORS = [
    "nbgrader.preprocessors.GetGrades",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "autograder.reports.feedback_page.CourseFeedback",
]

HEADER = ("# nbgrader configuration for this course workspace (written by `autograder init`).\n"
          "c = get_config()  # noqa: F821\n")


def settings(course) -> list[tuple[str, str, object]]:
    """``(why, "Section.name", value)`` for each setting (``why``: a comment, or "")."""
    return [
        ("", "CourseDirectory.root", str(course.root)),
        ("", "CourseDirectory.course_id", COURSE_ID),
        ("", "CourseDirectory.db_url", course.db_url),
        ("", "ClearSolutions.code_stub", {"python": "# YOUR CODE HERE\n"
                                                    "raise NotImplementedError()"}),
        ("", "ClearSolutions.text_stub", "YOUR ANSWER HERE"),
        ("Stubs that name their exercise, and Run All that reaches the end "
         "(autograder.workspace.release_steps).", "GenerateAssignment.preprocessors",
         GENERATE_ASSIGNMENT_PREPROCESSORS),
        ("Where students fetch and submit (inside the workspace unless `autograder init "
         "--exchange` put it elsewhere).", "Exchange.root", str(course.exchange)),
        ("What this workspace's students submitted (the Assignments tab's \"Submitted\" "
         "list) is remembered here, not in ~/.local/share/jupyter, which every course would "
         "share.", "Exchange.cache", str(course.exchange_cache)),
        ("Formgrader's \"Autograde\" and `nbgrader autograde` grade with `autograder grade` "
         "(sandbox, hidden checks), never with plain nbgrader "
         "(autograder.workspace.formgrader_bridge).",
         "Autograde.autograde_preprocessors", AUTOGRADE_PREPROCESSORS),
        ("Feedback pages name each exercise, show automatic and written points apart, draw "
         "maths offline (autograder.reports.feedback_page).", "GenerateFeedback.exporter_class",
         FEEDBACK_EXPORTER),
        ("", "GenerateFeedback.preprocessors", GENERATE_FEEDBACK_PREPROCESSORS),
        ("Formgrader's pages draw maths with the MathJax this Jupyter server serves "
         "(jupyter-server-mathjax), not one from the network.",
         "HTMLExporter.extra_template_basedirs", [str(FORMGRADER_MATHS), _formgrader_templates()]),
    ]


def _formgrader_templates() -> str:
    """Formgrader's own templates, which it lists as its only base dir (kept after ours)."""
    import nbgrader

    return str(Path(nbgrader.__file__).parent / "server_extensions" / "formgrader" / "templates")


def config_file(course) -> str:
    """The text of the workspace's ``nbgrader_config.py``."""
    lines = [HEADER]
    for why, name, value in settings(course):
        lines += [f"# {line}\n" for line in textwrap.wrap(why, 86)]
        lines.append(f"c.{name} = {value!r}\n")
    return "".join(lines)


def config(course):
    """The same settings as a traitlets ``Config`` for nbgrader's API."""
    from traitlets.config import Config

    config = Config()
    for _why, name, value in settings(course):
        section, key = name.split(".")
        setattr(getattr(config, section), key, value)
    return config
