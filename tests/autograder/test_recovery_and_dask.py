"""Nothing is lost when grading is interrupted, and the same grading runs on Dask."""

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from autograder.authoring.submissions import make_class, write_submissions
from autograder.grading.grade import grade
from autograder.reports import report
from autograder.sandbox.isolation import bwrap_path

pytestmark = pytest.mark.slow
BIN = Path(sys.executable).parent


def _class_of(course, n):
    spec = course.spec("00-tiny")
    made = make_class(course, spec)
    pool = [made["reference"], made["stub"], made["mutant-no-shift"]]
    students = {f"s{i:02d}": pool[i % 3] for i in range(n)}
    write_submissions(course, spec, students)
    return students


def _results(course):
    return sorted(course.results_dir("00-tiny").glob("*.json"))


def _grade_cli(course, *extra, output=subprocess.PIPE):
    return subprocess.Popen(
        [str(BIN / "autograder"), "grade", "00-tiny", "--course", str(course.root), "--workers",
         "2", "--quiet", *extra],
        stdout=output, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _grading_on_both_workers(course, log):
    """``autograder grade --force`` writing to the file ``log`` (workers that outlive the
    grader would hold a pipe open forever), once a result is in and both workers run."""
    with open(log, "w") as sink:
        proc = _grade_cli(course, "--force", output=sink)
    start = time.monotonic()
    while len(_results(course)) < 1 or len(_workers(proc.pid)) < 2:
        assert proc.poll() is None, log.read_text()
        assert time.monotonic() - start < 300, "grading made no progress"
        time.sleep(0.2)
    return proc


def _stop_after_results(proc, course, count, sig, deadline=300):
    start = time.monotonic()
    while len(_results(course)) < count:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() - start < deadline, "grading made no progress"
        time.sleep(0.2)
    os.killpg(proc.pid, sig)
    return proc.wait(timeout=60), proc.stdout.read()


def test_interrupted_grading_finishes_the_rest_and_counts_nothing_twice(tiny_course):
    course = tiny_course
    students = _class_of(course, 8)
    # Ctrl-C after the first result: a clean stop with a message.
    code, out = _stop_after_results(_grade_cli(course), course, 1, signal.SIGINT)
    assert code != 0 and len(_results(course)) < 8
    # A killed process (no chance to clean up) after two more.
    done = len(_results(course))
    code, _ = _stop_after_results(_grade_cli(course), course, done + 2, signal.SIGKILL)
    assert code == -signal.SIGKILL
    finished = {p.name: p.stat().st_mtime_ns for p in _results(course)}
    assert len(finished) < 8
    # Running the same command again grades only what is left.
    proc = _grade_cli(course)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    assert f"Graded {8 - len(finished)}, already graded {len(finished)}" in out
    for path in _results(course):
        if path.name in finished:
            assert path.stat().st_mtime_ns == finished[path.name], f"{path.name} was graded again"
    records = {r["student"]: r for r in report.collect(course, "00-tiny")}
    assert set(students) <= set(records)
    expected = {"reference": 2.0, "stub": 0.0}
    with course.gradebook() as gb:
        assert len(gb.find_assignment("00-tiny").submissions) == len(records)
        for i, student in enumerate(sorted(students)):
            score = gb.find_submission("00-tiny", student).code_score
            assert score == records[student]["score"]
            kind = ["reference", "stub", "mutant"][i % 3]
            if kind in expected:
                assert score == expected[kind], student


def _children(pid):
    """Processes whose parent is ``pid`` (from /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _workers(pid):
    """The grading workers of the grader ``pid``: the children of its multiprocessing fork
    server (autograder.grading.workers.worker_pool)."""
    servers = [child for child in _children(pid)
               if b"forkserver" in Path(f"/proc/{child}/cmdline").read_bytes()]
    return set().union(*map(_children, servers))


def _descendants(pids):
    """Every process below ``pids``."""
    found, todo = set(), set(pids)
    while todo:
        found |= (todo := set().union(*map(_children, todo)) - found)
    return found


def _running(pids):
    """Those of ``pids`` still running (a zombie has finished)."""
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _scratch_of(pids):
    tmp = Path(tempfile.gettempdir())
    return {p for pid in pids for p in tmp.glob(f"autograder-*-{pid}-*")}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_grader_stopped_alone_takes_its_workers_with_it(tiny_course, tmp_path, sig):
    """``kill PID`` (a scheduler's time limit) or SIGKILL reaches the grader only, not its
    workers: they must stop as well, clean up their kernels, mounts and scratch folders, and
    the next run must finish the class."""
    course = tiny_course
    _class_of(course, 8)
    log = tmp_path / "grade.log"
    proc = _grading_on_both_workers(course, log)
    workers = _workers(proc.pid)
    # The pool's fork server, the sandboxes, the fork servers of kernels, the mistake oracles.
    helpers = _descendants({proc.pid}) - workers
    os.kill(proc.pid, sig)  # the grader alone, not its process group
    code = proc.wait(timeout=60)
    deadline = time.monotonic() + 60
    while _running(workers | helpers) and time.monotonic() < deadline:
        time.sleep(0.2)
    orphans = _running(workers | helpers)
    for pid in orphans:  # leave no process behind, even when failing
        os.kill(pid, signal.SIGKILL)
    assert not orphans, "workers outlived the grader"
    if sig == signal.SIGTERM:
        out = log.read_text()
        assert code == 128 + signal.SIGTERM, out
        assert "stopped by SIGTERM; run the same command again" in out
    assert not _scratch_of(workers | helpers), "a stopped worker left its scratch folder"
    with open("/proc/self/mountinfo") as f:
        assert not [line for line in f if any(f"-{w}-" in line for w in workers)]
    proc = _grade_cli(course)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0 and len(_results(course)) == 8, out


def test_a_worker_that_dies_costs_no_student_anything(tiny_course, tmp_path):
    """A grading worker killed mid-run (the out-of-memory killer picks it, an admin's
    kill): its submissions are not the students' fault, so nothing is recorded for them
    (no zero, no 'grading error'), the grader says so and exits with an error, and the next
    run grades them."""
    course = tiny_course
    students = _class_of(course, 8)
    for path in _results(course):  # so the first result waited for is this run's
        path.unlink()
    log = tmp_path / "grade.log"
    proc = _grading_on_both_workers(course, log)
    os.kill(min(_workers(proc.pid)), signal.SIGKILL)  # one worker, not the grader
    assert proc.wait(timeout=120) == 2, log.read_text()
    out = log.read_text()
    assert "were not graded because a grading worker stopped" in out, out
    done = {p.name for p in _results(course)}
    assert len(done) < 8
    for path in _results(course):
        assert "grading error" not in path.read_text(), path.name
    proc = _grade_cli(course)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    assert f"Graded {8 - len(done)}, already graded {len(done)}" in out
    assert {p.name for p in _results(course)} == {f"{s}.json" for s in students}


@pytest.fixture
def dask_cluster(dask_cluster_in):
    """A real scheduler and two workers, separate processes, on loopback."""
    with dask_cluster_in() as address:
        yield address


def test_grading_through_a_dask_cluster(tiny_course, dask_cluster):
    course = tiny_course
    spec = course.spec("00-tiny")
    made = make_class(course, spec)
    write_submissions(course, spec, {"dask-ref": made["reference"], "dask-stub": made["stub"],
                                     "dask-mutant": made["mutant-no-shift"]})
    run = grade(course, "00-tiny", students=["dask-ref", "dask-stub", "dask-mutant"],
                scheduler=dask_cluster, progress=False, log=lambda *a: None)
    assert sorted(run["graded"]) == ["dask-mutant", "dask-ref", "dask-stub"]
    records = {r["student"]: r for r in report.collect(course, "00-tiny")}
    assert records["dask-ref"]["score"] == 2.0
    assert records["dask-stub"]["score"] == 0.0
    assert records["dask-mutant"]["score"] < 2.0


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap hides the course here")
def test_a_worker_that_cannot_see_the_course_costs_no_student_anything(tiny_course,
                                                                       dask_cluster_in):
    """A Dask worker on a machine without the grader's files (here: one whose view of the
    course folder is an empty tmpfs) grades nothing and records nothing."""
    from autograder.workspace.course import CourseError

    course = tiny_course
    spec = course.spec("00-tiny")
    write_submissions(course, spec, {"blind": make_class(course, spec)["reference"]})
    blind = [bwrap_path(), "--dev-bind", "/", "/", "--tmpfs", str(course.root.parent)]
    with dask_cluster_in(workers=1, wrap=blind) as address:
        with pytest.raises(CourseError, match="cannot see .*same paths as the grader"):
            grade(course, "00-tiny", students=["blind"], scheduler=address, progress=False,
                  log=lambda *a: None)
    assert not course.results_dir("00-tiny").joinpath("blind.json").exists()


def test_a_scheduler_that_cannot_be_reached_is_named_and_nothing_is_recorded(tiny_course):
    from autograder.workspace.course import CourseError

    course = tiny_course
    spec = course.spec("00-tiny")
    write_submissions(course, spec, {"no-cluster": make_class(course, spec)["reference"]})
    with pytest.raises(CourseError, match="--scheduler nonsense: no Dask scheduler reached"):
        grade(course, "00-tiny", students=["no-cluster"], scheduler="nonsense", progress=False,
              log=lambda *a: None)
    assert not course.results_dir("00-tiny").joinpath("no-cluster.json").exists()
    # Without --scheduler the same command grades it.
    assert grade(course, "00-tiny", students=["no-cluster"], workers=1, progress=False,
                 log=lambda *a: None)["graded"] == ["no-cluster"]


def test_a_second_grader_of_the_same_assignment_is_refused_until_the_first_ends(tiny_course):
    import fcntl

    from autograder.workspace.course import CourseError

    course = tiny_course
    lock_file = course.results_dir("00-tiny") / ".grading.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    # A first grader (a subprocess holding the lock, as `autograder grade` does).
    first = subprocess.Popen(
        [sys.executable, "-c", "import fcntl, sys, time\n"
         f"f = open({str(lock_file)!r}, 'a+'); fcntl.flock(f, fcntl.LOCK_EX)\n"
         "f.seek(0); f.truncate(); f.write('process 1234 on grader-1'); f.flush()\n"
         "print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(CourseError, match=r"00-tiny is being graded already \(process 1234 "
                                              r"on grader-1\)"):
            grade(course, "00-tiny", workers=1, progress=False, log=lambda *a: None)
    finally:
        first.kill()
        first.wait()
    # Once it is gone (even killed), the lock is free again.
    grade(course, "00-tiny", workers=1, progress=False, log=lambda *a: None)
    with open(lock_file) as f:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)  # nobody holds it after the run
        assert f"process {os.getpid()}" in f.read()


def test_an_autograded_notebook_that_formgrader_removed_is_written_again(tiny_course):
    import shutil

    course = tiny_course
    spec = course.spec("00-tiny")
    write_submissions(course, spec, {"lost-notebook": make_class(course, spec)["reference"]})

    def run():
        return grade(course, "00-tiny", students=["lost-notebook"], workers=1, progress=False,
                     log=lambda *a: None)

    run()
    notebook = course.path("autograded", "lost-notebook", "00-tiny", "tiny.ipynb")
    assert notebook.is_file()
    shutil.rmtree(notebook.parent)  # what formgrader does when its Autograde fails
    assert run()["graded"] == ["lost-notebook"] and notebook.is_file()
    assert run()["skipped"] == ["lost-notebook"]  # and, once it is back, it is skipped
