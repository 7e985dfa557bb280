"""What "Check my work" shows, by the calendar: one setting before the due date, another
after it, and optionally a third once grades are out.

An instructor who hides the hidden checks' details while an assignment is open (so that
they are not a guide to the tests) wants them back once the deadline has passed, for
everyone to learn from. ``course/course.toml`` says so per assignment, or for the whole
course::

    visibility = "names"                 # before the due date (course default)
    visibility_after_due = "full"        # once the due date has passed (course default)
    assignments = [
      { name = "01-attention", due = 2026-01-26T23:59:00 },
      { name = "07-capstone", due = 2026-03-20, visibility = "score",
        visibility_after_due = "names", grades = 2026-03-27, visibility_after_grades = "full" },
    ]

``grades`` is the date grades are released. Without a due date an assignment keeps its
``visibility`` all term (a course-wide ``visibility_after_due`` applies only where there
is a due date); ``visibility_after_grades`` needs ``grades``. A date means its first
minute; a date-time without a zone is local time, as everywhere in ``course.toml``.

The check service and the Course panel's view read the setting in force when they answer
(:meth:`autograder.workspace.outline.AssignmentEntry.visibility_at`), and the panel's view carries
the next change (:func:`next_change`: when, and what will be shown then). ``autograder
feedback`` follows the same rule: its pages show every check's message, so it releases
them once the setting in force is ``full`` (``--force`` before).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator


def as_datetime(value: dt.date | dt.datetime, tz=None) -> dt.datetime:
    """A date is its first minute; a naive date-time is local time (as in the file)."""
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    if value.tzinfo is None:
        value = value.astimezone()  # local time
    return value.astimezone(tz) if tz else value


def _moment(value: dt.date | dt.datetime, tz) -> dt.datetime:
    return as_datetime(value, tz)


def phases(entry) -> Iterator[tuple[dt.date | dt.datetime | None, str]]:
    """``(from when, visibility)`` of an assignment entry, in order; the first from
    ``None`` (always)."""
    yield None, entry.visibility_before_due
    if entry.due is not None and entry.visibility_after_due is not None:
        yield entry.due, entry.visibility_after_due
    if entry.grades is not None and entry.visibility_after_grades is not None:
        yield entry.grades, entry.visibility_after_grades


def visibility_at(entry, now: dt.datetime) -> str:
    """The visibility in force at ``now`` (an aware date-time)."""
    current = entry.visibility_before_due
    for start, visibility in phases(entry):
        if start is None or now >= _moment(start, now.tzinfo):
            current = visibility
    return current


def next_change(entry, now: dt.datetime) -> tuple[dt.datetime, str] | None:
    """When the visibility next changes after ``now``, and to what; ``None`` if never."""
    current = visibility_at(entry, now)
    for start, visibility in phases(entry):
        if start is None:
            continue
        moment = _moment(start, now.tzinfo)
        if moment > now and visibility != current:
            return moment, visibility
    return None


def next_visibility(entry, now: dt.datetime | None = None) -> dict | None:
    """The next change for the Course panel, as JSON: ``{"at": ISO date-time,
    "visibility": ...}``, or ``None``."""
    found = next_change(entry, now or dt.datetime.now().astimezone())
    return None if found is None else {"at": found[0].isoformat(), "visibility": found[1]}


def feedback_hold(entry, now: dt.datetime | None = None) -> str | None:
    """Why feedback on an assignment must wait, or ``None``. Feedback pages show every
    check's name and message (``full``); while the calendar still has a change to come
    and the setting in force shows less, they wait for the calendar. (Without a calendar
    the setting never changes, and feedback is the instructor's to release.)"""
    if entry is None:
        return None
    now = now or dt.datetime.now().astimezone()
    shown, coming = visibility_at(entry, now), next_change(entry, now)
    if shown == "full" or coming is None:
        return None
    full = [_moment(start, now.tzinfo) for start, visibility in phases(entry)
            if start is not None and visibility == "full" and _moment(start, now.tzinfo) > now]
    when = (f"until {min(full).isoformat(timespec='minutes')}, when it shows everything"
            if full else f"and from {coming[0].isoformat(timespec='minutes')} '{coming[1]}'")
    return (f"feedback on {entry.name} shows every check's message, but course.toml shows "
            f"students '{shown}' now, {when}: release it then")


def check(entry, where: str) -> None:
    """Raise ``CourseError`` for settings that cannot take effect (they would be ignored
    silently otherwise)."""
    from .assignment_spec import CourseError

    if entry.visibility_after_due is not None and entry.due is None:
        raise CourseError(f"{where}: visibility_after_due needs a due date (due = 2026-01-26)")
    if entry.visibility_after_grades is not None and entry.grades is None:
        raise CourseError(f"{where}: visibility_after_grades needs the date grades are "
                          "released (grades = 2026-02-02)")
    if entry.grades is not None and entry.due is not None and \
            as_datetime(entry.grades) < as_datetime(entry.due):
        raise CourseError(f"{where}: grades {entry.grades} comes before due {entry.due}")
