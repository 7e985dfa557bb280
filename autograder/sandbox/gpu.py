"""Grading on the grader's GPU: what a sandboxed kernel needs to see one.

By default a grading kernel has no GPU: bubblewrap gives it a fresh ``/dev`` without
the NVIDIA device files, and Triton kernels run in Triton's CPU interpreter
(``TRITON_INTERPRET=1``), which is exact but slow. An assignment whose checks are
written for both (04's and 07's are) and that says ``gpu = true`` in its
``assignment.toml`` is graded on the GPU when the grading machine has one:

* the sandbox shows the NVIDIA device files (``/dev/nvidiactl``, ``/dev/nvidia0``,
  ``/dev/nvidia-uvm``, ...) and the driver's library folders named in
  ``LD_LIBRARY_PATH``, read-only;
* the kernel's environment sets ``TRITON_INTERPRET=0`` and passes on the variables
  that say which GPU and where CUDA lives (``CUDA_VISIBLE_DEVICES``, ...);
* memory is capped by ``RLIMIT_DATA`` instead of ``RLIMIT_AS``. The CUDA driver
  reserves far more address space than it ever backs (unified addressing: tens of GiB
  mapped ``PROT_NONE``), so an address-space cap stops it at start-up. ``RLIMIT_DATA``
  counts the private writable memory a process can fill, which is what the budget is
  about; GPU memory itself is the device's and is not counted.
* kernels start from scratch rather than from the fork server, whose template is
  shared by every assignment a worker grades.

``AUTOGRADER_GPU=0`` in the grader's environment keeps every kernel on the CPU.
"""

from __future__ import annotations

import glob
import os
from pathlib import Path

#: Variables a GPU kernel keeps from the grader's environment when they are set.
PASSED_ON = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
             "LD_LIBRARY_PATH", "TRITON_PTXAS_PATH", "TRITON_LIBCUDA_PATH")


def device_nodes() -> list[str]:
    """The NVIDIA device files of this machine (none on a machine without the driver)."""
    patterns = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools",
                "/dev/nvidia-modeset", "/dev/nvidia-caps/*")
    return sorted({path for pattern in patterns for path in glob.glob(pattern)})


def available() -> bool:
    """Whether kernels of a ``gpu = true`` assignment get the GPU here."""
    return os.environ.get("AUTOGRADER_GPU", "1") != "0" and bool(device_nodes())


def in_use(limits) -> bool:
    """Whether the kernels graded under ``limits`` (an :class:`autograder.limits.Limits`)
    get the GPU here: the assignment asks for it and this machine can give it."""
    return limits.gpu and available()


def kernel_environment() -> dict[str, str]:
    """What a GPU kernel's environment adds to the usual one."""
    env = {name: os.environ[name] for name in PASSED_ON if os.environ.get(name)}
    env["TRITON_INTERPRET"] = "0"  # compile Triton kernels for the GPU
    return env


def library_folders() -> list[Path]:
    """Existing folders of ``LD_LIBRARY_PATH``: where a container keeps the driver's
    ``libcuda.so`` when it is not under ``/usr``."""
    folders = [Path(p) for p in os.environ.get("LD_LIBRARY_PATH", "").split(":") if p]
    return [p.resolve() for p in folders if p.is_dir()]


def bwrap_arguments(readable_roots: list[Path]) -> list[str]:
    """bubblewrap options that show the GPU: its device files (after ``--dev /dev``)
    and the driver's library folders that no readable root already shows."""
    args: list[str] = []
    for folder in library_folders():
        if not any(folder.is_relative_to(root) for root in readable_roots):
            args += ["--ro-bind", str(folder), str(folder)]
    for node in device_nodes():
        args += ["--dev-bind", node, node]
    return args


def describe(uses_gpu: bool) -> str:
    """The GPU half of ``autograder grade``'s isolation line."""
    if uses_gpu:
        return f"GPU shown to kernels ({len(device_nodes())} NVIDIA device files, compiled Triton)"
    if os.environ.get("AUTOGRADER_GPU") == "0":
        return "no GPU (AUTOGRADER_GPU=0; Triton in its interpreter)"
    return "no GPU (Triton in its interpreter)"
