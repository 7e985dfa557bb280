"""What the command line accepts, checked before any work is done: counts and durations
above zero (argparse names the option in its error) and the files a command writes."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .course import CourseError


def _positive(kind):
    """An argparse type: a number of ``kind`` above zero (argparse names the option)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} must be above 0")
        return value

    return parse


COUNT, SECONDS = _positive(int), _positive(float)


def output_file(path: Path | None) -> Path | None:
    """A file the command will write: its folder is made if missing, and a path that
    cannot be written is refused before any work is done."""
    if path is None:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CourseError(f"{path}: cannot make its folder ({exc.strerror})") from None
    if path.is_dir():
        raise CourseError(f"{path} is a folder: name a file in it")
    if not os.access(path.parent, os.W_OK) or path.exists() and not os.access(path, os.W_OK):
        raise CourseError(f"{path}: not writable by this user; name another file")
    return path
