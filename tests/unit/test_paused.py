"""Deadlines that count only the time this process ran (engine/run/paused.py): a wait that
came back a whole tick late is a pause and starts the deadline over; a loop merely kept
busy by other work is not, or a busy console would never see a node's deadline pass."""

from __future__ import annotations

import asyncio
import time

from engine.run.paused import RunningDeadline


async def _hold_the_loop(every_s: float, for_s: float) -> None:
    """Other work on the loop: `for_s` of it after every `every_s` of waiting."""
    while True:
        await asyncio.sleep(every_s)
        time.sleep(for_s)


async def test_a_loop_kept_busy_below_a_tick_still_sees_its_deadline_pass() -> None:
    busy = asyncio.ensure_future(_hold_the_loop(0.01, 0.3))  # the tick is 0.5 s
    started = time.monotonic()
    try:
        await asyncio.wait_for(RunningDeadline(2.0, tick_s=0.5).passed(), 10)
    finally:
        busy.cancel()
    assert time.monotonic() - started >= 2.0


async def test_a_pause_longer_than_a_tick_starts_the_deadline_over() -> None:
    deadline = RunningDeadline(1.0, tick_s=0.25)
    passing = asyncio.ensure_future(deadline.passed())
    await asyncio.sleep(0.5)
    started = time.monotonic()
    time.sleep(1.0)  # the process stopped (SIGSTOP, a laptop's sleep) past the deadline
    await asyncio.wait_for(passing, 10)
    assert time.monotonic() - started >= 1.9  # the pause, then a whole deadline after it


async def test_a_pause_that_ends_before_the_deadline_is_due_still_starts_it_over() -> None:
    deadline = RunningDeadline(1.2, tick_s=0.2)
    passing = asyncio.ensure_future(deadline.passed())
    await asyncio.sleep(0.1)
    time.sleep(0.6)  # stopped well before the deadline's time: only the loop's ticker sees it
    resumed = time.monotonic()
    await asyncio.wait_for(passing, 10)
    assert time.monotonic() - resumed >= 1.1  # a whole deadline after the pause's end


async def test_many_deadlines_share_one_ticker_which_stops_when_none_waits() -> None:
    deadlines = [RunningDeadline(5.0, tick_s=0.2) for _ in range(50)]
    work = asyncio.get_running_loop().create_future()
    waits = [asyncio.ensure_future(d.wait(work)) for d in deadlines]
    await asyncio.sleep(0.3)
    tickers = [t for t in asyncio.all_tasks() if "_PauseClock._run" in repr(t.get_coro())]
    assert len(tickers) == 1
    work.set_result("done")
    assert await asyncio.gather(*waits) == ["done"] * 50
    await asyncio.sleep(0)
    assert tickers[0].done()
