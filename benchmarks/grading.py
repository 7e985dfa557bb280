"""Grading throughput: ``autograder grade`` against plain ``nbgrader autograde``.

Both grade the same N submissions of one assignment in this one run, on this
machine. Plain nbgrader executes each notebook in a kernel and scores test cells
by whether they raised; ours also sanitises, sandboxes the kernel and runs the
hidden checks from a trusted process. Reported: seconds per submission for each
and the ratio (>1 means ours is faster).

    python benchmarks/grading.py [--assignment 01-attention] [--n 20] [--workers 2]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autograder.course import Course
from autograder.grade import grade
from autograder.submissions import make_class, write_submissions


def make_submissions(course: Course, name: str, n: int) -> list[str]:
    """N students cycling through the reference, the stub and the mutants."""
    spec = course.spec(name)
    pool = list(make_class(course, spec).values())
    students = {f"student-{i:03d}": pool[i % len(pool)] for i in range(n)}
    write_submissions(course, spec, students)
    return list(students)


def time_ours(course: Course, name: str, workers: int) -> float:
    start = time.perf_counter()
    grade(course, name, workers=workers, force=True, progress=False, log=lambda *a: None)
    return time.perf_counter() - start


def time_nbgrader(course: Course, name: str) -> float:
    """``nbgrader autograde NAME`` as an instructor would run it (all students, one process)."""
    bin_dir = Path(sys.executable).parent
    start = time.perf_counter()
    subprocess.run(
        [str(bin_dir / "nbgrader"), "autograde", name, "--force"],
        cwd=course.root,
        check=True,
        capture_output=True,
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(course.root)},
    )
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--assignment", default="01-attention")
    parser.add_argument("--n", type=int, default=20)
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

        t_plain = time_nbgrader(plain, args.assignment)
        print(f"{args.n} submissions of {args.assignment}")
        print(f"{'grader':<34} {'seconds':>8} {'s/submission':>13} {'speed-up':>9}")
        print(
            f"{'nbgrader autograde (1 process)':<34} {t_plain:8.1f} "
            f"{t_plain / args.n:13.2f} {1:9.2f}"
        )
        for workers in args.workers:
            t_ours = time_ours(ours, args.assignment, workers)
            print(
                f"{f'autograder grade --workers {workers}':<34} {t_ours:8.1f} "
                f"{t_ours / args.n:13.2f} {t_plain / t_ours:9.2f}"
            )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
