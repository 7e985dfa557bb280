"""Everything one submission may use: time, memory, processes, files, disk.

Every default lives here and only here. An assignment overrides any of them with a
top-level key of the same name in its ``assignment.toml``; sizes are bytes, given as an
integer or as a string with a unit (``tmp_bytes = "512 MiB"``)::

    cell_timeout = 60            # seconds one cell may run
    memory_bytes = "6 GiB"       # the whole memory budget of one submission
    max_files = 10_000           # files and folders in each of its writable areas

**The memory budget counts everything a submission can pin in RAM.** ``/tmp`` and
``/dev/shm`` are size-limited tmpfs mounts (memory, not disk), and so is the working
directory when the grader runs as root; what they may hold is taken out of
``memory_bytes``, and the kernel's address space gets the rest
(:meth:`Limits.address_space`). Two workers therefore never pin more than twice
``memory_bytes``, however a student writes, allocates or maps.
"""

from __future__ import annotations

import dataclasses
import re

KiB, MiB, GiB = 2**10, 2**20, 2**30

#: Each empty tmpfs that hides a host folder from the sandbox (the project root, the
#: hidden checks, the fork server's scratch folder) may hold this much.
COVER_BYTES = 1 * MiB
#: Covers per sandbox (project root, scratch root, a few hidden folders): their share of
#: the memory budget.
COVERS = 4
#: The smallest address space a kernel is given: Python, torch and IPython need it.
MIN_ADDRESS_SPACE = 1 * GiB

_NUMBER = {"float": float, "int": int}
_UNITS = {"": 1, "b": 1, "k": KiB, "kb": KiB, "kib": KiB, "m": MiB, "mb": MiB, "mib": MiB,
          "g": GiB, "gb": GiB, "gib": GiB}


@dataclasses.dataclass(frozen=True)
class Limits:
    """The caps of one submission. Times in seconds, sizes in bytes."""

    #: One cell; a cell that runs longer is interrupted and noted.
    cell_timeout: float = 60
    #: The whole notebook (every cell, restarts and replays included).
    submission_timeout: float = 600
    #: One request of a hidden check (``submission.call``) unless the check says otherwise.
    call_timeout: float = 60
    #: Memory in all: the kernel's address space plus every tmpfs below.
    memory_bytes: int = 6 * GiB
    #: The submission's private ``/tmp`` (tmpfs).
    tmp_bytes: int = 512 * MiB
    #: The submission's private ``/dev/shm`` (tmpfs; POSIX shared memory).
    shm_bytes: int = 256 * MiB
    #: The working directory (the copy of what the student handed in, plus what the
    #: notebook writes next to it).
    workdir_bytes: int = 1 * GiB
    #: Files and folders each writable area (working directory, /tmp, /dev/shm) may hold.
    max_files: int = 10_000
    #: CPU seconds of the kernel (RLIMIT_CPU).
    cpu_seconds: int = 900
    #: Processes of the kernel's uid (RLIMIT_NPROC): a fork bomb stops here.
    processes: int = 256
    #: The largest single file (RLIMIT_FSIZE).
    file_bytes: int = 256 * MiB
    #: Open file descriptors (RLIMIT_NOFILE).
    open_files: int = 512
    #: Whether the kernel may use the grader's GPU when it has one (``gpu = true``;
    #: :mod:`autograder.sandbox.gpu`). Without one, or with ``AUTOGRADER_GPU=0``, it runs on
    #: the CPU.
    gpu: bool = False

    @classmethod
    def from_table(cls, table: dict, where: str = "assignment.toml") -> Limits:
        """Limits from the keys of a TOML table that name a field (others are ignored)."""
        values = {}
        for field in dataclasses.fields(cls):
            if field.name not in table:
                continue
            raw = table[field.name]
            if field.type == "bool":
                if not isinstance(raw, bool):
                    raise ValueError(f"{where}: {field.name} = {raw!r} should be true or false")
                values[field.name] = raw
                continue
            is_size = field.name.endswith("_bytes")
            try:
                value = parse_size(raw) if is_size else _NUMBER[field.type](raw)
            except (TypeError, ValueError):
                kind = 'size such as "512 MiB"' if is_size else "number"
                raise ValueError(f"{where}: {field.name} = {raw!r} is not a {kind}") from None
            if value <= 0:
                raise ValueError(f"{where}: {field.name} must be positive, got {raw!r}")
            values[field.name] = value
        limits = cls(**values)
        limits.address_space(workdir_in_memory=True, where=where)  # fits the budget?
        return limits

    def storage_bytes(self, workdir_in_memory: bool) -> int:
        """What the tmpfs mounts of one submission may hold in RAM."""
        workdir = self.workdir_bytes if workdir_in_memory else 0
        return self.tmp_bytes + self.shm_bytes + workdir + COVERS * COVER_BYTES

    def address_space(self, workdir_in_memory: bool, where: str = "assignment.toml") -> int:
        """The kernel's RLIMIT_AS: the memory budget minus what the tmpfs mounts may hold."""
        left = self.memory_bytes - self.storage_bytes(workdir_in_memory)
        if left < MIN_ADDRESS_SPACE:
            raise ValueError(
                f"{where}: memory_bytes = {format_size(self.memory_bytes)} leaves the kernel "
                f"{format_size(max(left, 0))} once /tmp ({format_size(self.tmp_bytes)}), "
                f"/dev/shm ({format_size(self.shm_bytes)}) and the working directory "
                f"({format_size(self.workdir_bytes)}) are taken out; it needs at least "
                f"{format_size(MIN_ADDRESS_SPACE)}: raise memory_bytes or lower the others"
            )
        return left

    def rlimits(self, workdir_in_memory: bool, uses_gpu: bool = False) -> dict[str, int]:
        """``{name: value}`` for :mod:`autograder.sandbox.inside.confine` (``as``, ``cpu``, ...).

        A kernel on a GPU gets the same budget as ``data`` (``RLIMIT_DATA``) instead:
        the CUDA driver reserves more address space than any cap would allow.
        """
        return {
            "data" if uses_gpu else "as": self.address_space(workdir_in_memory),
            "cpu": self.cpu_seconds,
            "nproc": self.processes,
            "fsize": self.file_bytes,
            "nofile": self.open_files,
        }


def parse_size(value) -> int:
    """``4294967296``, ``"4 GiB"``, ``"512MiB"``, ``"1.5 GB"`` -> bytes (units are binary)."""
    if isinstance(value, bool):
        raise TypeError("a size, not a boolean")
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"\s*([0-9][0-9_]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*", str(value))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(value)
    return int(float(match.group(1).replace("_", "")) * _UNITS[match.group(2).lower()])


def format_size(n: int) -> str:
    """Bytes for people: ``536870912`` -> ``"512 MiB"``."""
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value == int(value) else f"{value:.1f} {unit}"
    return f"{n} bytes"
