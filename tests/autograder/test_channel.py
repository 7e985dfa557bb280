"""The one framing of the helper processes' pipes (:mod:`autograder.sandbox.inside.channel`).

Round trips over a real pipe, and each way a frame can be wrong: cut short, larger than
the cap (refused by the writer and by the reader, before the reader allocates it), not
JSON, or not there in time. Then each of the three helpers is seen speaking it.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading

import pytest

from autograder.sandbox.inside import channel


@pytest.fixture
def pipe():
    read_end, write_end = os.pipe()
    yield read_end, write_end
    for fd in (read_end, write_end):
        try:
            os.close(fd)
        except OSError:
            pass


def test_messages_round_trip_in_order(pipe):
    read_end, write_end = pipe
    messages = [{"op": "spawn", "env": {"PATH": "/usr/bin"}, "limits": {"as": 2**33}},
                {"exit": None}, ["é", 1.5, True], "", 0]
    for message in messages:
        channel.send(write_end, message)
    assert [channel.receive(read_end, timeout=5) for _ in messages] == messages


def test_a_frame_is_a_big_endian_length_then_the_payload(pipe):
    read_end, write_end = pipe
    channel.send(write_end, {"ready": True})
    assert os.read(read_end, 100) == b"\x00\x00\x00\x0f" + b'{"ready": true}'


def test_a_message_larger_than_a_pipe_buffer_arrives_whole(pipe):
    read_end, write_end = pipe
    message = {"blob": "x" * (3 * 2**20)}  # more than a pipe holds: the writer blocks
    writer = threading.Thread(target=channel.send, args=(write_end, message))
    writer.start()
    assert channel.receive(read_end, timeout=30) == message
    writer.join()


def test_bytes_frames_carry_any_payload(pipe):
    read_end, write_end = pipe
    payload = bytes(range(256)) * 10
    channel.send_bytes(write_end, payload)
    assert channel.receive_bytes(read_end, timeout=5) == payload


def test_a_closed_pipe_between_frames_is_channel_closed(pipe):
    read_end, write_end = pipe
    channel.send(write_end, {"a": 1})
    os.close(write_end)
    assert channel.receive(read_end) == {"a": 1}
    with pytest.raises(channel.ChannelClosed):
        channel.receive(read_end)


@pytest.mark.parametrize("cut", [2, 4 + 3], ids=["inside-the-header", "inside-the-payload"])
def test_a_truncated_frame_is_an_error_not_a_short_message(pipe, cut):
    read_end, write_end = pipe
    frame = channel.HEADER.pack(10) + b'{"a": 123}'
    os.write(write_end, frame[:cut])
    os.close(write_end)
    with pytest.raises(channel.TruncatedFrame, match="closed the pipe"):
        channel.receive(read_end)


def test_the_writer_refuses_a_frame_over_the_cap(pipe):
    read_end, write_end = pipe
    with pytest.raises(channel.FrameTooLarge, match="exceeds this channel's cap of 64 bytes"):
        channel.send(write_end, {"blob": "x" * 100}, cap=64)
    channel.send(write_end, {"ok": 1}, cap=64)  # nothing of the refused one was written
    assert channel.receive(read_end, cap=64, timeout=5) == {"ok": 1}


def test_the_reader_refuses_a_frame_over_the_cap_before_reading_it(pipe):
    read_end, write_end = pipe
    # A header that announces 3 GiB: refused from the header alone, nothing allocated.
    os.write(write_end, channel.HEADER.pack(3 * 2**30))
    with pytest.raises(channel.FrameTooLarge, match="3,221,225,472 bytes.*cap is 4,194,304"):
        channel.receive(read_end, timeout=5)


def test_a_payload_that_is_not_json_is_a_channel_error(pipe):
    read_end, write_end = pipe
    channel.send_bytes(write_end, b"\x80not json")
    with pytest.raises(channel.ChannelError, match="not JSON"):
        channel.receive(read_end, timeout=5)


def test_a_reader_that_waits_too_long_gets_a_timeout(pipe):
    read_end, write_end = pipe
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(read_end, timeout=0.05)
    # Half a frame, then silence: the same.
    os.write(write_end, channel.HEADER.pack(10) + b"{")
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(read_end, timeout=0.05)


def test_every_error_is_an_os_error():
    """The helpers' callers already treat OSError as "the helper stopped": a broken
    frame falls back the same way (a fresh interpreter, a replaced helper)."""
    for error in (channel.ChannelClosed, channel.TruncatedFrame, channel.FrameTooLarge,
                  channel.ChannelTimeout):
        assert issubclass(error, channel.ChannelError) and issubclass(error, OSError)


def test_the_zygote_speaks_framed_json(tmp_path):
    """The fork server's sandbox side, started by hand without a sandbox: it preloads
    nothing, says it is ready, answers a poll, and stops on ``quit``."""
    from autograder.sandbox import forkserver

    zygote = forkserver._ZYGOTE_FILE
    process = subprocess.Popen([sys.executable, str(zygote)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, cwd=tmp_path)
    try:
        assert channel.receive(process.stdout, timeout=60) == {"ready": True, "preloaded": []}
        channel.send(process.stdin, {"op": "poll", "pid": 1})
        assert channel.receive(process.stdout, timeout=30) == {"exit": -1}
        channel.send(process.stdin, {"op": "no-such-op"})
        assert "unknown op" in channel.receive(process.stdout, timeout=30)["error"]
        channel.send(process.stdin, {"op": "quit"})
        assert process.wait(timeout=30) == 0
    finally:
        process.kill()
        process.wait()


def test_the_oracle_frames_its_pickled_messages():
    """The mistake oracle puts a pickle in each frame (both ends are the grader's own
    code); an error it reports comes back framed too."""
    from autograder.grading import oracle

    read_end, write_end = os.pipe()
    try:
        oracle._write(write_end, {"error": "a variant failed"})
        size = channel.HEADER.unpack(os.read(read_end, channel.HEADER.size))[0]
        assert pickle.loads(os.read(read_end, size)) == {"error": "a variant failed"}
        oracle._write(write_end, {"replies": []})
        assert oracle._read(read_end, timeout=5) == {"replies": []}
        assert oracle.MAX_MESSAGE > channel.MAX_FRAME  # tensors travel in its frames
    finally:
        os.close(read_end)
        os.close(write_end)
