"""Grading throughput: ``autograder grade`` against plain ``nbgrader autograde``.

Both grade the same N submissions of one assignment in this one run, on this
machine. Plain nbgrader executes each notebook in a kernel and scores test cells
by whether they raised; ours also sanitises, sandboxes the kernel and runs the
hidden checks from a trusted process. Reported per grader: wall seconds, seconds
and submissions per minute, CPU seconds per submission (of the grader's own processes,
kernels included, and of the whole machine, other users' included), and the throughput
ratio against nbgrader (>1 means ours is faster). The command, the environment and the
load average before and after come first and last, to be copied with the table.

    python benchmarks/grading.py [--assignment 01-attention] [--n 200] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from tables import print_command

from autograder.authoring.submissions import make_class, write_submissions
from autograder.workspace.course import Course


def make_submissions(course: Course, name: str, n: int) -> list[str]:
    """N students cycling through the reference, the stub and the mutants."""
    spec = course.spec(name)
    pool = list(make_class(course, spec).values())
    students = {f"student-{i:03d}": pool[i % len(pool)] for i in range(n)}
    write_submissions(course, spec, students)
    return list(students)


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat: includes
    whatever else runs on the machine (printed beside the table, as its load average)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


class TreeCPU:
    """CPU seconds of one command's processes (its descendants, sandboxed kernels and the
    fork server's children included), sampled from /proc every ``interval`` seconds.

    A process's own user + system time is read while it lives and kept once it is gone;
    what it spent after the last sample is missed, so this is a slight under-count. (The
    command's rusage cannot serve: a sandbox torn down leaves its processes to init, and
    their CPU with them.) Other users' processes are never counted, so it holds on a
    busy machine too."""

    def __init__(self, root: int, interval: float = 0.1):
        self.root, self.interval = root, interval
        self._ours: dict[tuple[int, str], float] = {}  # (pid, start time) -> CPU seconds
        self._seen: dict[int, tuple[str, bool]] = {}  # pid -> (start time, ours?)
        self._tick = os.sysconf("SC_CLK_TCK")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @property
    def seconds(self) -> float:
        return sum(self._ours.values())

    def _run(self) -> None:
        while True:
            self.sample()
            if self._stop.wait(self.interval):
                self.sample()
                return

    def sample(self) -> None:
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            pid = int(entry.name)
            try:
                # comm may hold spaces and parentheses: the fields follow the last ")".
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            ppid, start = int(fields[1]), fields[19]
            known = self._seen.get(pid)
            if known is None or known[0] != start:  # a new process, or a reused pid
                parent = self._seen.get(ppid)
                ours = pid == self.root or (parent is not None and parent[1])
                known = self._seen[pid] = (start, ours)
            if known[1]:
                self._ours[(pid, start)] = (int(fields[11]) + int(fields[12])) / self._tick


def run_timed(cmd: list[str], cwd: Path) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of the command's processes, machine CPU seconds)."""
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd)}
    busy = machine_busy_seconds()
    start = time.perf_counter()
    process = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT)
    with TreeCPU(process.pid) as cpu:
        output, _ = process.communicate()
    wall = time.perf_counter() - start
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, cmd, output)
    return wall, cpu.seconds, machine_busy_seconds() - busy


def time_ours(course: Course, name: str, workers: int) -> tuple[float, float, float]:
    bin_dir = Path(sys.executable).parent
    return run_timed(
        [
            str(bin_dir / "autograder"),
            "grade",
            name,
            "--course",
            str(course.root),
            "--workers",
            str(workers),
            "--force",
            "--quiet",
        ],
        course.root,
    )


def time_nbgrader(course: Course, name: str) -> tuple[float, float, float]:
    """``nbgrader autograde NAME`` as an instructor would run it (all students, one process)."""
    bin_dir = Path(sys.executable).parent
    return run_timed([str(bin_dir / "nbgrader"), "autograde", name, "--force"], course.root)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def environment() -> str:
    """Python and the libraries that set the pace, and the sandbox in force."""
    from importlib.metadata import version

    from autograder.grading.runner import describe_isolation
    from autograder.limits import Limits

    libraries = ", ".join(f"{name} {version(name)}"
                          for name in ("torch", "pytest", "nbgrader", "nbclient"))
    return (f"Python {sys.version.split()[0]}, {libraries}; "
            f"isolation: {describe_isolation(Limits())}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="01-attention")
    parser.add_argument("--n", type=int, default=200, help="class size (default 200)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--skip-nbgrader", action="store_true",
                        help="time ours only (no ratio): plain nbgrader takes minutes per "
                             "ten submissions")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    try:
        ours = Course(tmp / "ours")
        ours.init()
        ours.release(args.assignment)
        make_submissions(ours, args.assignment, args.n)
        plain = Course(tmp / "plain")
        plain.init()
        plain.release(args.assignment)
        shutil.copytree(ours.path("submitted"), plain.path("submitted"), dirs_exist_ok=True)

        n = args.n
        print_command(__file__)
        print(f"environment: {environment()}")
        print(f"load average before: {load_average()}")
        print(f"{n} submissions of {args.assignment} on {os.cpu_count()} cores")
        print(
            f"{'grader':<32} {'wall s':>7} {'wall s/sub':>10} {'subs/min':>9} "
            f"{'CPU s/sub':>9} {'machine CPU s/sub':>17} {'throughput vs nbgrader':>23}"
        )

        def row(label, wall, cpu, machine, base):
            ratio = f"{base / wall:22.2f}x" if base else f"{'-':>23}"
            print(
                f"{label:<32} {wall:7.1f} {wall / n:10.2f} {60 * n / wall:9.1f} "
                f"{cpu / n:9.2f} {machine / n:17.2f} {ratio}",
                flush=True,
            )

        plain_wall = None
        if not args.skip_nbgrader:
            plain_wall, plain_cpu, plain_machine = time_nbgrader(plain, args.assignment)
            row("nbgrader autograde", plain_wall, plain_cpu, plain_machine, plain_wall)
        for workers in args.workers:
            wall, cpu, machine = time_ours(ours, args.assignment, workers)
            row(f"autograder grade --workers {workers}", wall, cpu, machine, plain_wall)
        print(f"load average after: {load_average()}")
        print("CPU s/sub: the grader's own processes (kernels included), sampled from /proc; "
              "machine CPU s/sub: the whole machine's busy time, other users' included")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
