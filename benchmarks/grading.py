"""Grading throughput: ``autograder grade`` against plain ``nbgrader autograde``.

Both grade the same N submissions of one assignment in this one run, on this
machine. Plain nbgrader executes each notebook in a kernel and scores test cells
by whether they raised; ours also sanitises, sandboxes the kernel and runs the
hidden checks from a trusted process. Reported per grader: wall seconds, seconds
and submissions per minute, CPU seconds per submission (busy time of the whole
machine, kernels included: run it on an otherwise idle machine), and the
throughput ratio against nbgrader (>1 means ours is faster).

    python benchmarks/grading.py [--assignment 01-attention] [--n 200] [--workers 1 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
    """CPU seconds the whole machine has spent busy (all cores), from /proc/stat.

    Sandboxed kernels are reparented when their sandbox is torn down, so their CPU never
    reaches this process's rusage; the machine-wide count sees everything. It is only
    meaningful on an otherwise idle machine, which the benchmark assumes.
    """
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_timed(cmd: list[str], cwd: Path) -> tuple[float, float]:
    """(wall seconds, machine CPU seconds) of one command."""
    bin_dir = Path(sys.executable).parent
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(cwd)}
    busy = machine_busy_seconds()
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, env=env)
    return time.perf_counter() - start, machine_busy_seconds() - busy


def time_ours(course: Course, name: str, workers: int) -> tuple[float, float]:
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


def time_nbgrader(course: Course, name: str) -> tuple[float, float]:
    """``nbgrader autograde NAME`` as an instructor would run it (all students, one process)."""
    bin_dir = Path(sys.executable).parent
    return run_timed([str(bin_dir / "nbgrader"), "autograde", name, "--force"], course.root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="01-attention")
    parser.add_argument("--n", type=int, default=200, help="class size (default 200)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
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
        print(f"{n} submissions of {args.assignment} on {os.cpu_count()} cores")
        print(
            f"{'grader':<32} {'wall s':>7} {'s/sub':>6} {'subs/min':>9} {'CPU s/sub':>10} "
            f"{'throughput vs nbgrader':>23}"
        )

        def row(label, wall, cpu, base):
            print(
                f"{label:<32} {wall:7.1f} {wall / n:6.2f} {60 * n / wall:9.1f} {cpu / n:10.2f} "
                f"{base / wall:22.2f}x"
            )

        plain_wall, plain_cpu = time_nbgrader(plain, args.assignment)
        row("nbgrader autograde", plain_wall, plain_cpu, plain_wall)
        for workers in args.workers:
            wall, cpu = time_ours(ours, args.assignment, workers)
            row(f"autograder grade --workers {workers}", wall, cpu, plain_wall)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
