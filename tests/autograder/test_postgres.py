"""The gradebook in PostgreSQL: a real server, started here in a temporary directory on
a loopback port, with password authentication.

Grading (interrupted and resumed), the report, feedback, formgrader's view, export and
the similarity report work as on SQLite, and the single-writer rule holds with a Dask
cluster: its worker does not even know the password, so it could not write if it tried.
"""

import csv
import glob
import io
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from autograder.authoring.scaffold import new_assignment
from autograder.authoring.submissions import make_class, write_submissions
from autograder.cli import main
from autograder.grading.grade import grade
from autograder.reports import export, report
from autograder.workspace import gradebook_url
from autograder.workspace.course import Course

pytestmark = pytest.mark.slow
NAME = "00-tiny"

BIN = Path(sys.executable).parent
PASSWORD = "not-in-the-url"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _server_account() -> tuple[int, int]:
    """(uid, gid) to run the server as: postgres refuses to run as root."""
    if os.geteuid() != 0:
        return os.getuid(), os.getgid()
    try:
        account = pwd.getpwnam("postgres")  # created by Debian's postgresql package
    except KeyError:
        pytest.skip("running as root and there is no 'postgres' user to run the server as")
    return account.pw_uid, account.pw_gid


@pytest.fixture(scope="module")
def postgres():
    """``postgresql://grader@127.0.0.1:PORT/course``; the password is in PGPASSWORD only."""
    initdb = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not initdb:
        pytest.skip("PostgreSQL server binaries not found: install Debian's 'postgresql' "
                    "package (`make test` does so as root)")
    bindir = Path(initdb[-1]).parent
    uid, gid = _server_account()
    tmp = Path(tempfile.mkdtemp(prefix="autograder-pg-"))
    os.chown(tmp, uid, gid)
    (tmp / "pw").write_text(PASSWORD + "\n")
    os.chown(tmp / "pw", uid, gid)
    as_server = {"user": uid, "group": gid, "cwd": tmp, "check": True, "capture_output": True}
    if os.geteuid() == 0:
        as_server["extra_groups"] = []
    port = _free_port()
    subprocess.run([bindir / "initdb", "-D", tmp / "data", "-U", "grader", "-E", "UTF8",
                    "-A", "scram-sha-256", f"--pwfile={tmp / 'pw'}", "--no-sync"], **as_server)
    options = (f"-c listen_addresses=127.0.0.1 -c port={port} -c unix_socket_directories='' "
               "-c fsync=off -c synchronous_commit=off -c full_page_writes=off")
    pg_ctl = [bindir / "pg_ctl", "-D", tmp / "data", "-l", tmp / "log"]
    subprocess.run([*pg_ctl, "-o", options, "-w", "start"], **as_server)
    old_password = os.environ.get("PGPASSWORD")
    os.environ["PGPASSWORD"] = PASSWORD  # the grader's environment, never the URL
    try:
        import psycopg

        with psycopg.connect(host="127.0.0.1", port=port, user="grader", dbname="postgres",
                             autocommit=True) as conn:
            conn.execute("CREATE DATABASE course")
        yield f"postgresql://grader@127.0.0.1:{port}/course"
    finally:
        if old_password is None:
            os.environ.pop("PGPASSWORD", None)
        else:
            os.environ["PGPASSWORD"] = old_password
        subprocess.run([*pg_ctl, "-m", "immediate", "-w", "stop"], **{**as_server, "check": False})
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def pg_course(postgres, tmp_path_factory):
    root = tmp_path_factory.mktemp("pg-course")
    new_assignment(NAME, root / "assignments", title="Tiny: softmax")
    Course(root / "workspace", root / "assignments").init()
    out = io.StringIO()
    with redirect_stdout(out):  # the instructor's command, on the existing workspace
        assert main(["init", "--course", str(root / "workspace"), "--db-url", postgres]) == 0
    assert f"Gradebook: {postgres}" in out.getvalue()
    course = Course(root / "workspace")
    assert course.db_url == postgres and course.assignments_dir == root / "assignments"
    course.release(NAME)
    return course


def _results(course):
    return sorted(course.results_dir(NAME).glob("*.json"))


def _grade_cli(course):
    return subprocess.Popen(
        [str(BIN / "autograder"), "grade", NAME, "--course", str(course.root), "--workers", "2",
         "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)


def _scores(course) -> dict[str, float]:
    with course.gradebook() as gb:
        return {s.student.id: s.code_score for s in gb.find_assignment(NAME).submissions}


def test_grading_resumes_and_every_view_reads_postgres(pg_course):
    course = pg_course
    spec = course.spec(NAME)
    made = make_class(course, spec)
    pool = [made["reference"], made["stub"], made["mutant-no-shift"]]
    write_submissions(course, spec, {f"s{i}": pool[i % 3] for i in range(4)})
    # Killed (no chance to clean up) after two results; run again: only the rest.
    proc, start = _grade_cli(course), time.monotonic()
    while len(_results(course)) < 2:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() - start < 300, "grading made no progress"
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    finished = {p.name: p.stat().st_mtime_ns for p in _results(course)}
    proc = _grade_cli(course)
    out = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, out
    assert f"Graded {4 - len(finished)}, already graded {len(finished)}" in out
    assert all(p.stat().st_mtime_ns == finished[p.name] for p in _results(course)
               if p.name in finished), "a finished submission was graded again"

    assert not (course.root / "gradebook.db").exists()  # everything went to the server
    scores = _scores(course)
    assert len(scores) == 4 and scores["s0"] == scores["s3"] == 2.0
    assert scores["s1"] == 0.0 and scores["s2"] < 2.0
    records = {r["student"]: r["score"] for r in report.collect(course, NAME)}
    assert records == scores
    api = course.nbgrader_api()  # what formgrader shows
    assert {s["student"]: s["code_score"] for s in api.get_submissions(NAME)} == scores
    assert {s["student"]: s["code_score"] for s in api.get_notebook_submissions(NAME, "tiny")} \
        == scores
    assert api.generate_feedback(NAME, force=True)["success"]
    assert "Hidden checks" in (course.path("feedback", "s0", NAME) / "tiny.html").read_text()
    rows = csv.DictReader(io.StringIO(export.as_csv(export.collect(course, NAME))))
    assert {r["student_id"]: float(r["test_softmax.auto_points"]) for r in rows} == scores
    with redirect_stdout(io.StringIO()):
        assert main(["report", NAME, "--similarity", "--course", str(course.root),
                     "--min-tokens", "5"]) == 0
    assert _scores(course) == scores


@pytest.fixture
def worker_without_password(dask_cluster_in):
    """A Dask scheduler and one worker whose environment has no gradebook password."""
    env = {k: v for k, v in os.environ.items() if k != "PGPASSWORD"}
    with dask_cluster_in(workers=1, env=env) as address:
        yield address


def test_dask_workers_grade_but_only_the_grader_writes(pg_course, worker_without_password):
    from distributed import Client

    course = pg_course
    with Client(worker_without_password, timeout="30s") as client:
        attempt = client.submit(gradebook_url.probe, course.db_url, pure=False)
        with pytest.raises(gradebook_url.GradebookUrlError, match="password"):
            attempt.result(timeout=60)  # the worker cannot open the gradebook at all
    spec = course.spec(NAME)
    made = make_class(course, spec)
    write_submissions(course, spec, {"dask-ref": made["reference"], "dask-stub": made["stub"]})
    run = grade(course, NAME, students=["dask-ref", "dask-stub"],
                scheduler=worker_without_password, progress=False, log=lambda *a: None)
    assert sorted(run["graded"]) == ["dask-ref", "dask-stub"]
    scores = _scores(course)
    assert (scores["dask-ref"], scores["dask-stub"]) == (2.0, 0.0)


def test_student_kernels_never_see_the_gradebook_password(tmp_path, monkeypatch):
    from autograder.sandbox.isolation import kernel_environment

    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    monkeypatch.setenv("PGPASSFILE", "/srv/secrets/pgpass")
    env = kernel_environment(tmp_path)
    assert not {"PGPASSWORD", "PGPASSFILE"} & set(env) and PASSWORD not in env.values()
