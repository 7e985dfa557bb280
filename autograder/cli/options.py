"""What the command line accepts, checked before any work is done: counts and durations
above zero (argparse names the option in its error) and the files a command writes."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..workspace.course import CourseError


def _positive(kind, zero_too=False):
    """An argparse type: a number of ``kind`` above zero, or from zero on with ``zero_too``
    (argparse names the option)."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            what = "a whole number" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not (value >= 0 if zero_too else value > 0):
            least = "0 or more" if zero_too else "above 0"
            raise argparse.ArgumentTypeError(f"{text} must be {least}")
        return value

    return parse


COUNT, SECONDS, WAIT = _positive(int), _positive(float), _positive(float, zero_too=True)


def FRACTION(text: str) -> float:  # noqa: N802 - an argparse type, named like COUNT
    """An argparse type: a share in (0, 1], such as 0.6 (60%)."""
    value = _positive(float)(text)
    if value > 1:
        raise argparse.ArgumentTypeError(f"{text} is above 1: give a share such as 0.6 for 60%")
    return value


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


#: ``autograder report`` options that belong to one of its two reports.
SIMILARITY_ONLY = ("threshold", "min_tokens", "html")
SCORES_ONLY = ("plot",)


def check_report_options(args, command) -> None:
    """Refuse an option of the other report, which would otherwise be ignored in silence.
    ``command(words)`` spells a command for the user's workspace (``Course.command``)."""
    if getattr(args, "checks", False):
        other = [f"--{n.replace('_', '-')}" for n in ("similarity", *SCORES_ONLY,
                                                        *SIMILARITY_ONLY) if getattr(args, n)]
        if other:
            raise CourseError(f"--checks lists each student's latest Check my work; "
                              f"{', '.join(other)} belongs to another report: run "
                              f"`{command(f'report {args.name} --checks')}` without it")
        return
    wrong = SCORES_ONLY if args.similarity else SIMILARITY_ONLY
    given = ["--" + name.replace("_", "-") for name in wrong if getattr(args, name) is not None]
    if not given:
        return
    if args.similarity:
        raise CourseError(f"{', '.join(given)} is for the score report, not --similarity: run "
                          f"`{command(f'report {args.name} {given[0]} FILE')}` on its own")
    raise CourseError(f"{', '.join(given)} only applies to the similarity report: add "
                      f"--similarity (`{command(f'report {args.name} --similarity ...')}`)")
