"""Deadlines that count only the time this process ran.

An operator process stopped (Ctrl-Z, SIGSTOP), asleep with its laptop or starved by a
loaded machine reads nothing meanwhile: the heartbeats, the join or the bytes a node sent
then wait unread, which is no silence of the node. Such a stretch shows as a wait that
comes back late, so a `RunningDeadline` waits in short ticks, and after one that came
back paused it starts over: the peer backed off while we were away (QUIC retransmits,
the agent's redial), so what it sends comes a while after we run again. The boot
timeout, the wait for a node to reconnect, the node-loss watchdog and the collection's
stall guard all use it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

TICK_S = 1.0
JITTER_S = 0.1  # lateness a busy event loop gives any wait; not a pause


def not_running_s(asked_at: float, wait_s: float, tick_s: float) -> float:
    """How long this process was not running during a wait of `wait_s` asked at monotonic
    `asked_at`: the wait's lateness, once past a whole tick (less is a busy loop's delay).
    Judged against the tick, not the wait: a deadline's last wait is short, and a loop
    held up a little longer than it by other work is no pause — counted as one, it put
    the deadline off again and again on a busy console, which never saw it pass."""
    late = time.monotonic() - asked_at - wait_s
    return late if late > max(tick_s, JITTER_S) else 0.0


class DeadlinePassed(Exception):
    """The deadline passed before the work it bounds was done (never the work's own error)."""


class RunningDeadline:
    """`seconds` from its start, its last `restart()` or the end of the last pause of this
    process, whichever came last."""

    def __init__(self, seconds: float, tick_s: float = TICK_S) -> None:
        self.seconds = seconds
        self._tick = min(tick_s, seconds / 4)
        self._start = time.monotonic()

    def restart(self) -> None:
        self._start = time.monotonic()

    def left(self) -> float:
        return self.seconds - (time.monotonic() - self._start)

    async def wait(self, work: Awaitable[T]) -> T:
        """`work`'s result, or DeadlinePassed once the deadline passed first (`work` is then
        cancelled)."""
        task = asyncio.ensure_future(work)
        try:
            while (left := self.left()) > 0:
                asked, wait = time.monotonic(), min(self._tick, left)
                done, _ = await asyncio.wait({task}, timeout=wait)
                if done:
                    return task.result()
                if not_running_s(asked, wait, self._tick):
                    self.restart()
            raise DeadlinePassed(f"{self.seconds:g} s passed")
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def passed(self) -> None:
        """Return once the deadline has passed (restarts put it off)."""
        with contextlib.suppress(DeadlinePassed):
            await self.wait(asyncio.get_running_loop().create_future())
