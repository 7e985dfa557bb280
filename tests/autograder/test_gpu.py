"""Grading on a GPU (autograder.sandbox.gpu): what a kernel of a ``gpu = true`` assignment sees.

The sandbox tests stand a character device that bubblewrap's fresh ``/dev`` lacks
(``/dev/kmsg``) in for the NVIDIA device files, so the mechanism is exercised on a
machine without a GPU; the last test needs a real one (run on the GPU machine).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from autograder.limits import GiB, Limits
from autograder.sandbox import gpu, launcher
from autograder.sandbox import isolation as sandbox
from autograder.sandbox.inside import confine
from autograder.sandbox.kernel import SandboxedKernel

STAND_IN = "/dev/kmsg"  # a device file that bubblewrap's --dev does not create


def test_gpu_key_is_a_boolean():
    assert Limits.from_table({"gpu": True}).gpu is True
    assert Limits().gpu is False
    with pytest.raises(ValueError, match=r"gpu = 'yes' should be true or false"):
        Limits.from_table({"gpu": "yes"}, where="04/assignment.toml")


def test_gpu_kernels_get_a_data_cap_instead_of_an_address_space_cap():
    limits = Limits(memory_bytes=8 * GiB)
    on_cpu, on_gpu = limits.rlimits(True), limits.rlimits(True, uses_gpu=True)
    assert "as" in on_cpu and "data" not in on_cpu
    assert "as" not in on_gpu and on_gpu["data"] == on_cpu["as"]
    assert {k: v for k, v in on_gpu.items() if k != "data"} == {
        k: v for k, v in on_cpu.items() if k != "as"}


def test_data_cap_is_applied_and_stops_an_allocation():
    """confine applies RLIMIT_DATA, and a large allocation then fails in the child."""
    code = (
        "import resource, sys\n"
        f"sys.path.insert(0, {str(Path(confine.__file__).parent)!r})\n"
        "import confine\n"
        "confine.apply_limits({'data': 512 * 2**20})\n"
        "print(resource.getrlimit(resource.RLIMIT_DATA)[0] == 512 * 2**20)\n"
        "try:\n"
        "    b = bytearray(1024 * 2**20)\n"
        "    print('allocated')\n"
        "except MemoryError:\n"
        "    print('refused')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60).stdout.split()
    assert out == ["True", "refused"]


def test_availability_follows_device_files_and_the_switch(monkeypatch):
    monkeypatch.setattr(gpu, "device_nodes", lambda: ["/dev/nvidia0", "/dev/nvidiactl"])
    monkeypatch.delenv("AUTOGRADER_GPU", raising=False)
    assert gpu.available()
    monkeypatch.setenv("AUTOGRADER_GPU", "0")
    assert not gpu.available()
    assert "AUTOGRADER_GPU=0" in gpu.describe(False)
    monkeypatch.delenv("AUTOGRADER_GPU")
    monkeypatch.setattr(gpu, "device_nodes", lambda: [])
    assert not gpu.available()


def test_kernel_environment_compiles_triton_and_keeps_only_gpu_variables(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not for students")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    plain = sandbox.kernel_environment(tmp_path)
    on_gpu = sandbox.kernel_environment(tmp_path, uses_gpu=True)
    assert plain["TRITON_INTERPRET"] == "1" and "CUDA_VISIBLE_DEVICES" not in plain
    assert on_gpu["TRITON_INTERPRET"] == "0"
    assert on_gpu["CUDA_VISIBLE_DEVICES"] == "0"
    assert on_gpu["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64"
    assert "AWS_SECRET_ACCESS_KEY" not in on_gpu


def test_bwrap_arguments_bind_devices_after_the_fresh_dev(monkeypatch, tmp_path):
    libs = tmp_path / "driver-libs"
    libs.mkdir()
    monkeypatch.setattr(gpu, "device_nodes", lambda: ["/dev/nvidiactl", "/dev/nvidia0"])
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{libs}:/usr/lib:/does/not/exist")
    args = sandbox.bwrap_arguments("bwrap", writable=tmp_path, uses_gpu=True)
    dev = args.index("--dev")
    for node in ("/dev/nvidiactl", "/dev/nvidia0"):
        i = args.index(node)
        assert args[i - 1] == "--dev-bind" and i > dev
    assert ["--ro-bind", str(libs.resolve()), str(libs.resolve())] == args[
        args.index(str(libs.resolve())) - 1: args.index(str(libs.resolve())) + 2]
    assert "/does/not/exist" not in args
    assert args.count("/usr/lib") == 0  # already readable through /usr
    assert "--dev-bind" not in sandbox.bwrap_arguments("bwrap", writable=tmp_path)


def _probe(run_cell, limits: Limits) -> tuple[str, SandboxedKernel]:
    code = (
        "import os, resource\n"
        f"print(os.path.exists({STAND_IN!r}), os.environ['TRITON_INTERPRET'],\n"
        "      resource.getrlimit(resource.RLIMIT_AS)[0] == resource.RLIM_INFINITY,\n"
        "      resource.getrlimit(resource.RLIMIT_DATA)[0] != resource.RLIM_INFINITY)\n"
    )
    text, session = run_cell(code, limits)
    return text.strip(), session


@pytest.mark.slow
@pytest.mark.skipif(sandbox.bwrap_path() is None or not os.path.exists(STAND_IN),
                    reason="needs bubblewrap and a /dev/kmsg to stand in for a GPU")
def test_sandbox_shows_the_gpu_only_to_gpu_assignments(monkeypatch, run_cell):
    monkeypatch.setattr(gpu, "device_nodes", lambda: [STAND_IN])
    monkeypatch.delenv("AUTOGRADER_GPU", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    seen, session = _probe(run_cell, Limits(cell_timeout=60, gpu=True))
    assert seen == "True 0 True True", seen
    # The fork server's template has no GPU: the strategy chosen is a fresh interpreter.
    assert isinstance(session.start_with, launcher.FreshStart)
    seen, _ = _probe(run_cell, Limits(cell_timeout=60))
    assert seen == "False 1 False False", seen
    monkeypatch.setenv("AUTOGRADER_GPU", "0")
    seen, _ = _probe(run_cell, Limits(cell_timeout=60, gpu=True))
    assert seen == "False 1 False False", seen


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available() or not gpu.available(), reason="needs a GPU")
def test_a_gpu_assignment_kernel_computes_on_the_gpu(run_cell):
    code = (
        "import os, torch\n"
        "x = torch.arange(6.0, device='cuda').reshape(2, 3)\n"
        "print(torch.cuda.is_available(), os.environ['TRITON_INTERPRET'], float((x @ x.T).sum()))\n"
    )
    text, _ = run_cell(code, Limits(cell_timeout=120, gpu=True))
    assert text.split() == ["True", "0", "83.0"], text


def test_the_grading_line_says_gpu_kernels_start_from_scratch(monkeypatch):
    from autograder.sandbox import forkserver, launcher

    monkeypatch.setattr(forkserver, "enabled", lambda: True)
    assert "fork server" in launcher.start_mode() and "from scratch" not in launcher.start_mode()
    assert launcher.start_mode(uses_gpu=True).startswith("started from scratch")
