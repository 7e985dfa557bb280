"""A submission whose files do not fit its working directory gives its areas back.

The areas (working directory, /tmp, /dev/shm) are tmpfs mounts made before the handed-in
files are copied in. When the copy fails, no kernel session exists for the grader to
close; the mounts, and the part of the files that fitted (up to the working directory's
cap, 1 GiB by default), used to stay in memory until a later grader swept the folder.
"""

from __future__ import annotations

import pytest

from autograder.limits import Limits
from autograder.sandbox import storage
from autograder.sandbox.kernel import SandboxedKernel
from autograder.sandbox.storage import StorageError, scratch_root

pytestmark = pytest.mark.skipif(not storage.can_mount(), reason="sized tmpfs mounts need root")


def _our_areas() -> list[str]:
    return storage._mounts_under(scratch_root())


def test_files_that_do_not_fit_leave_no_mount_behind(tmp_path):
    handed_in = tmp_path / "handed-in"
    handed_in.mkdir()
    (handed_in / "weights.bin").write_bytes(b"\0" * (3 << 20))
    (handed_in / "notebook.ipynb").write_text("{}")
    before = _our_areas()
    with pytest.raises(StorageError, match="do not fit the working directory"):
        SandboxedKernel(Limits(workdir_bytes=1 << 20), submission_dir=handed_in,
                        notebook_name="notebook.ipynb")
    assert _our_areas() == before
    assert not list(scratch_root().glob("submission-*"))
