"""A Python that lives under /tmp stays visible in the sandbox.

The sandbox replaces /tmp with a fresh, capped one (autograder.sandbox.isolation). A virtualenv
made under /tmp (a CI runner's, say) used to vanish with it, so every kernel failed to
start ("bwrap: execvp /tmp/venv/bin/python: No such file or directory") and a whole
class scored zero. Such a root is bound again, read-only, inside the new /tmp.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from autograder.sandbox import isolation as sandbox

needs_bwrap = pytest.mark.skipif(sandbox.bwrap_path() is None, reason="needs bubblewrap")


def _with_root_under_tmp(monkeypatch, root: Path) -> None:
    roots = sandbox._readonly_roots()
    monkeypatch.setattr(sandbox, "_readonly_roots", lambda: [*roots, root])


def test_a_root_under_tmp_is_bound_after_the_fresh_tmp(monkeypatch, tmp_path):
    root = tmp_path / "venv"
    root.mkdir()
    _with_root_under_tmp(monkeypatch, root)
    args = sandbox.bwrap_arguments("bwrap", writable=tmp_path / "work", shm=4096)
    fresh_tmp = args.index("--tmpfs", args.index("/dev")) + 1
    assert args[fresh_tmp] == "/tmp"
    bind = [i for i in range(len(args) - 2) if args[i:i + 3] == ["--ro-bind", str(root), str(root)]]
    assert bind and bind[-1] > fresh_tmp


@needs_bwrap
def test_files_of_a_root_under_tmp_can_be_read_in_the_sandbox(monkeypatch, tmp_path):
    assert tmp_path.is_relative_to("/tmp")
    root = tmp_path / "deep" / "venv"
    root.mkdir(parents=True)
    (root / "marker").write_text("still here\n")
    (tmp_path / "secret").write_text("not for kernels\n")
    work = tmp_path / "work"
    work.mkdir()
    _with_root_under_tmp(monkeypatch, root)
    args = sandbox.bwrap_arguments(sandbox.bwrap_path(), writable=work, shm=1 << 20)
    show = subprocess.run([*args, "--", "/bin/cat", str(root / "marker")],
                          capture_output=True, text=True, timeout=60)
    assert show.stdout == "still here\n", show.stderr
    # Only the root itself comes back: the rest of the host's /tmp stays out of reach.
    hidden = subprocess.run([*args, "--", "/bin/cat", str(tmp_path / "secret")],
                            capture_output=True, text=True, timeout=60)
    assert hidden.returncode != 0 and "not for kernels" not in hidden.stdout
