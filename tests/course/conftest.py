"""A Jupyter kernel whose ``toolkit`` is the student wheel, for the tests that run the
course's notebooks as a student of a course that installs it.

By default the kernel borrows torch, ipykernel and the rest from the project's venv, and
the wheel's package is staged into the kernel's site-packages without building the wheel. To
try the wheel as a student installs it, on another Python, point ``STUDENT_VENV`` at a
venv of that Python into which the wheel's requirements and ipykernel are installed
(``python3.10 -m venv v && v/bin/pip install <wheel> ipykernel``): each case installs its
wheel there (``--no-deps``, so nothing else changes) and the kernel runs that venv's
Python, e.g. ``STUDENT_VENV=v pytest tests/course/test_assignments_student_toolkit.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from autograder.student.toolkit_wheel import build_student_toolkit, stage_student_toolkit
from autograder.workspace.assistant_rules import DEFAULT_RULES, WHEEL_FILE_NAMES, write_rules

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def student_kernel(tmp_path_factory, monkeypatch_module):
    """``install(unlocked)``: put the student toolkit with the assignments ``unlocked`` (the
    rest locked) in this module's virtual environment (replacing the previous one, unless
    it was made with the same ``unlocked``) and return that environment's
    ``site-packages``. The package is staged there as the wheel holds it; with
    ``STUDENT_VENV`` the wheel itself is built and installed by pip.

    The environment's kernelspec is ``student``, found through ``JUPYTER_PATH`` (set for the
    module). Its Python imports the wheel's ``toolkit``; ipykernel, torch and the rest come
    from the project's venv through a .pth path line, which loads no editable-install
    finder.
    """
    root = tmp_path_factory.mktemp("student")
    own = os.environ.get("STUDENT_VENV")
    venv = Path(own).absolute() if own else root / "venv"
    if not own:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip())
    if not own:
        (site / "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    spec = root / "jupyter" / "kernels" / "student"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "student toolkit", "language": "python"}))
    monkeypatch_module.setenv("JUPYTER_PATH", str(root / "jupyter"))

    installed = None  # the ``unlocked`` of the wheel in place
    built: dict[tuple, Path] = {}  # unlocked -> its wheel, built once per module

    def install(unlocked=()) -> Path:
        nonlocal installed
        if installed != list(unlocked) and not own:
            # What the wheel would install, staged straight into site-packages: building
            # and pip-installing a wheel per case cost about ten seconds each, and the
            # wheel's packaging has tests of its own (tests/autograder/test_student_build.py).
            shutil.rmtree(site / "toolkit", ignore_errors=True)
            stage_student_toolkit(site / "toolkit", ROOT / "assignments", list(unlocked))
            write_rules(site / "toolkit", DEFAULT_RULES, WHEEL_FILE_NAMES)
            installed = list(unlocked)
        elif installed != list(unlocked):
            wheel = built.get(tuple(unlocked))
            if wheel is None:
                wheel = built[tuple(unlocked)] = build_student_toolkit(
                    root / f"wheel-{len(built)}", ROOT / "assignments", list(unlocked))
            subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                            "--quiet", "--force-reinstall", "--no-deps", "--no-index",
                            str(wheel)], check=True)
            installed = list(unlocked)
        return site

    return install


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.fixture
def notebook_env(monkeypatch):
    """What a student's JupyterLab kernel sees: widgets drawn (not headless), inline
    figures, the project's own PYTHONPATH gone."""
    monkeypatch.delenv("TOOLKIT_HEADLESS", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
