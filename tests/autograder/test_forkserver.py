"""The fork server: kernels forked from a preloaded zygote must be as isolated, and as
ordinary, as kernels started from scratch, and must share nothing with each other."""

import json
import os
from pathlib import Path

import nbformat
import pytest

from autograder.limits import GiB, Limits
from autograder.sandbox import forkserver, slots
from autograder.sandbox import isolation as sandbox
from autograder.sandbox.kernel import SandboxedKernel
from autograder.sandbox.storage import can_mount

pytestmark = pytest.mark.skipif(not forkserver.enabled(), reason="fork server unavailable here")


def _run(cells, *, fork=True, slot=None, limits=None, preload=()):
    """Run code cells in a fresh session; return (outputs per cell, events, session)."""
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    limits = limits or Limits(cell_timeout=30)
    with slots.sandbox_slot() as claimed:
        session = SandboxedKernel(limits, slot=claimed if slot is None else slot,
                                  use_fork_server=fork, preload=preload)
        try:
            session.run_notebook(nb)
            forked = session.forked
        finally:
            session.close()
    texts = ["".join(str(o.get("text", "")) + str(o.get("evalue", "")) for o in c.outputs)
             for c in nb.cells]
    return texts, session.events, forked


PROBE = """
import json, os, resource, sys
status = dict(l.split(':\\t', 1) for l in open('/proc/self/status') if ':\\t' in l)
print(json.dumps({
    'uid': os.getuid(), 'cwd': os.getcwd(), 'home': os.path.expanduser('~'),
    'env': sorted(os.environ), 'path': sys.path,
    **{name: resource.getrlimit(getattr(resource, 'RLIMIT_' + name.upper()))
       for name in ('as', 'nproc', 'cpu', 'nofile', 'fsize')},
    'caps': status['CapEff'].strip(), 'no_new_privs': status['NoNewPrivs'].strip(),
    'session_leader': os.getsid(0) == os.getpid(),
    'tmp': sorted(os.listdir('/tmp')), 'siblings': sorted(os.listdir('..')),
}))
"""


def test_a_forked_kernel_looks_like_one_started_from_scratch():
    limits = Limits(memory_bytes=7 * GiB)
    (forked_out,), events, forked = _run([PROBE], limits=limits)
    (fresh_out,), _, fresh_forked = _run([PROBE], fork=False, limits=limits)
    assert forked and not fresh_forked and not events
    forked_view, fresh_view = json.loads(forked_out), json.loads(fresh_out)
    # A forked kernel leads its own session, so that it can be signalled as a group.
    assert forked_view.pop("session_leader")
    fresh_view.pop("session_leader")
    for view in (forked_view, fresh_view):
        view["cwd"] = view["home"] = "<workdir>"  # each session has its own
        if not sandbox.bwrap_path():
            view.pop("tmp")  # the host's /tmp, which other programs change meanwhile
    assert forked_view == fresh_view
    assert forked_view["as"] == [limits.address_space(can_mount())] * 2
    assert forked_view["no_new_privs"] == "1" and forked_view["siblings"] == ["work"]
    if os.geteuid() == 0 and sandbox.bwrap_path():
        assert forked_view["uid"] >= 61000 and forked_view["caps"] == "0000000000000000"


def test_a_forked_kernel_holds_what_its_assignment_preloads_and_no_more():
    """torch imports its compiler stack (over a CPU second) on an optimizer's first call;
    every kernel of a training exercise would pay it again unless the zygote holds it
    already (07's ``kernel_preload``). A kernel of an assignment that never trains gets a
    zygote without it, which starts faster; a zygote that holds more serves it too."""
    probe = ["import sys; print(sorted(m for m in ('torch', 'torch._dynamo', 'toolkit') "
             "if m in sys.modules))"]
    with slots.sandbox_slot() as slot:
        (plain,), events, forked = _run(probe, slot=slot)
        assert forked and not events
        assert plain.strip() == "['toolkit', 'torch']"
        (training,), events, forked = _run(probe, slot=slot, preload=("torch._dynamo",))
        assert forked and not events
        assert training.strip() == "['toolkit', 'torch', 'torch._dynamo']"
        plain_server = forkserver.get(slot, ())
        training_server = forkserver.get(slot, (), ("torch._dynamo",))
        assert "torch._dynamo" in training_server.modules
        assert "torch._dynamo" not in plain_server.modules
        plain_server.close()  # gone: the zygote that holds more serves the plain kernels
        assert forkserver.get(slot, ()) is training_server


LEAVE_TRACES = r"""
import ctypes, os, time
open('/tmp/trace', 'w').write('x')
open('/dev/shm/trace', 'w').write('x')
libc = ctypes.CDLL(None, use_errno=True)
segment = libc.shmget(0x5EED, 4096, 0o1666)  # IPC_CREAT | 0666: outlives its process
print('shm', segment)
if os.fork() == 0:           # a daemon: double fork, new session, sleeps forever
    os.setsid()
    if os.fork() == 0:
        time.sleep(1000)
    os._exit(0)
time.sleep(0.2)
"""

FIND_TRACES = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
print('tmp', os.path.exists('/tmp/trace'), 'devshm', os.path.exists('/dev/shm/trace'),
      'shm', libc.shmget(0x5EED, 0, 0) != -1)
"""


@pytest.mark.skipif(os.geteuid() != 0 or not sandbox.bwrap_path(), reason="needs root + bwrap")
def test_nothing_of_one_kernel_reaches_the_next():
    with slots.sandbox_slot() as slot:
        (first,), _, _ = _run([LEAVE_TRACES], slot=slot)
        assert "shm -1" not in first  # the segment was made
        # The daemon escaped the kernel's process tree, yet it is gone with the kernel.
        assert slots.processes_of(sandbox.sandbox_uid(slot)) == {}
        (second,), _, forked = _run([FIND_TRACES], slot=slot)
    assert forked
    assert second.split() == ["tmp", "False", "devshm", "False", "shm", "False"]


def test_the_kernel_cannot_signal_the_zygote():
    (out,), _, forked = _run([
        "import os, signal\n"
        "for pid in (os.getppid(), 1):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n        print('KILLED', pid)\n"
        "    except OSError as e:\n        print('refused', e.errno)\n"
    ])
    assert forked
    if os.geteuid() == 0 and sandbox.bwrap_path():
        assert "KILLED" not in out and out.count("refused") == 2
    (after,), _, _ = _run(["print(6 * 7)"])
    assert after.strip() == "42"


def test_the_kernel_holds_none_of_the_zygotes_pipes():
    """A kernel that could write to the zygote's stdout could answer in its name."""
    with slots.sandbox_slot() as slot:
        server = forkserver.get(slot, ())
        pipes = {os.readlink(f"/proc/{server.process.pid}/fd/{fd}") for fd in (0, 1)}
        assert all(p.startswith("pipe:") for p in pipes)
        (out,), _, forked = _run([
            "import os\nfor fd in os.listdir('/proc/self/fd'):\n    try:\n"
            "        print(os.readlink('/proc/self/fd/' + fd))\n    except OSError:\n"
            "        pass\n"], slot=slot)
    assert forked and ("pipe:" in out or "socket:" in out)  # it did list its descriptors
    assert not pipes & set(out.split())


def test_a_dead_zygote_is_replaced():
    with slots.sandbox_slot() as slot:
        first = forkserver.get(slot, ())
        first.process.kill()
        first.process.wait()
        (out,), events, forked = _run(["print('alive')"], slot=slot)
        assert forked and out.strip() == "alive" and not events
        assert forkserver.get(slot, ()) is not first


def test_a_kernel_that_dies_is_reported_and_restarted():
    (_, after), events, forked = _run(["import os\nos._exit(3)", "print('replayed')"])
    assert forked and after.strip() == "replayed"
    assert any("stopped the kernel" in e for e in events)


def test_workdir_must_lie_in_the_scratch_root():
    with slots.sandbox_slot() as slot:
        server = forkserver.get(slot, ())
        with pytest.raises(ValueError, match="not inside"):
            server.spawn(Path("/nowhere/conn.json"), Path("/nowhere"), {}, {})


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_FORKSERVER", "0")
    assert forkserver.get(0, ()) is None
    (out,), _, forked = _run(["print('from scratch')"])
    assert not forked and out.strip() == "from scratch"


def test_without_bubblewrap_limits_still_apply(monkeypatch):
    monkeypatch.setenv("AUTOGRADER_NO_BWRAP", "1")
    limits = Limits(memory_bytes=5 * GiB, open_files=100)
    (out,), events, forked = _run([PROBE], limits=limits)
    view = json.loads(out)
    assert forked and not events
    assert view["as"] == [limits.address_space(can_mount())] * 2
    assert view["nofile"] == [100, 100]
    assert view["uid"] == os.getuid()  # no sandbox uid without bubblewrap


def test_slots_are_exclusive():
    with slots.sandbox_slot() as a, slots.sandbox_slot() as b:
        assert a != b
    with slots.sandbox_slot() as c:
        assert c == a  # released, and found again first


def test_only_paths_the_project_cover_leaves_visible_are_covered_again(tmp_path):
    """What the sandbox covers for ``hidden``: the layout a zygote is keyed by."""
    from autograder.workspace.course import ASSIGNMENTS_DIR, PROJECT_ROOT

    workspace, outside_checks = tmp_path / "ws", tmp_path / "ws" / "checks"
    scratch, elsewhere = tmp_path / "scratch", tmp_path / "elsewhere"
    for folder in (outside_checks, scratch, elsewhere):
        folder.mkdir(parents=True)
    toolkit_pkg = PROJECT_ROOT / "toolkit"
    covered = sandbox.paths_to_cover(
        (ASSIGNMENTS_DIR, ASSIGNMENTS_DIR / "01-attention" / "checks",
         workspace, outside_checks, elsewhere, tmp_path / "missing", toolkit_pkg / "norm.py"),
        scratch)
    # The project's own folders are under its cover already; the workspace's checks are
    # under the workspace's; a file the sandbox binds back (the toolkit) is covered again.
    assert covered == tuple(sorted((workspace.resolve(), elsewhere.resolve(),
                                    (toolkit_pkg / "norm.py").resolve())))
    # A folder that holds the writable one stays open, and what is inside it is covered.
    assert sandbox.paths_to_cover((workspace, outside_checks), workspace / "scratch") == (
        outside_checks.resolve(),)


def test_every_built_in_assignment_shares_one_zygote(tmp_path):
    """The Course panel starts one zygote and every assignment's check uses it."""
    from autograder.workspace.course import ASSIGNMENTS_DIR, Course

    course = Course(tmp_path / "course")
    course.root.mkdir()
    own_checks = tmp_path / "own-checks"
    own_checks.mkdir()
    with slots.sandbox_slot() as slot:
        first, *others = [
            forkserver.get(slot, (course.root, ASSIGNMENTS_DIR, course.spec(name).checks_dir()))
            for name in ("01-attention", "05-blocks", "07-capstone")]
        assert first is not None and all(other is first for other in others)
        apart = forkserver.get(slot, (course.root, ASSIGNMENTS_DIR, own_checks))
        try:
            if sandbox.bwrap_path():  # checks outside both need their own cover
                assert apart is not first
        finally:
            if apart is not first:
                apart.close()
