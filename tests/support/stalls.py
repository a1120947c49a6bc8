"""How long the event loop went without a turn: what a user feels as a frozen console."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

TICK_S = 0.01


@dataclass
class Stalls:
    longest_s: float = 0.0


@contextlib.asynccontextmanager
async def watched_loop() -> AsyncIterator[Stalls]:
    """Within the block, the longest gap between two turns of a task that asks for one
    every TICK_S (its own TICK_S taken off)."""
    stalls = Stalls()

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            now = time.monotonic()
            stalls.longest_s = max(stalls.longest_s, now - last - TICK_S)
            last = now

    ticker = asyncio.create_task(tick())
    try:
        yield stalls
    finally:
        ticker.cancel()
        await asyncio.gather(ticker, return_exceptions=True)
