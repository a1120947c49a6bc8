"""Wait for the condition that matters, with a deadline, instead of sleeping and hoping.

A loaded 2-core CI machine makes every fixed sleep a race; polling a cheap predicate
every 20 ms costs nothing and fails with a message that says what never happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator

POLL_S = 0.02
MAX_POLL_S = 0.1


def eventually(predicate: Callable[[], object], timeout: float = 30.0, what: str = "") -> float:
    """Poll until `predicate` holds; the monotonic time it was first seen holding."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not met within {timeout:g} s: {what}"
        time.sleep(POLL_S)
    return time.monotonic()


async def eventually_async(
    predicate: Callable[[], object],
    timeout: float = 30.0,
    what: str = "",
    pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> float:
    """`eventually` for a test that runs on the event loop: the loop keeps turning while it
    waits (`pause`: what to await between looks, e.g. a Textual pilot's, which also lets
    the screen catch up)."""
    deadline = time.monotonic() + timeout
    pauses = intervals()
    while not predicate():
        assert time.monotonic() < deadline, f"not met within {timeout:g} s: {what}"
        await pause(next(pauses))
    return time.monotonic()


def intervals() -> Iterator[float]:
    """Pauses between looks: short at first (most conditions hold within a few), then
    longer, up to MAX_POLL_S. A console test's look is not cheap — the pilot's pause makes
    every widget take a turn and the screen refresh, and a predicate may render the screen
    (~25 ms) — so a 3 s wait looked 150 times and kept a core busy doing it."""
    interval = POLL_S / 2
    while True:
        yield interval
        interval = min(interval * 1.5, MAX_POLL_S)


class Changes:
    """A wake-up for tests whose state is changed by callbacks (an orchestrator receiving
    messages, a recorder of agent events): `until` re-checks its predicate at each
    `changed()`, so it neither polls nor misses a change made before it started waiting."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def changed(self) -> None:
        self._event.set()

    async def until(self, predicate: Callable[[], object], timeout: float) -> None:
        async with asyncio.timeout(timeout):
            while not predicate():
                self._event.clear()
                await self._event.wait()
