"""What "Check my work" hands in: the notebook and the plain files beside it.

Shared by both sides of the extension: the student side packs a hand-in, the service side
unpacks it (:func:`unpack`) and stages it.

A student hands in a folder: the notebook, and for some assignments files the notebook
wrote (the capstone's checkpoint). A check takes the same folder from where the notebook
was saved, the way the exchange would take it, and leaves out what a hand-in never holds.
"""

from __future__ import annotations

import io
import shutil
import tarfile
from pathlib import Path, PurePosixPath


class CheckRefused(Exception):
    """A request the service will not run; ``status`` is the HTTP status to answer."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


#: What a submission folder may hold besides the notebook (the capstone's checkpoint).
MAX_SIBLING_BYTES = 256 * 2**20
#: Never copied into a check, whatever folder the notebook sits in.
COURSE_FILES = {"gradebook.db", "nbgrader_config.py", "autograder.json"}
#: The largest hand-in the service reads: the notebook's limit (the grader's
#: ``sanitize.MAX_NOTEBOOK_BYTES``, which this module cannot import, since the student side
#: ships it; a test keeps the two in step), the files beside it, and 1 MiB of slack.
MAX_UPLOAD_BYTES = (20 + 1) * 2**20 + MAX_SIBLING_BYTES


def notebook_under(root_dir: Path, raw) -> Path:
    """The notebook a request names (``raw``, under the server root): an existing .ipynb
    file, never outside the root; else :class:`CheckRefused` saying what to do."""
    if not isinstance(raw, str) or not raw.strip():
        raise CheckRefused(400, 'send {"path": "<notebook path under the server root>"}')
    rel = PurePosixPath(raw.strip().lstrip("/"))
    if ".." in rel.parts or "\0" in raw:
        raise CheckRefused(403, f"{raw}: only notebooks under the server's root folder "
                                "can be checked")
    path = (root_dir / rel).resolve()
    if not path.is_relative_to(root_dir):
        raise CheckRefused(403, f"{raw}: only notebooks under the server's root folder "
                                "can be checked")
    if path.suffix != ".ipynb":
        raise CheckRefused(400, f"{raw} is not a notebook (.ipynb): open the assignment "
                                "notebook and check that")
    if not path.is_file():
        raise CheckRefused(404, f"{raw} does not exist: save the notebook first")
    return path


def stage_submission(notebook: Path, target: Path, notebook_id: str) -> list[str]:
    """Copy the notebook, as ``<notebook_id>.ipynb``, and the plain files beside it into
    ``target`` (a private folder), the way a student would hand them in.

    Skipped: other notebooks, sub-folders, links, hidden files, the course's own files,
    and anything past :data:`MAX_SIBLING_BYTES` in all. Returns notes on what was skipped.
    """
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(notebook, target / f"{notebook_id}.ipynb")
    notes, total = [], 0
    for item in sorted(notebook.parent.iterdir()):
        if (item.suffix == ".ipynb" or item.name.startswith(".") or item.name in COURSE_FILES
                or item.is_symlink() or not item.is_file()):
            continue
        size = item.stat().st_size
        if total + size > MAX_SIBLING_BYTES:
            notes.append(f"{item.name} was left out: the files beside the notebook may take "
                         f"{MAX_SIBLING_BYTES // 2**20} MiB in all")
            continue
        total += size
        shutil.copy2(item, target / item.name)
    return notes


def unpack(data: bytes, target: Path) -> None:
    """Write a packed hand-in into ``target``: plain files at the top level only, within
    :data:`MAX_UPLOAD_BYTES`; anything else is refused (400) before a byte is written."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            members = tar.getmembers()
            total = sum(m.size for m in members)
            for member in members:
                name = member.name
                if (not member.isfile() or "/" in name or name in ("", ".", "..")
                        or name.startswith(".")):
                    raise CheckRefused(400, f"the hand-in holds {name!r}, which is not a "
                                            "plain file beside the notebook")
            if total > MAX_UPLOAD_BYTES:
                raise CheckRefused(413, f"the hand-in is {total / 2**20:.0f} MiB, over the "
                                        f"{MAX_UPLOAD_BYTES // 2**20} MiB a check takes")
            target.mkdir(parents=True, exist_ok=True)
            for member in members:
                with tar.extractfile(member) as source, open(target / member.name, "wb") as out:
                    out.write(source.read())
    except tarfile.TarError as exc:
        raise CheckRefused(400, f"the hand-in is not a tar archive ({exc})") from None
