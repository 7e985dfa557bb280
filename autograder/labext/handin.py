"""What "Check my work" hands in: the notebook and the plain files beside it.

Shared by both sides of the extension: the student side packs a hand-in, the service side
unpacks it (:func:`unpack`) and stages it.

A student hands in a folder: the notebook, and for some assignments files the notebook
wrote (the capstone's checkpoint). A check takes the same folder from where the notebook
was saved, the way the exchange would take it, and leaves out what a hand-in never holds.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import tarfile
from pathlib import Path, PurePosixPath


class CheckRefused(Exception):
    """A request the service will not run; ``status`` is the HTTP status to answer,
    ``retry_after`` (seconds, when known) how soon asking again can succeed."""

    def __init__(self, status: int, message: str, retry_after: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    def body(self) -> dict:
        """The JSON answer: ``{"message", "retry_after"?}`` (the panel says when to retry)."""
        body: dict = {"message": str(self)}
        if self.retry_after is not None:
            body["retry_after"] = max(1, round(self.retry_after))
        return body


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


# -- one copy of the student's work: the one nbgrader's Assignment List fetched -----------
# The Course panel's "Open" and "Check my work", and nbgrader's Assignment List (Fetch,
# Submit), all work on the same notebook: ``<assignment>/<notebook>.ipynb`` under the
# server's root, where nbgrader's fetch puts it. The panel fetches it when it is missing.

#: What nbgrader's release leaves in an answer cell (``ClearSolutions``): a code stub
#: raising NotImplementedError, or this text in a written answer.
CODE_STUB = re.compile(r"^[ \t]*raise NotImplementedError\(", re.MULTILINE)
TEXT_STUB = "YOUR ANSWER HERE"
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)


def fetched_copy(root_dir: Path, assignment: str, notebooks: list[str]) -> dict[str, str]:
    """``{notebook id: path under root_dir}`` of the fetched copy's notebooks that exist."""
    found = {}
    for notebook_id in notebooks:
        path = root_dir / assignment / f"{notebook_id}.ipynb"
        if path.is_file():
            found[notebook_id] = f"{assignment}/{notebook_id}.ipynb"
    return found


def prefer_fetched(view: dict, root_dir: Path) -> dict:
    """The panel's links point at the fetched copy wherever there is one (``fetched``
    says so); elsewhere they stay where the course has the notebook until "Open" fetches."""
    for assignment in view.get("assignments", []):
        ids = [n.get("id") for n in assignment.get("notebooks", [])]
        copies = fetched_copy(root_dir, str(assignment.get("name")), [i for i in ids if i])
        for notebook in assignment.get("notebooks", []):
            if notebook.get("id") in copies:
                notebook["path"] = copies[notebook["id"]]
        assignment["fetched"] = bool(copies)
    return view


def fetch_with_nbgrader(manager, root_dir: Path, assignment: str, log=None) -> str | None:
    """Fetch ``assignment`` the way nbgrader's Assignment List's "Fetch" does (its own
    manager, its own configuration) into ``root_dir``; None when done or already
    fetched, else why not.

    Runs on the server's own thread, as nbgrader's handlers do: its manager changes the
    process's working folder while it reads its configuration, and fetches into the
    working folder (nbgrader's ``Exchange.assignment_dir`` is "."), here the server's root.
    """
    if manager is None:
        return "nbgrader's Assignment List is not installed on this server"
    here = os.getcwd()
    os.chdir(root_dir)
    try:
        return _fetch(manager, assignment, log)
    finally:
        os.chdir(here)


def _fetch(manager, assignment: str, log) -> str | None:
    listed = manager.list_released_assignments()
    if not listed.get("success"):
        return "nbgrader could not read the exchange"
    entries = [a for a in listed["value"] if a.get("assignment_id") == assignment]
    if any(a.get("status") == "fetched" for a in entries):
        return None
    released = [a for a in entries if a.get("status") == "released"]
    if not released:
        return f"{assignment} is not in the exchange (the instructor released it without it)"
    done = manager.fetch_assignment(released[0]["course_id"], assignment)
    if not done.get("success"):
        if log is not None:
            log.error("fetching %s failed: %s", assignment, done.get("value"))
        return "nbgrader's fetch failed (the server's log says why)"
    return None


def unwritten(nb) -> list[str]:
    """The answers of ``nb`` (a notebook as JSON) still as released: each by the heading
    above it ("Exercise 1a: attention weights"), else its cell id."""
    names, heading = [], None
    for cell in nb.get("cells", []):
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        meta = cell.get("metadata", {}).get("nbgrader") or {}
        if cell.get("cell_type") == "markdown" and not meta.get("solution"):
            headings = _HEADING.findall(source)
            heading = headings[-1].replace("`", "").rstrip(":") if headings else heading
            continue
        if not meta.get("solution"):
            continue
        stub = (CODE_STUB.search(source) if cell.get("cell_type") == "code"
                else source.strip() in ("", TEXT_STUB))
        if stub:
            name = heading or str(meta.get("grade_id") or "an answer")
            if name not in names:
                names.append(name)
    return names


def handin_warnings(root_dir: Path, copies: dict[str, str], last_checked: dict) -> list[str]:
    """What a student should hear before submitting the fetched copy (``copies``:
    ``{notebook id: path under root_dir}``): answers not written yet, and a copy older
    than the one last checked (``last_checked``: ``{notebook id: {"path", "saved_at"}}``,
    ``saved_at`` a POSIX time)."""
    warnings = []
    for notebook_id, rel in sorted(copies.items()):
        path = root_dir / rel
        try:
            nb = json.loads(path.read_text())
        except (OSError, ValueError):
            warnings.append(f"{rel} cannot be read: open it, fix it, save it")
            continue
        missing = unwritten(nb)
        if missing:
            shown = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more"
                                              if len(missing) > 4 else "")
            warnings.append(f"{rel} has {len(missing)} answer(s) not written yet: {shown}")
        checked = last_checked.get(notebook_id) or {}
        other, saved_at = checked.get("path"), checked.get("saved_at")
        if (isinstance(other, str) and other != rel and isinstance(saved_at, (int, float))
                and saved_at > path.stat().st_mtime):
            warnings.append(f"you last checked {other}, saved after {rel}: the work you "
                            f"checked is not the work you would submit (copy it into {rel} "
                            "first)")
    return warnings


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
