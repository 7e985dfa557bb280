"""When the disk that holds the course workspace fills, `grade` stops with a clear error
before it corrupts anything, and a rerun after space is freed finishes the class
without counting anything twice. The workspace lives on a small tmpfs made for the test."""

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from autograder.authoring.scaffold import new_assignment
from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading import gradebook as writer
from autograder.grading.grade import grade
from autograder.limits import MiB
from autograder.reports import report
from autograder.sandbox.inside.confine import mount_tmpfs, unmount
from autograder.sandbox.storage import can_mount
from autograder.workspace.course import Course

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not can_mount(), reason="mounting a small filesystem needs root")]
BIN = Path(sys.executable).parent
STUDENTS = 6


@pytest.fixture
def small_disk_course(tmp_path):
    """A released 00-tiny course on its own 96 MiB file system, with a class handed in:
    each submission has a 1 MiB file beside its notebook (copied when recorded)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mount_tmpfs(str(disk), 96 * MiB, "0755")
    try:
        new_assignment("00-tiny", tmp_path / "assignments")
        course = Course(disk / "course", tmp_path / "assignments")
        course.init()
        course.release("00-tiny")
        spec = course.spec("00-tiny")
        made = make_class(course, spec)
        pool = [made["reference"], made["stub"], made["mutant-no-shift"]]
        write_submissions(course, spec, {f"s{i}": pool[i % 3] for i in range(STUDENTS)})
        for i in range(STUDENTS):
            course.path("submitted", f"s{i}", "00-tiny", "notes.bin").write_bytes(b"n" * MiB)
        yield course, disk
    finally:
        unmount(str(disk))


def _fill(disk: Path, leave: int) -> Path:
    """A ballast file that leaves ``leave`` bytes free on ``disk`` (0: full)."""
    ballast = disk / "ballast"
    st = os.statvfs(disk)
    size = max(0, st.f_bavail * st.f_frsize - leave)
    with open(ballast, "wb") as f:
        try:
            while size > 0:
                size -= f.write(b"\0" * min(size, 4 * MiB))
        except OSError:
            pass
    return ballast


def _cli_grade(course):
    return subprocess.run(
        [str(BIN / "autograder"), "grade", "00-tiny", "--course", str(course.root),
         "--workers", "1", "--quiet"], capture_output=True, text=True, timeout=600)


def _nothing_half_written(course):
    db = sqlite3.connect(course.root / "gradebook.db")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    db.close()
    assert not [p for p in course.root.rglob(".tmp-*")], "a temporary file was left behind"


def _class_is_complete(course):
    records = {r["student"]: r for r in report.collect(course, "00-tiny")}
    assert sorted(records) == [f"s{i}" for i in range(STUDENTS)]
    with course.gradebook() as gb:
        assert len(gb.find_assignment("00-tiny").submissions) == STUDENTS
        for i in range(STUDENTS):
            score = gb.find_submission("00-tiny", f"s{i}").code_score
            assert score == records[f"s{i}"]["score"]
            kind = ["reference", "stub", "mutant"][i % 3]
            assert score == 2.0 if kind == "reference" else score == 0.0 if kind == "stub" \
                else score < 2.0


def test_grade_stops_on_a_full_disk_and_a_rerun_finishes_the_class(small_disk_course):
    course, disk = small_disk_course
    # Room for about one record above the reserve the grader keeps free.
    ballast = _fill(disk, writer.RESERVE_BYTES + int(2.5 * MiB))
    stopped = _cli_grade(course)
    assert stopped.returncode == 2, stopped.stdout + stopped.stderr
    assert "is full" in stopped.stderr and "run the same command again" in stopped.stderr
    _nothing_half_written(course)
    recorded = sorted(course.results_dir("00-tiny").glob("*.json"))
    assert 0 < len(recorded) < STUDENTS
    ballast.unlink()
    again = _cli_grade(course)
    assert again.returncode == 0, again.stdout + again.stderr
    done = len(recorded)
    assert f"Graded {STUDENTS - done}, already graded {done}" in again.stdout
    _nothing_half_written(course)
    _class_is_complete(course)


def test_a_write_that_fails_for_lack_of_space_changes_nothing(small_disk_course, monkeypatch):
    """The check before each record can be outrun (another program fills the disk between
    the check and the write): the failed write must still leave no half-written state."""
    course, disk = small_disk_course
    monkeypatch.setattr(writer, "ensure_room", lambda course, needed=0: None)
    ballast = _fill(disk, 0)
    with pytest.raises(writer.DiskFull, match="is full"):
        grade(course, "00-tiny", workers=1, progress=False, log=lambda *a: None)
    _nothing_half_written(course)
    assert not list(course.results_dir("00-tiny").glob("*.json"))
    ballast.unlink()
    grade(course, "00-tiny", workers=1, progress=False, log=lambda *a: None)
    _class_is_complete(course)
