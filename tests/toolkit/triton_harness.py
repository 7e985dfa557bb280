"""What the Triton tests share: run a test file again in a fresh interpreter process, or
run code in a process where ``import triton`` fails.

``TRITON_INTERPRET`` must be in the environment before triton is first imported (see
``test_triton_kernel.py``). In a full session another module may have imported triton
too early; then a Triton test file cannot run its kernel tests in this process, and
:func:`run_file_in_fresh_process` runs them in a new one, with ``child_flag`` set so
that the child knows it is the child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_file_in_fresh_process(test_file: str, child_flag: str, *pytest_args: str,
                              timeout: float = 300) -> None:
    """Run the tests of ``test_file`` in a new pytest process with ``TRITON_INTERPRET=1``;
    they must pass (at least one)."""
    env = {**os.environ, "TRITON_INTERPRET": "1", child_flag: "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", str(Path(test_file).resolve()), "-q", *pytest_args,
         "-p", "no:cacheprovider"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout


def run_without_triton(code: str) -> str:
    """Run ``code`` (dedented) in a new process in which ``import triton`` fails; it must
    succeed. Returns what it printed."""
    blocked = textwrap.dedent("""
        import sys
        class Block:
            def find_spec(self, name, path=None, target=None):
                if name == "triton" or name.startswith("triton."):
                    raise ImportError("no triton here")
        sys.meta_path.insert(0, Block())
    """) + textwrap.dedent(code)
    proc = subprocess.run([sys.executable, "-c", blocked], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout
