"""A script forked from the warm server runs as ``python script.py ARGS`` would.

:func:`autograder.authoring.warm_script.run_script` runs each made submission's ``prepare`` script
in a fork of a server that has imported torch already. The first tests run a real script
both ways, warm and as a fresh interpreter (``AUTOGRADER_WARM_SCRIPTS=0``), and compare
what it saw and did; the others check that runs are warm, apart, concurrent, stopped on
time and never lost to a failing server. Real processes throughout.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from autograder.authoring import warm_script
from autograder.authoring.submissions import run_prepare
from autograder.authoring.warm_script import run_script
from autograder.sandbox.inside import channel

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")

#: Prints what a script can see of how it was started, then exits with a chosen status.
REPORT = textwrap.dedent("""
    import json, os, sys
    print(json.dumps({
        "name": __name__,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "path0": sys.path[0],
        "course_var": os.environ.get("COURSE_VAR"),
        "absent_var": os.environ.get("ONLY_IN_THE_CALLER"),
    }))
    print("to stderr", file=sys.stderr)
    sys.exit(int(sys.argv[2]))
""")


@pytest.fixture(scope="module")
def module_server():
    """One server for the tests of this module (starting one costs 3 s of imports)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("AUTOGRADER_WARM_SCRIPTS", raising=False)
        patch.setattr(warm_script, "_server", None)
        patch.setattr(warm_script, "_server_failed", False)
        yield
        if warm_script._server is not None:
            warm_script._server.close()


@pytest.fixture
def warm(module_server, monkeypatch):
    """The module's server, or a new one where a test before this one stopped it."""
    monkeypatch.delenv("AUTOGRADER_WARM_SCRIPTS", raising=False)
    if warm_script._server_failed:
        warm_script._server_failed = False


def _both_ways(monkeypatch, script: Path, args: list[str], cwd: Path, env: dict,
               timeout: float = 60) -> tuple[subprocess.CompletedProcess, ...]:
    warm_run = run_script(script, args, cwd=cwd, env=env, timeout=timeout)
    assert warm_script._server is not None, "the warm server did not start"
    monkeypatch.setenv("AUTOGRADER_WARM_SCRIPTS", "0")
    fresh_run = run_script(script, args, cwd=cwd, env=env, timeout=timeout)
    monkeypatch.delenv("AUTOGRADER_WARM_SCRIPTS")
    return warm_run, fresh_run


def test_the_script_sees_what_a_fresh_interpreter_would(warm, monkeypatch, tmp_path):
    script = tmp_path / "scripts" / "report.py"
    script.parent.mkdir()
    script.write_text(REPORT)
    workdir = tmp_path / "submission"
    workdir.mkdir()
    monkeypatch.setenv("ONLY_IN_THE_CALLER", "secret")
    env = {k: v for k, v in os.environ.items() if k != "ONLY_IN_THE_CALLER"}
    env["COURSE_VAR"] = "set for the run"

    warm_run, fresh_run = _both_ways(monkeypatch, script, ["student-7", "3"], workdir, env)

    assert warm_run.returncode == fresh_run.returncode == 3
    assert json.loads(warm_run.stdout) == json.loads(fresh_run.stdout) == {
        "name": "__main__", "argv": [str(script), "student-7", "3"], "cwd": str(workdir),
        "path0": str(script.parent), "course_var": "set for the run", "absent_var": None,
    }
    assert warm_run.stderr == fresh_run.stderr == "to stderr\n"


def test_a_relative_script_is_found_from_the_working_directory(warm, monkeypatch, tmp_path):
    workdir = tmp_path / "submission"
    workdir.mkdir()
    (workdir / "report.py").write_text(REPORT)
    monkeypatch.chdir(tmp_path)  # the caller is elsewhere
    warm_run, fresh_run = _both_ways(monkeypatch, Path("report.py"), ["s", "0"], workdir,
                                     dict(os.environ))
    assert warm_run.returncode == fresh_run.returncode == 0, warm_run.stderr
    seen = json.loads(warm_run.stdout)
    assert seen == json.loads(fresh_run.stdout)
    assert seen["argv"] == ["report.py", "s", "0"] and seen["path0"] == str(workdir)


def test_an_exception_is_printed_and_exits_with_one(warm, monkeypatch, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("def train():\n    raise ValueError('the loss stopped being finite')\n"
                      "train()\n")
    warm_run, fresh_run = _both_ways(monkeypatch, script, [], tmp_path, dict(os.environ))
    for run in (warm_run, fresh_run):
        assert run.returncode == 1
        assert "Traceback" in run.stderr
        assert run.stderr.rstrip().endswith("ValueError: the loss stopped being finite")


def test_runs_start_warm_and_see_nothing_of_each_other(warm, monkeypatch, tmp_path):
    script = tmp_path / "warmth.py"
    script.write_text(textwrap.dedent("""
        import sys
        already = "torch._dynamo" in sys.modules  # before this script imports anything
        import toolkit, torch
        print(already, getattr(toolkit, "left_by_a_run", None), torch.get_num_threads())
        toolkit.left_by_a_run = sys.argv[1]
    """))
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    first = run_script(script, ["first"], cwd=tmp_path, env=env, timeout=120)
    second = run_script(script, ["second"], cwd=tmp_path, env=env, timeout=60)
    # Warm: torch and the part its optimizers load were imported by the server. Each run
    # is a fresh fork (nothing left by the first), with the threads OMP_NUM_THREADS asks
    # for, although the server imported torch with one.
    assert first.stdout.split() == second.stdout.split() == ["True", "None", "2"]
    monkeypatch.setenv("AUTOGRADER_WARM_SCRIPTS", "0")
    fresh = run_script(script, ["fresh"], cwd=tmp_path, env=env, timeout=60)
    assert fresh.stdout.split() == ["False", "None", "2"]


def test_a_run_past_its_time_is_killed_with_what_it_started(warm, tmp_path):
    marker = tmp_path / "grandchild.pid"
    script = tmp_path / "hangs.py"
    script.write_text(textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        open({str(marker)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """))
    started = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        run_script(script, [], cwd=tmp_path, env=dict(os.environ), timeout=3)
    assert time.monotonic() - started < 30
    grandchild = int(marker.read_text())
    deadline = time.monotonic() + 10
    while _alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(grandchild), "the script's own child outlived the timeout"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_runs_from_two_threads_overlap(warm, tmp_path):
    # Each run marks that it has started and waits for the other's mark: two runs one
    # after the other would never both finish.
    script = tmp_path / "meet.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from pathlib import Path
        me, other = sys.argv[1], sys.argv[2]
        Path(me).touch()
        deadline = time.monotonic() + 60
        while not Path(other).exists():
            if time.monotonic() > deadline:
                sys.exit("never met " + other)
            time.sleep(0.05)
        print("met", other)
    """))
    results = {}

    def run(me, other):
        results[me] = run_script(script, [me, other], cwd=tmp_path, env=dict(os.environ),
                                 timeout=120).stdout.strip()

    threads = [threading.Thread(target=run, args=pair) for pair in (("a", "b"), ("b", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {"a": "met b", "b": "met a"}


def test_a_server_that_dies_costs_no_run(warm, tmp_path):
    script = tmp_path / "ok.py"
    script.write_text("import sys\nprint('ran', sys.argv[1])\n")
    assert run_script(script, ["warm"], cwd=tmp_path, env=dict(os.environ),
                      timeout=120).stdout == "ran warm\n"
    server = warm_script._server
    server.proc.kill()
    server.proc.wait()
    # The next run finds the server gone and runs in a fresh interpreter instead.
    after = run_script(script, ["after"], cwd=tmp_path, env=dict(os.environ), timeout=60)
    assert (after.returncode, after.stdout) == (0, "ran after\n")
    assert warm_script._server is None and warm_script._server_failed


def test_the_server_refuses_to_fork_with_a_second_thread(tmp_path):
    # Without OMP_NUM_THREADS=1, importing torch leaves an OpenMP thread behind, and
    # forking a process with two threads is unsafe: the server says so instead.
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS",)}
    done = subprocess.run([sys.executable, "-m", "autograder.authoring.warm_script"], input=b"",
                          capture_output=True, env=env, cwd=tmp_path, timeout=120)
    size = channel.HEADER.unpack(done.stdout[:channel.HEADER.size])[0]  # one framed message
    first = json.loads(done.stdout[channel.HEADER.size:channel.HEADER.size + size])
    if first["ready"]:
        pytest.skip("this torch starts no thread when imported")
    assert "threads after the imports" in first["error"]


def test_a_prepare_script_that_fails_or_hangs_is_reported_and_skipped(warm, tmp_path, capsys):
    (tmp_path / "fails.py").write_text("import sys\nsys.exit('no corpus here: ' + sys.argv[1])\n")
    (tmp_path / "hangs.py").write_text("import time\ntime.sleep(600)\n")
    (tmp_path / "works.py").write_text("open('model.bin', 'w').write('trained')\n")
    folder = tmp_path / "submission"
    folder.mkdir()

    def spec(script):
        return SimpleNamespace(path=tmp_path, prepare=script,
                               limits=SimpleNamespace(submission_timeout=2))

    assert not run_prepare(spec("fails.py"), folder, "s1", tmp_path)
    assert not run_prepare(spec("hangs.py"), folder, "s2", tmp_path)
    assert run_prepare(spec("works.py"), folder, "s3", tmp_path)
    assert (folder / "model.bin").read_text() == "trained"
    err = capsys.readouterr().err
    assert "prepare s1: fails.py exited with 1: no corpus here: s1" in err
    assert "prepare s2: hangs.py stopped after 2s" in err
