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


# -- a student's lab on the course's own machine (`make lab LAB=student`) -----------------
#: Where `make lab LAB=student` lays out the student's lab, beside the course workspace.
STUDENT_FOLDER = PROJECT / "course-student"
#: nbgrader's screens a student has no use for: formgrader, and the instructor's tools.
INSTRUCTOR_ONLY = {
    "server": ["nbgrader.server_extensions.formgrader", "nbgrader.server_extensions.course_list"],
    "lab": ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
            "@jupyter/nbgrader:course-list"],
}


def prepare_student_folder(course, folder: Path = STUDENT_FOLDER) -> Path:
    """A folder for a JupyterLab that shows what a student sees, and no more.

    The instructor's lab is rooted in the course workspace, whose file browser holds the
    answer key (``source/``), the gradebook and every student's work. This folder holds
    the lectures (copied once, then the student's own), and receives each assignment where
    nbgrader's Fetch (or the Course panel's Open) puts it; Submit and Fetch Feedback go
    through the course's exchange. Its ``.lab/`` (hidden in the file browser, put on
    ``JUPYTER_CONFIG_PATH`` by ``make lab LAB=student``) points the Course panel at the
    workspace for checks and switches formgrader off. Returns the folder."""
    folder = Path(folder)
    (folder / "lectures").mkdir(parents=True, exist_ok=True)
    for lecture in sorted(course.path("lectures").glob("*.ipynb")):
        if not (folder / "lectures" / lecture.name).exists():  # never over the student's notes
            shutil.copyfile(lecture, folder / "lectures" / lecture.name)
    if (course.root / "README.md").is_file() and not (folder / "README.md").exists():
        shutil.copyfile(course.root / "README.md", folder / "README.md")
    from ..workspace.nbgrader_settings import COURSE_ID

    (folder / "nbgrader_config.py").write_text(
        "# A student's nbgrader settings (written by `make lab LAB=student`): where to fetch\n"
        "# and submit. Nothing here leads to the gradebook or the course's sources.\n"
        "c = get_config()  # noqa: F821\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n"
        f"c.Exchange.root = {str(course.exchange)!r}\n"
        f"c.Exchange.cache = {str(folder / '.lab' / 'nbgrader-cache')!r}\n")
    config = folder / ".lab"
    (config / "labconfig").mkdir(parents=True, exist_ok=True)
    (config / "jupyter_server_config.json").write_text(json.dumps({
        "CourseLab": {"course_dir": str(course.root)},
        "ServerApp": {"jpserver_extensions": {name: False for name in INSTRUCTOR_ONLY["server"]}},
    }, indent=1))
    (config / "labconfig" / "page_config.json").write_text(json.dumps(
        {"disabledExtensions": {name: True for name in INSTRUCTOR_ONLY["lab"]}}, indent=1))
    return folder


if __name__ == "__main__":  # make lab LAB=student
    import sys

    from ..workspace.course import Course

    print(prepare_student_folder(Course(), Path(sys.argv[1]) if len(sys.argv) > 1
                                 else STUDENT_FOLDER))
