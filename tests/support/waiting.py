"""Wait for the condition that matters, with a deadline, instead of sleeping and hoping.

A loaded 2-core CI machine makes every fixed sleep a race; polling a cheap predicate
every 20 ms costs nothing and fails with a message that says what never happened."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

POLL_S = 0.02


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
    while not predicate():
        assert time.monotonic() < deadline, f"not met within {timeout:g} s: {what}"
        await pause(POLL_S)
    return time.monotonic()
