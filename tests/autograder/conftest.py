import contextlib
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def local_dask_cluster(folder, workers=2, wrap=(), env=None):
    """A real Dask scheduler and ``workers`` workers, separate processes on loopback,
    working in ``folder``; yields the scheduler's address. Each worker's command line is
    prefixed with ``wrap``; ``env`` replaces the environment of all of them."""
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**(os.environ if env is None else env), "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env,
             "cwd": folder}
    procs = [subprocess.Popen([str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port",
                               str(port), "--dashboard-address", ":0", "--no-show"], **quiet)]
    try:
        for i in range(workers):
            procs.append(subprocess.Popen(
                [*wrap, str(BIN / "dask"), "worker", address, "--nworkers", "1", "--nthreads",
                 "1", "--name", f"w{i}", "--local-directory", str(Path(folder, f"w{i}")),
                 "--no-dashboard"], **quiet))
        from distributed import Client

        with Client(address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


@pytest.fixture
def dask_cluster_in(tmp_path):
    """``dask_cluster_in(workers=2, wrap=(), env=None)``: :func:`local_dask_cluster` working
    in this test's folder."""
    return lambda **options: local_dask_cluster(tmp_path, **options)


@pytest.fixture(scope="module")
def tiny_course(tmp_path_factory):
    """A course workspace with one assignment, ``00-tiny``, released.

    ``00-tiny`` is the project's minimal example, made exactly as ``autograder new``
    makes one (``autograder/authoring/templates/``), in a temporary assignments folder with its
    hidden checks beside it.
    """
    from autograder.authoring.scaffold import new_assignment
    from autograder.workspace.course import Course

    root = tmp_path_factory.mktemp("course")
    new_assignment("00-tiny", root / "assignments", title="Tiny: softmax")
    course = Course(root / "workspace", root / "assignments")
    course.init()
    course.release("00-tiny")
    return course


@pytest.fixture
def run_cell():
    """``run_cell(code, limits)``: run one code cell in a fresh sandboxed kernel;
    returns its text and error output and the (closed) kernel."""
    import nbformat

    from autograder.sandbox.kernel import SandboxedKernel

    def run(code: str, limits):
        nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code)])
        with SandboxedKernel(limits) as session:  # claims a slot of its own
            session.run_notebook(nb)
        outputs = nb.cells[0].outputs
        return "".join(str(o.get("text", "")) + str(o.get("evalue", "")) for o in outputs), session

    return run
