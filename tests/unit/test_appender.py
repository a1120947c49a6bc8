"""engine/report/appender.py: lines land whole and in order, a stuck disk never holds up the
writer's caller, and a failed write is raised, not lost. A FIFO nobody reads stands in for
a disk that makes writers wait; /dev/full for one that fails."""

from __future__ import annotations

import asyncio
import errno
import os
import threading
import time
from pathlib import Path

import pytest

from engine.report import appender
from engine.report import events as ev
from engine.report.appender import open_append
from engine.report.datastream import Datastream, Subscription, read_events

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


def stuck_disk() -> threading.Event:
    """The writer thread held up, as behind a disk busy writing back, until the event is
    set (at the latest after 10 s, so code that waited for it fails rather than hangs)."""
    disk = threading.Event()
    appender.later(lambda: disk.wait(10))
    return disk


async def test_publish_never_waits_for_the_disk_and_a_transition_is_shown_once_on_file(
    tmp_path: Path,
) -> None:
    """The console never shows a transition a crash could take back, and what was
    published after it waits behind it; the loop waits for nothing."""
    stream, path = Datastream(), tmp_path / "events.jsonl"
    stream.open_run("r1", path)
    sub = stream.subscribe()
    disk = stuck_disk()
    started = time.perf_counter()
    stream.publish(ev.Log(run_id="r1", step="run", lines=[LINE]))
    entered = ev.Transition(
        run_id="r1", cause="NodeReady", from_state=None, to_state="RUNNING",
        from_phase="provisioning", to_phase="materializing",
    )  # fmt: skip
    stream.publish(entered)
    stream.publish(ev.Log(run_id="r1", step="run", lines=[LINE]))
    stream.publish(ev.Alert(run_id="", message="engine-wide, after the transition"))
    for _ in range(20):
        await asyncio.sleep(0)  # loop turns: the writer is handed everything
    assert time.perf_counter() - started < 5, "publish waited for the disk"
    assert [e.kind for e in _queued(sub)] == ["log"]
    assert path.read_text() == ""
    disk.set()
    shown = [await anext(sub) for _ in range(3)]
    assert [e.kind for e in shown] == ["transition", "log", "alert"]
    assert [e.kind for e in read_events(path)][:2] == ["log", "transition"]
    await stream.close_run("r1")
    assert [e.kind for e in read_events(path)] == ["log", "transition", "log"]


def _queued(sub: Subscription) -> list[ev.Event]:
    queued = []
    while (event := sub.get_nowait()) is not None:
        queued.append(event)
    return queued


async def test_later_runs_in_order_with_the_lines_and_written_waits_for_both(
    tmp_path: Path,
) -> None:
    """Record keeping handed to the writer (the run index's commits) comes after the
    lines written before it, and `written` returns once both are done."""
    log = open_append(tmp_path / "a.log")
    seen: list[str] = []
    disk = stuck_disk()
    log.write("first\n")
    appender.later(lambda: seen.append((tmp_path / "a.log").read_text()))
    log.write("second\n")
    waiting = asyncio.ensure_future(appender.written())
    for _ in range(20):
        await asyncio.sleep(0)
    assert not waiting.done() and seen == []
    disk.set()
    await waiting
    assert seen == ["first\n"]
    assert (tmp_path / "a.log").read_text() == "first\nsecond\n"
    await log.aclose()


async def test_what_later_work_raised_is_logged_and_never_raised_into_the_next(caplog) -> None:
    """Each work reports its own failures; one that escapes (a bug) must not land in an
    unrelated caller's `later` — another run's end, which could not act on it."""

    def broken() -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    appender.later(broken)
    await appender.written()
    ran: list[str] = []
    appender.later(lambda: ran.append("next"))
    await appender.written()
    assert ran == ["next"]
    assert "No space left on device" in caplog.text


async def test_work_that_settles_is_settled_once_a_batch_before_any_wait_is_answered() -> None:
    """The run index's saves in one pass of the writer are written in one commit: each
    save's work queues its row, and the commit (`settle`) runs once after them — before
    other record keeping, and before a wait queued among them is answered."""
    done: list[str] = []
    answered: list[list[str]] = []

    def settle() -> None:
        done.append("settle")

    disk = stuck_disk()  # everything below reaches the writer in one batch
    appender.later(lambda: done.append("a"), settle)
    appender.then(lambda: answered.append(list(done)))
    appender.later(lambda: done.append("b"), settle)
    appender.later(lambda: done.append("other"))
    appender.later(lambda: done.append("c"), settle)
    await asyncio.sleep(0)
    disk.set()
    await appender.written()
    assert done == ["a", "b", "settle", "other", "c", "settle"]
    assert answered and answered[0][:3] == ["a", "b", "settle"]
