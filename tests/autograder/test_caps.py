"""Hostile submissions that fill their storage (issue: every resource a submission can use
is capped).

One class per way a kernel starts (fork server + bubblewrap, from scratch in bubblewrap,
without bubblewrap). Each hostile student is the reference solution plus one cell that
fills /tmp, /dev/shm or its working directory, or creates 100,000 empty files. That cell
must be stopped at its cap with a note saying so, the rest of the notebook graded as
usual (full marks), the next submission must start on empty storage, and afterwards
nothing of the caps' tmpfs mounts may remain in memory, nor any scratch folder on disk.
"""

import json
import os
import re
import tempfile
from pathlib import Path

import nbformat
import pytest

from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading.grade import grade
from autograder.reports import report
from autograder.sandbox.storage import can_mount, scratch_root

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_mount(), reason="sized tmpfs mounts need root")]

# Sizes no other grading run uses, so the mounts of this test can be told apart.
CAPS = {"tmp_bytes": "40 MiB", "shm_bytes": "24 MiB", "workdir_bytes": "56 MiB"}
# The environment of each way a kernel starts, and the fills tried there. A kernel
# started from scratch (seconds each) gets the two whose mounts bubblewrap makes
# differently on that path; the working directory is the same mount on every path.
MODES = {
    "forkserver": ({}, ["fills-tmp", "fills-shm", "fills-workdir", "many-files",
                        "ignores-errors"]),
    "from-scratch": ({"AUTOGRADER_FORKSERVER": "0"}, ["fills-tmp", "fills-shm"]),
    "no-bwrap": ({"AUTOGRADER_NO_BWRAP": "1"}, ["fills-tmp", "fills-shm", "fills-workdir",
                                                 "many-files"]),
    # What a grader that is not root does: bubblewrap sizes /tmp and /dev/shm, and a
    # watchdog measures the working directory, an ordinary folder.
    "no-mounts": ({"AUTOGRADER_NO_MOUNTS": "1"}, ["fills-tmp", "fills-workdir", "many-files"]),
}
FILL = "with open({path!r}, 'wb') as f:\n    while True:\n        f.write(b'x' * 2**20)\n"
FILLS = {
    "fills-tmp": (FILL.format(path="/tmp/big"), "wrote more than 40 MiB to /tmp"),
    "fills-shm": (FILL.format(path="/dev/shm/big"), "wrote more than 24 MiB to /dev/shm"),
    "fills-workdir": (FILL.format(path="big"),
                      "wrote more than 56 MiB to the working directory"),
    "many-files": ("for i in range(100_000):\n    open(f'empty-{i}', 'w').close()\n",
                   "created more than 10,000 files in the working directory"),
    # Ignores every error and keeps writing: only the watchdog can stop it in time.
    "ignores-errors": ("import itertools\nfor i in itertools.count():\n    try:\n"
                       "        open(f'/tmp/f{i}', 'wb').write(b'x' * 2**20)\n"
                       "    except OSError:\n        pass\n", "wrote more than 40 MiB to /tmp"),
}
# Graded last with one worker: nothing an earlier submission wrote may be visible.
SEES_CLEAN = """\
import os, sys, toolkit
here = os.getcwd()
# The checkout and its venv are bound read-only wherever they live (a CI clone in /tmp too).
shared = (os.path.dirname(os.path.dirname(toolkit.__file__)), sys.prefix)
left = [os.path.join(d, f) for top in ('/tmp', '/dev/shm') for d, _, files in os.walk(top)
        if not d.startswith((here, *shared)) for f in files]
left += [f for f in os.listdir('.') if f.startswith(('big', 'empty-'))]
assert not left, f'left by an earlier submission: {left[:5]}'
"""


def _our_mounts() -> list[str]:
    """tmpfs mounts of this test's sizes, in any process's mount namespace."""
    sizes = ("size=40960k", "size=24576k", "size=57344k")
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/mountinfo") as f:
                found |= {line.split()[4] for line in f if "tmpfs" in line
                          and any(s in line for s in sizes)}
        except OSError:
            continue
    return sorted(found)


def _scratch_folders() -> set[Path]:
    """Scratch folders of grading processes (``autograder-worker-<pid>-...``)."""
    return set(Path(tempfile.gettempdir()).glob("autograder-worker-[0-9]*-*"))


def _pid_alive(folder: Path) -> bool:
    pid = folder.name.split("-")[2]
    return pid.isdigit() and Path(f"/proc/{pid}").exists()


@pytest.fixture(scope="module", params=list(MODES))
def graded(request, tiny_course):
    mode = request.param
    course = tiny_course
    spec_toml = course.assignments_dir / "00-tiny" / "assignment.toml"
    text = spec_toml.read_text()
    if "tmp_bytes = " not in text.replace("# tmp_bytes", ""):
        spec_toml.write_text("\n".join(f'{k} = "{v}"' for k, v in CAPS.items()) + "\n" + text)
    spec = course.spec("00-tiny")
    reference = make_class(course, spec)["reference"]["tiny"]

    def with_cell(source):
        nb = nbformat.from_dict(json.loads(nbformat.writes(reference)))
        nb.cells.insert(2, nbformat.v4.new_code_cell(source))
        return {"tiny": nb}

    env, chosen = MODES[mode]
    fills = {name: FILLS[name] for name in chosen}
    students = {f"{mode}-{name}": with_cell(source) for name, (source, _) in fills.items()}
    students[f"{mode}-reference"] = {"tiny": reference}
    students[f"{mode}-zz-sees-clean"] = with_cell(SEES_CLEAN)
    write_submissions(course, spec, students)
    folders_before = _scratch_folders()
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        # One worker, in this process: the students are graded in order, by one zygote.
        run = grade(course, "00-tiny", students=sorted(students), workers=1, progress=False,
                    log=lambda *a: None)
    records = {r["student"]: r for r in report.collect(course, "00-tiny")}
    left = {f for f in _scratch_folders() - folders_before if not _pid_alive(f)}
    left |= set(scratch_root().glob("submission-*"))
    return mode, fills, run, records, left


def test_reference_keeps_full_marks_and_isolation_names_the_caps(graded):
    mode, _, run, records, _ = graded
    assert records[f"{mode}-reference"]["score"] == 2.0
    if mode == "no-mounts":
        assert ("/tmp 40 MiB, /dev/shm 24 MiB (sized tmpfs); working directory 56 MiB and "
                "10,000 files (watchdog)") in run["isolation"]
    else:
        assert ("/tmp 40 MiB, /dev/shm 24 MiB, working directory 56 MiB and 10,000 files "
                "(sized tmpfs)") in run["isolation"]


def test_each_fill_is_stopped_at_its_cap_with_a_note(graded, tiny_course):
    mode, fills, _, records, _ = graded
    for name, (_, note) in fills.items():
        rec = records[f"{mode}-{name}"]
        stopped = rf"cell 3 \(`[^`]+`\) {re.escape(note)}: the cell was stopped"
        assert re.search(stopped, "\n".join(rec["notes"])), (name, rec["notes"])
        assert rec["score"] == 2.0, (name, rec["notes"], rec["failed_checks"])
        nb = nbformat.read(tiny_course.path("autograded", f"{mode}-{name}", "00-tiny",
                                            "tiny.ipynb"), as_version=4)
        shown = "".join(o.get("text", "") for o in nb.cells[3].outputs)
        assert f"[autograder] {note}: the cell was stopped" in shown


def test_the_next_submission_starts_clean(graded):
    mode, _, _, records, _ = graded
    rec = records[f"{mode}-zz-sees-clean"]
    assert rec["score"] == 2.0 and not any("raised" in n for n in rec["notes"]), rec["notes"]


def test_memory_and_disk_are_given_back(graded):
    *_, left = graded
    assert _our_mounts() == []  # no tmpfs of these caps holds memory, in any namespace
    assert not left  # no working copy, no scratch folder of a finished grader stays on disk
