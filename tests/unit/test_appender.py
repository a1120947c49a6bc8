"""engine/report/appender.py: lines land whole and in order, a stuck disk never holds up the
writer's caller, and a failed write is raised, not lost. A FIFO nobody reads stands in for
a disk that makes writers wait; /dev/full for one that fails."""

from __future__ import annotations

import errno
import os
import threading
import time
from pathlib import Path

import pytest

from engine.report import events as ev
from engine.report.appender import open_append
from engine.report.datastream import Datastream, read_events

LINE = {"stream": "stdout", "text": "a line"}


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


async def test_a_transition_is_on_the_file_when_publish_returns_a_log_line_may_wait(
    tmp_path: Path,
) -> None:
    """An operator killed right after a transition leaves a journal that says what was
    under way; log lines before it land first (one order), later ones within the turn."""
    stream, path = Datastream(), tmp_path / "events.jsonl"
    stream.open_run("r1", path)
    stream.publish(ev.Log(run_id="r1", step="run", lines=[LINE]))
    assert path.read_text() == ""  # queued: handed to the writer at the end of this turn
    entered = ev.Transition(
        run_id="r1", cause="NodeReady", from_state=None, to_state="RUNNING",
        from_phase="provisioning", to_phase="materializing",
    )  # fmt: skip
    stream.publish(entered)
    kinds = [e.kind for e in read_events(path)]  # not a turn later: now
    assert kinds == ["log", "transition"]
    stream.publish(ev.Log(run_id="r1", step="run", lines=[LINE]))
    await stream.close_run("r1")
    assert [e.kind for e in read_events(path)] == ["log", "transition", "log"]
