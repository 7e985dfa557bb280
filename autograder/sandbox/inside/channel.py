"""One framing for every pipe between the grader and a helper process it started.

Three helpers speak to the grader over a pair of pipes: the fork server's zygote
(:mod:`autograder.sandbox.forkserver` ↔ :mod:`.zygote`), the warm script server
(:mod:`autograder.authoring.warm_script`) and the mistake oracle
(:mod:`autograder.grading.oracle`). Each message, either way, is one *frame*::

    +----------------------------+------------------------------+
    | length: 4 bytes, big-endian | payload: ``length`` bytes    |
    +----------------------------+------------------------------+

and the payload is UTF-8 JSON (:func:`send`, :func:`receive`). A frame is never larger
than the channel's cap, :data:`MAX_FRAME` unless the caller gives another: the writer
refuses to send a larger one and the reader refuses to read one (:class:`FrameTooLarge`),
so a confused or hostile peer cannot make the other end allocate without bound. A
peer that closes the pipe between frames is :class:`ChannelClosed`; one that closes it
inside a frame is a :class:`TruncatedFrame`; a reader that waits longer than its
``timeout`` gets :class:`ChannelTimeout`. After any of these the channel is out of step
and must be closed.

Only the oracle puts something other than JSON in a frame (pickled tensors, with
:func:`send_bytes` and :func:`receive_bytes`): both of its ends are the grader's own
code, which executes only instructor notebooks (see :mod:`autograder.grading.oracle`).

Frames are read and written on raw file descriptors (``os.read``, ``os.write``), never
through a buffered file object, so ``select`` sees exactly what is left to read. The
zygote imports this file inside the sandbox, where it lies beside it in
``/.autograder/``: standard library only.
"""

import json
import os
import select
import struct
import time

#: The frame header: the payload's length in bytes, unsigned, big-endian.
HEADER = struct.Struct("!I")
#: The default cap on one frame's payload (a fork server's spawn request, a script run).
MAX_FRAME = 4 * 2**20


class ChannelError(OSError):
    """The channel cannot deliver a message; it is out of step and must be closed."""


class ChannelClosed(ChannelError, EOFError):
    """The other end closed the pipe between two frames."""


class TruncatedFrame(ChannelError, EOFError):
    """The other end closed the pipe in the middle of a frame."""


class FrameTooLarge(ChannelError):
    """A frame larger than the channel's cap, refused by the writer or the reader."""


class ChannelTimeout(ChannelError, TimeoutError):
    """No complete frame arrived within the reader's time limit."""


def _fd(end) -> int:
    return end if isinstance(end, int) else end.fileno()


def send_bytes(end, payload: bytes, cap: int = MAX_FRAME) -> None:
    """Write one frame holding ``payload`` to ``end`` (a file descriptor or an object
    with ``fileno()``); :class:`FrameTooLarge` if it exceeds ``cap``."""
    if len(payload) > cap:
        raise FrameTooLarge(f"a message of {len(payload):,} bytes exceeds this channel's "
                            f"cap of {cap:,} bytes")
    data = memoryview(HEADER.pack(len(payload)) + payload)
    fd = _fd(end)
    while data:
        data = data[os.write(fd, data):]


def _read_exactly(fd: int, size: int, deadline: float | None, started: bool) -> bytes:
    chunks, left = [], size
    while left:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise ChannelTimeout("no complete message within the time limit")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            if started or chunks:
                raise TruncatedFrame(f"the other end closed the pipe {size - left:,} bytes "
                                     f"into a {size:,}-byte part of a message")
            raise ChannelClosed("the other end closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def receive_bytes(end, cap: int = MAX_FRAME, timeout: float | None = None) -> bytes:
    """Read one frame's payload from ``end``; waits at most ``timeout`` seconds in all
    (None: as long as it takes)."""
    fd = _fd(end)
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline, started=False))
    if size > cap:
        raise FrameTooLarge(f"the other end sent a message of {size:,} bytes; this "
                            f"channel's cap is {cap:,} bytes")
    return _read_exactly(fd, size, deadline, started=True)


def send(end, message, cap: int = MAX_FRAME) -> None:
    """Write ``message`` (anything JSON can hold) as one frame."""
    send_bytes(end, json.dumps(message).encode(), cap)


def receive(end, cap: int = MAX_FRAME, timeout: float | None = None):
    """Read one frame and decode its JSON."""
    payload = receive_bytes(end, cap, timeout)
    try:
        return json.loads(payload)
    except ValueError as exc:
        raise ChannelError(f"a message that is not JSON: {exc}") from None
