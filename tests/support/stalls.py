"""How long the event loop went without a turn: what a user feels as a frozen console."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

TICK_S = 0.01


@dataclass
class Stalls:
    """`longest_s`: the longest gap between two turns (wall time, waits for a core
    included); `busiest_s`: the most CPU the loop's thread used between two turns — the
    work that held the loop, whatever the machine's load (a loaded machine stretches the
    first, not the second)."""

    longest_s: float = 0.0
    busiest_s: float = 0.0
    last: float = field(default_factory=time.monotonic)
    last_cpu: float = field(default_factory=time.thread_time)

    def restart(self) -> None:
        """Count from now on only (what came before, e.g. an app's start, is not asked about)."""
        self.longest_s = self.busiest_s = 0.0
        self.last, self.last_cpu = time.monotonic(), time.thread_time()

    def turn(self) -> None:
        """The loop turned now: the time since the last turn, less the tick, was a stall."""
        now, cpu = time.monotonic(), time.thread_time()
        self.longest_s = max(self.longest_s, now - self.last - TICK_S)
        self.busiest_s = max(self.busiest_s, cpu - self.last_cpu)
        self.last, self.last_cpu = now, cpu


@contextlib.asynccontextmanager
async def watched_loop() -> AsyncIterator[Stalls]:
    """Within the block, the longest gap between two turns of a task that asks for one
    every TICK_S, from entering the block to leaving it (a block that blocks the loop at
    once, before the task's first turn, counts too).

    The heap the test process built before the block is frozen for it: a full collection
    walks every object a test worker has kept from the hundreds of tests before (0.17 s of
    the loop's CPU once, late in a full suite), which is the test process's history, not
    the work the block measures."""
    gc.collect()
    gc.freeze()
    stalls = Stalls()

    async def tick() -> None:
        while True:
            await asyncio.sleep(TICK_S)
            stalls.turn()

    ticker = asyncio.create_task(tick())
    try:
        yield stalls
    finally:
        stalls.turn()
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
        gc.unfreeze()
