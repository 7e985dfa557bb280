"""The Course panel for students' own Jupyter servers on a shared machine.

On a JupyterHub every student's Jupyter server runs as that student, so it may hold
nothing a student must not read: not the toolkit's answers (students install the
student toolkit instead), not the hidden checks, not the gradebook. ``autograder
release --student-lab`` builds the one piece of the course's JupyterLab extension such a
server needs, a wheel named ``transformers-course-lab`` that holds:

* the built frontend (the Course panel and the "Check my work" button), where
  JupyterLab looks for prebuilt extensions (``share/jupyter/labextensions/``);
* the server extension's switch (``etc/jupyter/jupyter_server_config.d/``) and the
  lab's defaults without the "Jupyter news" prompt (``share/jupyter/lab/settings/``);
* the part of the server extension that sends a notebook to ``autograder
  serve-checks`` and shows its answer (:mod:`autograder.labext.student_side.shared_server`).

No grading pipeline, no checks, no toolkit: a server with this wheel cannot check a
notebook itself, it asks the service named by ``c.CheckService.socket`` or ``url``.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

from ..workspace.course import CourseError
from .toolkit_wheel import PYPROJECT_HEAD, pip_wheel, student_requirements, wheel_version

PROJECT = Path(__file__).resolve().parents[2]
LABEXT = PROJECT / "autograder" / "labext"
DISTRIBUTION = "transformers-course-lab"
#: The modules of the server extension's student side, and all they import of the project.
CLIENT_MODULES = ("autograder/__init__.py", "autograder/old_names.py",
                  "autograder/labext/__init__.py", "autograder/labext/handin.py",
                  "autograder/labext/student_side/__init__.py",
                  "autograder/labext/student_side/handlers.py",
                  "autograder/labext/student_side/shared_server.py")
#: Where each of the extension's other files goes in the environment it is installed in.
DATA_DIRS = {
    LABEXT / "labextension": "share/jupyter/labextensions/transformers-course-lab",
    LABEXT / "jupyter-config" / "autograder-labext.json": "etc/jupyter/jupyter_server_config.d",
    LABEXT / "jupyter-config" / "overrides.json": "share/jupyter/lab/settings",
}


def build_student_lab(out_dir: Path) -> Path:
    """Build the wheel into ``out_dir`` (replacing an earlier one); returns its path."""
    if not (LABEXT / "labextension" / "package.json").is_file():
        raise CourseError("the JupyterLab extension is not built: run `make` in the project "
                          "(it needs Node.js 18+), then build the student lab again")
    with tempfile.TemporaryDirectory(prefix="student-lab-") as tmp:
        project = Path(tmp)
        for module in CLIENT_MODULES:
            (project / module).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(PROJECT / module, project / module)
        data_files: dict[str, list[str]] = {}
        for source, target in DATA_DIRS.items():
            files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() \
                else [source]
            for file in files:
                staged = project / "data" / target / (
                    file.relative_to(source) if source.is_dir() else file.name)
                staged.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(file, staged)
                folder = staged.parent.relative_to(project / "data").as_posix()
                data_files.setdefault(folder, []).append(staged.relative_to(project).as_posix())
        requirements = student_requirements(("jupyterlab",))
        (project / "pyproject.toml").write_text(_PYPROJECT.format(
            name=DISTRIBUTION, version=wheel_version(project, requirements, "lab"),
            dependencies=", ".join(map(json.dumps, requirements)),
            data_files="\n".join(f"{json.dumps(folder)} = {json.dumps(files)}"
                                 for folder, files in sorted(data_files.items()))))
        return pip_wheel(project, Path(out_dir), DISTRIBUTION, "student lab")


_PYPROJECT = PYPROJECT_HEAD.replace("{description}", "The course's JupyterLab panel for "
                                    "students' servers (checks: serve-checks)") + """
[tool.setuptools]
packages = ["autograder", "autograder.labext", "autograder.labext.student_side"]

[tool.setuptools.data-files]
{data_files}
"""
