"""The autograder's module names before it was split into packages, and where each went.

A course workspace made by an earlier ``autograder init`` names classes of this package in
its ``nbgrader_config.py`` (``autograder.feedback.FeedbackExporter``,
``autograder.formgrader_bridge.GradeWithAutograder``, ``autograder.release_steps...``), and
hidden checks and ``prepare`` scripts written then import ``autograder.checklib`` or
``autograder.prepare_checkpoint``. Those names keep working: importing one of
:data:`OLD_NAMES` gives the module that now lives under the new name, the very same
module object (``autograder.course.Course is autograder.workspace.course.Course``).

The three names an old ``nbgrader_config.py`` holds are also small packages beside this
file (``release_steps/``, ``formgrader_bridge/``, ``feedback/``): nbgrader imports them
from the workspace's root, where, with an editable install, the workspace's ``autograder/``
results folder can shadow this package's ``__init__`` and so this finder.

It is a lazy alias, nothing more: :class:`OldNames` is a finder at the end of
``sys.meta_path`` (installed by ``autograder/__init__.py``) that answers only for these
names, and only once nothing else found them. Three old names need no alias, since a
package took the name: ``autograder.cli`` (its ``main`` is the console script),
``autograder.protocol`` (re-exports the errors hidden checks import) and
``autograder.sandbox`` (nothing outside the grader imported it). New code uses the new
names; this file only grows when a module moves again, as ``autograder.sandbox.execute``
did when the grading kernel became one object (:mod:`autograder.sandbox.kernel`, where
``KernelSession`` remains a name of ``SandboxedKernel``). (The sandbox's two scripts,
limits_launcher.py and zygote.py, were never importable, so have no alias.) Standard
library only: the student lab wheel ships it.
"""

import importlib
import importlib.abc
import importlib.util
import sys

#: Old dotted module name -> the module's name now.
OLD_NAMES = {
    "autograder.course": "autograder.workspace.course",
    "autograder.assignment_spec": "autograder.workspace.assignment_spec",
    "autograder.outline": "autograder.workspace.outline",
    "autograder.nbgrader_settings": "autograder.workspace.nbgrader_settings",
    "autograder.gradebook_url": "autograder.workspace.gradebook_url",
    "autograder.roster": "autograder.workspace.roster",
    "autograder.release_steps": "autograder.workspace.release_steps",
    "autograder.formgrader_bridge": "autograder.workspace.formgrader_bridge",
    "autograder.execute": "autograder.sandbox.kernel",
    "autograder.sandbox.execute": "autograder.sandbox.kernel",
    "autograder.launcher": "autograder.sandbox.launcher",
    "autograder.forkserver": "autograder.sandbox.forkserver",
    "autograder.storage": "autograder.sandbox.storage",
    "autograder.slots": "autograder.sandbox.slots",
    "autograder.gpu": "autograder.sandbox.gpu",
    "autograder.cell_notes": "autograder.sandbox.cell_notes",
    "autograder.confine": "autograder.sandbox.inside.confine",
    "autograder.kernel_side": "autograder.protocol.kernel_side",
    "autograder.kernel_guard": "autograder.protocol.kernel_guard",
    "autograder.checklib": "autograder.protocol.checklib",
    "autograder.runner": "autograder.grading.runner",
    "autograder.scoring": "autograder.grading.scoring",
    "autograder.diagnosis": "autograder.grading.diagnosis",
    "autograder.oracle": "autograder.grading.oracle",
    "autograder.gradebook": "autograder.grading.gradebook",
    "autograder.workers": "autograder.grading.workers",
    "autograder.grade": "autograder.grading.grade",
    "autograder.sanitize": "autograder.grading.sanitize",
    "autograder.upstream": "autograder.grading.upstream",
    "autograder.report": "autograder.reports.report",
    "autograder.similarity": "autograder.reports.similarity",
    "autograder.similarity_report": "autograder.reports.similarity_report",
    "autograder.export": "autograder.reports.export",
    "autograder.check_progress": "autograder.reports.check_my_work_progress",
    "autograder.feedback": "autograder.reports.feedback_page",
    "autograder.validate": "autograder.authoring.validate",
    "autograder.demo": "autograder.authoring.demo",
    "autograder.scaffold": "autograder.authoring.scaffold",
    "autograder.submissions": "autograder.authoring.submissions",
    "autograder.prepare_checkpoint": "autograder.authoring.prepare_checkpoint",
    "autograder.warm_script": "autograder.authoring.warm_script",
    "autograder.student_build": "autograder.student.toolkit_wheel",
    "autograder.student_lab": "autograder.student.lab_wheel",
    "autograder.answer_overlap": "autograder.student.answer_overlap",
    "autograder.labext.handlers": "autograder.labext.student_side.handlers",
    "autograder.labext.shared_server": "autograder.labext.student_side.shared_server",
    "autograder.labext.service": "autograder.labext.service_side.course_lab",
    "autograder.labext.check": "autograder.labext.service_side.check_my_work",
    "autograder.labext.check_service": "autograder.labext.service_side.serve_checks",
    "autograder.labext.catalog": "autograder.labext.service_side.catalog",
    "autograder.labext.feedback": "autograder.labext.service_side.visibility",
    "autograder.labext.locate": "autograder.labext.service_side.locate",
    "autograder.arguments": "autograder.cli.options",
}


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._spec = module.__spec__
        return module

    def exec_module(self, module):
        # The import system set the old name's spec on the module: give it its own back.
        module.__spec__ = self._spec
        module.__loader__ = self._spec.loader


class OldNames(importlib.abc.MetaPathFinder):
    """Resolves each name of :data:`OLD_NAMES` to the module it became."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in OLD_NAMES:
            return None
        return importlib.util.spec_from_loader(fullname, _Alias(OLD_NAMES[fullname]))


def install() -> None:
    if not any(isinstance(finder, OldNames) for finder in sys.meta_path):
        sys.meta_path.append(OldNames())
