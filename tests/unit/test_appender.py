"""engine/report/appender.py: lines land whole and in order, a stuck disk never holds up the
writer's caller, and a failed write is raised, not lost. A FIFO nobody reads stands in for
a disk that makes writers wait; /dev/full for one that fails."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from engine.report.appender import open_append


def test_lines_land_whole_and_in_the_order_written_across_files(tmp_path: Path) -> None:
    a, b = open_append(tmp_path / "a.log"), open_append(tmp_path / "b.log")
    for i in range(2000):
        (a if i % 3 else b).write(f"line {i}\n" * (1 + i % 4))
    a.close()
    b.close()
    for name, keep in (("a.log", lambda i: i % 3), ("b.log", lambda i: not i % 3)):
        expected = "".join(f"line {i}\n" * (1 + i % 4) for i in range(2000) if keep(i))
        assert (tmp_path / name).read_text() == expected
    assert (tmp_path / "a.log").stat().st_mode & 0o777 == 0o600


def test_a_stuck_disk_never_blocks_write_and_close_waits_for_it(tmp_path: Path) -> None:
    fifo = tmp_path / "slow"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        stuck = open_append(fifo)
        line = "x" * 1023 + "\n"
        started = time.perf_counter()
        for _ in range(1024):  # 1 MiB: the pipe holds 64 KiB, so the writer thread blocks
            stuck.write(line)
        assert time.perf_counter() - started < 0.5
        closing = threading.Thread(target=stuck.close)
        closing.start()
        closing.join(0.3)
        assert closing.is_alive()  # close waits for the lines still queued
        got = bytearray()
        while closing.is_alive() or len(got) < 1 << 20:
            try:
                got += os.read(reader, 1 << 16)
            except BlockingIOError:
                time.sleep(0.001)
        assert got.decode() == line * 1024
    finally:
        os.close(reader)


def test_a_failed_write_is_raised_by_the_next_call() -> None:
    full = open_append(Path("/dev/full"))
    full.write("lost\n")
    with pytest.raises(OSError) as info:
        full.close()
    assert info.value.errno == errno.ENOSPC


async def test_written_waits_for_the_lines_before_it_without_blocking_the_loop(
    tmp_path: Path,
) -> None:
    """What a run's commands wait for: the transition that ordered them on its file."""
    fifo = tmp_path / "slow"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        stuck = open_append(fifo)
        line = "y" * 1023 + "\n"
        for _ in range(256):  # 256 KiB: more than the pipe holds
            stuck.write(line)
        waiting = asyncio.ensure_future(stuck.written())
        await asyncio.sleep(0.2)  # the loop turns meanwhile
        assert not waiting.done()  # the lines are not on the file yet
        got = bytearray()
        while not waiting.done():
            with contextlib.suppress(BlockingIOError):
                got += os.read(reader, 1 << 16)
            await asyncio.sleep(0.001)
        while len(got) < 256 * 1024:  # written() returned: every line is in the pipe
            got += os.read(reader, 1 << 16)
        assert got.decode() == line * 256
        stuck.close()
    finally:
        os.close(reader)
