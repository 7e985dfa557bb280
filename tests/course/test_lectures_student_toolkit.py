"""A lecture comes before its assignment, so in a course that installs the student toolkit
(``autograder release --student-toolkit``) it meets that assignment's exercises as stubs.
Run All must still reach the end: each cell that needs an exercise says so in one line
(``‖ This cell needs ...``, from ``toolkit.notebook.friendly_errors``), widgets say what
they need, and nothing else fails.

The wheel is built with every assignment locked (the strictest case: lecture 01 before
anything is unlocked) and installed in a fresh virtual environment whose own ``toolkit``
is the wheel's; a kernel of that environment runs each lecture as ``autograder init``
builds it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from nbclient import NotebookClient

from autograder.outline import COURSE_FILE, lecture_notebook, load_outline
from autograder.student_build import build_student_toolkit
from toolkit.notebook import MARK

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
OUTLINE = load_outline(COURSE_FILE)
LECTURES = list(OUTLINE.lectures)


@pytest.fixture(scope="module")
def student_kernel(tmp_path_factory):
    """A kernelspec ``student`` (under a JUPYTER_PATH of its own) whose Python imports the
    student wheel's ``toolkit``; ipykernel, torch and the rest come from the project's venv
    through a .pth path line, which loads no editable-install finder."""
    root = tmp_path_factory.mktemp("student")
    wheel = build_student_toolkit(root / "wheel", ROOT / "assignments")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "project-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--no-index", str(wheel)], check=True)
    spec = root / "jupyter" / "kernels" / "student"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "student toolkit", "language": "python"}))
    return root / "jupyter", Path(site)


@pytest.mark.parametrize("lecture", LECTURES, ids=[lecture.stem for lecture in LECTURES])
def test_run_all_reaches_the_end_with_one_line_per_missing_exercise(
    lecture, student_kernel, tmp_path, monkeypatch
):
    jupyter_path, site = student_kernel
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter_path))
    monkeypatch.delenv("TOOLKIT_HEADLESS", raising=False)
    monkeypatch.delenv("PYTHONPATH", raising=False)
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    nb = lecture_notebook(OUTLINE.lecture_source(lecture))
    nb.cells.append(nb.cells[0].__class__(  # a last cell: which toolkit the kernel imported
        cell_type="code", metadata={}, outputs=[], execution_count=None,
        source="import toolkit\nprint(toolkit.__file__)"))
    NotebookClient(nb, timeout=180, kernel_name="student",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    cells = [c for c in nb.cells if c.cell_type == "code"]
    printed = "".join(o.get("text", "") for o in cells[-1].outputs if o.output_type == "stream")
    assert Path(printed.strip()).is_relative_to(site), printed  # the wheel's toolkit
    errors = [(i, o) for i, c in enumerate(cells) for o in c.outputs if o.output_type == "error"]
    loud = [f"code cell {i}: {o.ename}: {o.evalue}" for i, o in errors
            if not (len(o.traceback) == 1 and o.traceback[0].startswith(MARK))]
    assert not loud, f"{lecture.notebook} under the student toolkit:\n" + "\n".join(loud)
