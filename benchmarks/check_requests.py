"""What one check request costs: as a shell message to the kernel's bridge (how the grader
sends them) against the same request run as a silent cell (how it sent them before).

One sandboxed kernel, started as the grader starts them, runs a one-cell notebook
(``double(x) = 2 x``) and gets the check bridge. Then the two transports take turns, a
round of ``--requests`` requests each, ``--rounds`` times, every request a real
``Submission.call`` (the request and its tensors written, the answer read back and checked):

* **shell message**: ``SandboxedKernel.request``, one ``autograder_request`` message that
  the bridge answers itself;
* **silent cell**: the code ``__autograder__.handle(path)`` run with
  ``SandboxedKernel.execute_silently``: IPython transforms, compiles and runs it, and
  ipykernel pauses before its reply.

Reported per request: wall time, CPU of this process (the grader's side) and CPU of the
kernel's processes (read from ``/proc`` for the sandbox's uid).

    python benchmarks/check_requests.py [--requests 100] [--rounds 4]
"""

from __future__ import annotations

import argparse
import os
import platform
import time
from pathlib import Path

import nbformat
import torch
from tables import print_command, print_table

from autograder.limits import Limits
from autograder.protocol import kernel_side
from autograder.protocol.trusted import Submission, SubmissionError
from autograder.sandbox.kernel import SandboxedKernel, describe_isolation
from autograder.sandbox.slots import processes_of

STUDENT = "def double(x):\n    return 2 * x\n"


class CellSubmission(Submission):
    """A :class:`Submission` that sends each request as a silent cell."""

    def _run_in_kernel(self, request_path: str, timeout: float) -> None:
        code = f"__autograder__.handle({request_path!r})"
        content = self._session.execute_silently(code, timeout=timeout)
        if content.get("status") != "ok":
            raise SubmissionError(f"{content.get('ename')}: {content.get('evalue')}")


def kernel_cpu_seconds(uid: int | None) -> float:
    """User + system seconds of the live processes of ``uid`` (the sandboxed kernel)."""
    if uid is None:
        return float("nan")
    tick, total = os.sysconf("SC_CLK_TCK"), 0
    for pid in processes_of(uid):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100, help="requests per round")
    parser.add_argument("--rounds", type=int, default=4, help="rounds per transport")
    args = parser.parse_args()
    print_command(__file__)
    limits = Limits()
    print(f"environment: Python {platform.python_version()}, torch {torch.__version__}; "
          f"isolation: {describe_isolation(limits)}")
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(STUDENT)])
    x = torch.arange(8.0)
    totals = {name: [0.0, 0.0, 0.0] for name in ("shell message", "silent cell")}
    with SandboxedKernel(limits) as kernel:
        kernel.run_notebook(nb)
        kernel.install_bridge(kernel_side.kernel_source())
        uid = getattr(kernel.slot, "uid", None)
        transports = {
            "shell message": Submission(kernel, nb, kernel.exchange_dir),
            "silent cell": CellSubmission(kernel, nb, kernel.exchange_dir),
        }
        for submission in transports.values():  # warm both paths
            for _ in range(10):
                submission.call("double", x)
        for turn in range(args.rounds):
            order = list(transports) if turn % 2 == 0 else list(transports)[::-1]
            for name in order:
                submission = transports[name]
                wall, cpu, kcpu = time.perf_counter(), time.process_time(), kernel_cpu_seconds(uid)
                for _ in range(args.requests):
                    if not torch.equal(submission.call("double", x), 2 * x):
                        raise SystemExit(f"{name}: a wrong answer came back")
                spent = (time.perf_counter() - wall, time.process_time() - cpu,
                         kernel_cpu_seconds(uid) - kcpu)
                totals[name] = [t + s for t, s in zip(totals[name], spent)]
    n = args.requests * args.rounds
    base = totals["silent cell"]
    rows = [[name, f"{wall / n * 1e3:.2f}", f"{cpu / n * 1e3:.2f}", f"{kcpu / n * 1e3:.2f}",
             f"{base[0] / wall:.2f}x"] for name, (wall, cpu, kcpu) in totals.items()]
    print_table(f"One check request ({n} per transport, in turns of {args.requests})",
                ["transport", "wall ms", "grader CPU ms", "kernel CPU ms", "x silent cell"],
                rows)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
