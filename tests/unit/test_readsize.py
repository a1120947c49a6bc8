"""Reads ask the iroh binding for little until data is waiting (agent/readsize.py): its
`read(n)` allocates and zeroes n bytes first, so a 1 MiB ask per heartbeat cost a 1 MiB
buffer per small message and held ~1 MiB per pending read."""

from __future__ import annotations

import os
import struct

from agent import protocol
from agent.readsize import CEILING, FLOOR, ReadSize
from agent.transfer import wire


def _frame(body: bytes) -> bytes:
    """A control frame as the Channel sends it: a 4-byte length, then the body."""
    return struct.pack(">I", len(body)) + body


class _Recording:
    """A stream whose bytes are all there (a fast link), recording each size asked for."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.asked: list[int] = []

    async def read(self, size_limit: int) -> bytes:
        self.asked.append(size_limit)
        piece, self._data = self._data[:size_limit], self._data[size_limit:]
        return piece

    async def read_exact(self, size: int) -> bytes:
        return await self.read(size)


def test_the_size_grows_while_reads_come_back_full_and_falls_after_a_short_one() -> None:
    size = ReadSize()
    assert size.now == FLOOR
    seen = []
    for _ in range(6):
        size.after(size.now)
        seen.append(size.now)
    assert seen == [4 * FLOOR, 16 * FLOOR, CEILING, CEILING, CEILING, CEILING]
    size.after(100)  # a heartbeat after a bulk read
    assert size.now == FLOOR
    size.after(0)  # the end of the stream
    assert size.now == FLOOR


def test_a_small_ceiling_bounds_every_read() -> None:
    size = ReadSize(ceiling=1000)
    assert size.now == 1000
    size.after(1000)
    assert size.now == 1000
    size.after(10)
    assert size.now == 1000


async def test_small_control_frames_are_read_with_small_asks() -> None:
    frames = b"".join(_frame(b"x" * 40) for _ in range(200))
    stream = _Recording(frames)
    reader = protocol.FrameReader(stream)
    got = [await reader.read_frame() for _ in range(200)]
    assert got == [b"x" * 40] * 200
    assert await reader.read_frame() is None
    assert max(stream.asked) <= 16 * FLOOR  # the stream was all there: it grew, but not to 1 MiB
    assert stream.asked[0] == FLOOR


async def test_a_bulk_frame_grows_the_asks_to_the_ceiling_and_arrives_whole() -> None:
    body = os.urandom(6 * CEILING)
    stream = _Recording(_frame(body))
    reader = protocol.FrameReader(stream)
    assert await reader.read_frame() == body
    assert stream.asked[:4] == [FLOOR, 4 * FLOOR, 16 * FLOOR, CEILING]
    assert len(stream.asked) < 12  # not 16 KiB at a time


async def test_a_reader_held_to_a_small_frame_never_asks_for_more_than_it() -> None:
    stream = _Recording(_frame(b"y" * 50) * 100)
    reader = protocol.FrameReader(stream, max_frame=64)
    for _ in range(100):
        assert await reader.read_frame() == b"y" * 50
    assert max(stream.asked) <= 64 + 4


async def test_transfer_frames_read_small_pieces_small_and_large_bodies_whole() -> None:
    metas = b"".join(wire.record({"t": "dir", "p": f"d{i}", "m": 0o755}) for i in range(50))
    big = os.urandom(3 * CEILING + 5)
    stream = _Recording(metas + wire.frame(wire.DATA, big))
    reader = wire.FrameReader(stream, pace_s=0)
    for i in range(50):
        assert (await reader.next_meta())["p"] == f"d{i}"
    assert await reader.next_frame() == (wire.DATA, big)
    assert stream.asked[0] == FLOOR
    assert max(stream.asked) <= 3 * CEILING + 5
