"""Hostile and broken submissions (issue: grade a whole class safely).

Every case is one student of one class, graded together in parallel. Each must be
graded without stopping the run, get a fair score and a clear note, and leave the
other students' scores and the gradebook untouched.
"""

import json
import os

import nbformat
import pytest

from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading.grade import grade
from autograder.reports import report

pytestmark = pytest.mark.slow



def _as_nbformat_3(nb) -> bytes:
    """The same notebook in the old nbformat 3 layout (worksheets, ``input``)."""
    cells = []
    for cell in nb.cells:
        if cell.cell_type == "code":
            cells.append({"cell_type": "code", "input": cell.source, "language": "python",
                          "outputs": [], "metadata": dict(cell.metadata), "collapsed": False})
        else:
            cells.append({"cell_type": cell.cell_type, "source": cell.source,
                          "metadata": dict(cell.metadata)})
    return json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {"name": "tiny"},
                       "worksheets": [{"cells": cells, "metadata": {}}]}).encode()


def _cases(course):
    spec = course.spec("00-tiny")
    made = make_class(course, spec)
    reference = made["reference"]["tiny"]
    secrets = [course.root / "gradebook.db", spec.checks_dir() / "test_softmax.py",
               course.path("submitted", "reference", "00-tiny", "tiny.ipynb"),
               course.root / "nbgrader_config.py"]

    def with_cells(*sources, at=None):
        nb = nbformat.from_dict(json.loads(nbformat.writes(reference)))
        for source in sources:
            cell = nbformat.v4.new_code_cell(source)
            nb.cells.insert(at if at is not None else len(nb.cells), cell)
        return {"tiny": nb}

    def returns(expr):
        return with_cells(f"def softmax(x):\n    return {expr}\n")

    paths = [str(p) for p in secrets]
    probe = (f"import os\nfor p in {paths!r}:\n"
             "    print('VISIBLE' if os.path.exists(p) else 'hidden', p)")
    return {
        "reference": made["reference"],
        "memory-bomb": with_cells(
            "import torch\nblocks = []\nwhile True:\n    blocks.append(torch.ones(2**27))", at=2),
        # Forks until the process limit stops it; every copy then stays alive.
        "fork-bomb": with_cells(
            "import os, time\nkernel = os.getpid()\nfor _ in range(12):\n    try:\n"
            "        os.fork()\n    except OSError:\n        break\n"
            "if os.getpid() != kernel:\n    time.sleep(120)\n    os._exit(0)\n", at=2),
        "kills-parent": with_cells(
            "import os, signal\ntry:\n    os.kill(os.getppid(), signal.SIGKILL)\n"
            "except OSError as e:\n    print('refused', e)", at=2),
        "reads-secrets": with_cells(probe),
        "writes-outside": with_cells(
            f"for p in [{str(course.root / 'evil.txt')!r}, '/etc/evil.txt', '/usr/evil.txt']:\n"
            "    try:\n        open(p, 'w').write('x')\n        print('WROTE', p)\n"
            "    except OSError as e:\n        print('refused', p, e)"),
        "opens-network": with_cells(
            "import socket\nfor host in ['127.0.0.1', '10.0.0.1', '1.1.1.1']:\n    try:\n"
            "        socket.create_connection((host, 80), timeout=2)\n"
            "        print('CONNECTED', host)\n"
            "    except OSError as e:\n        print('refused', host, e)"),
        # Wrong values, plus every patch that might make them look right.
        "patches-builtins": with_cells(
            "def softmax(x):\n    return x\n",
            "import builtins, json, torch\n"
            "torch.allclose = lambda *a, **k: True\ntorch.Tensor.__eq__ = lambda *a: True\n"
            "_dump = json.dump\njson.dump = lambda obj, f, **k: _dump({'ok': True, 'result': "
            "{'type': 'float', 'value': 1.0}}, f)\n"
            "builtins.isinstance = lambda *a: True"),
        "returns-list": returns("x.tolist()"),
        "returns-string": returns("'the answer'"),
        "returns-wrong-dtype": returns("(x.exp() / x.exp().sum(-1, keepdim=True)).to(torch.int64)"),
        "returns-wrong-shape": returns("(x.exp() / x.exp().sum(-1, keepdim=True)).flatten()"),
        "returns-nan": returns("x * float('nan')"),
        "returns-enormous": returns("torch.zeros(2**29)"),
        "huge-output": with_cells("for _ in range(20000):\n    print('spam' * 100)"),
        "stateful": with_cells(
            "import os\nmarkers = ['/tmp/was-here', os.path.expanduser('~/was-here'), 'was-here']\n"
            "seen = any(os.path.exists(m) for m in markers)\n"
            "for m in markers:\n    open(m, 'w').close()\n"
            "if not seen:\n    def softmax(x):\n"
            "        raise RuntimeError('only works the second time')"),
        "nbformat-3": {"tiny": _as_nbformat_3(reference)},
        "missing-notebook": {},
    }


@pytest.fixture(scope="module")
def hostile(tiny_course):
    spec = tiny_course.spec("00-tiny")
    cases = _cases(tiny_course)
    write_submissions(tiny_course, spec, {k: v for k, v in cases.items() if v})
    empty = tiny_course.path("submitted", "missing-notebook", "00-tiny")
    empty.mkdir(parents=True)
    (empty / "notes ünïcødé 文件 " .strip()).with_suffix(".txt").write_text("extra file")
    (empty / ("long-" + "n" * 200 + ".txt")).write_text("extra file")
    run = grade(tiny_course, "00-tiny", workers=2, progress=False, cell_timeout=8,
                log=lambda *a: None)
    records = {r["student"]: r for r in report.collect(tiny_course, "00-tiny")}
    return tiny_course, run, records


def _outputs(course, student):
    nb = nbformat.read(course.path("autograded", student, "00-tiny", "tiny.ipynb"), as_version=4)
    return "\n".join(str(o.get("text", "")) + str(o.get("evalue", ""))
                     for c in nb.cells for o in c.get("outputs", []))


def test_every_case_is_graded_and_the_reference_is_unharmed(hostile):
    _, run, records = hostile
    assert sorted(run["graded"]) == sorted(records)
    assert records["reference"]["score"] == 2.0


@pytest.mark.parametrize("student", ["memory-bomb", "fork-bomb", "kills-parent", "reads-secrets",
                                     "writes-outside", "opens-network", "huge-output",
                                     "nbformat-3"])
def test_harmless_mischief_keeps_full_marks(hostile, student):
    assert hostile[2][student]["score"] == 2.0, hostile[2][student]["notes"]


def test_memory_bomb_is_stopped_and_reported(hostile):
    notes = " ".join(hostile[2]["memory-bomb"]["notes"])
    # The allocator fails at the address-space cap (MemoryError/RuntimeError), or the
    # cell time limit stops it first on a slow machine: either way it is reported.
    assert "Error" in notes or "time limit" in notes


def test_fork_bomb_children_are_killed(hostile):
    assert any("processes" in n for n in hostile[2]["fork-bomb"]["notes"])


def test_secrets_are_not_visible_in_the_sandbox(hostile):
    course = hostile[0]
    text = _outputs(course, "reads-secrets")
    assert "hidden" in text and "VISIBLE" not in text


def test_nothing_is_written_outside_the_sandbox(hostile):
    course = hostile[0]
    assert "WROTE" not in _outputs(course, "writes-outside")
    assert not (course.root / "evil.txt").exists()


def test_no_network(hostile):
    text = _outputs(hostile[0], "opens-network")
    assert "CONNECTED" not in text and "refused" in text


def test_patching_builtins_and_protocol_earns_nothing(hostile):
    assert hostile[2]["patches-builtins"]["score"] == 0.0


@pytest.mark.parametrize("student,expected", [
    ("returns-list", "torch.Tensor"), ("returns-string", "torch.Tensor"),
    ("returns-wrong-dtype", "dtype"), ("returns-wrong-shape", "shape"),
    ("returns-nan", "NaN"), ("returns-enormous", ""),
])
def test_bad_return_values_fail_with_a_clear_message(hostile, student, expected):
    rec = hostile[2][student]
    assert rec["score"] == 0.0
    assert all(expected in f["message"] for f in rec["failed_checks"]), rec["failed_checks"]


def test_huge_output_is_truncated(hostile):
    course = hostile[0]
    path = course.path("autograded", "huge-output", "00-tiny", "tiny.ipynb")
    assert path.stat().st_size < 2 * 2**20
    assert "truncated" in path.read_text()


def test_no_state_survives_between_submissions(hostile):
    course = hostile[0]
    assert hostile[2]["stateful"]["score"] == 0.0
    again = grade(course, "00-tiny", students=["stateful"], force=True, progress=False,
                  log=lambda *a: None)
    assert again["graded"] == ["stateful"]
    assert report.collect(course, "00-tiny") and {
        r["student"]: r for r in report.collect(course, "00-tiny")}["stateful"]["score"] == 0.0


def test_missing_notebook_with_odd_extra_files(hostile):
    rec = hostile[2]["missing-notebook"]
    assert rec["score"] == 0.0 and any("missing" in n for n in rec["notes"])


def test_gradebook_matches_every_record(hostile):
    course, _, records = hostile
    with course.gradebook() as gb:
        for student, rec in records.items():
            assert gb.find_submission("00-tiny", student).code_score == pytest.approx(rec["score"])
    assert os.path.getsize(course.root / "gradebook.db") > 0
