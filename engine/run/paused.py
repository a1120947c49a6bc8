"""Deadlines that count only the time this process ran.

An operator process stopped (Ctrl-Z, SIGSTOP), asleep with its laptop or starved by a
loaded machine reads nothing meanwhile: the heartbeats, the join or the bytes a node sent
then wait unread, which is no silence of the node. Such a stretch shows as a wait that
comes back late, and a `RunningDeadline` that sees one starts over: the peer backed off
while we were away (QUIC retransmits, the agent's redial), so what it sends comes a while
after we run again. The boot timeout, the wait for a node to reconnect, the node-loss
watchdog and the collection's stall guard all use it.

A deadline waits for its whole remainder at once; the pauses in between are seen by one
ticker per event loop (`_PauseClock`), however many deadlines wait. Each deadline used
to wait in ticks of its own: a hundred idle runs' silence watches woke the loop a hundred
times a second, an `asyncio.wait` each (~50 µs of CPU), and every transfer's stall guard
and wait for a connection added theirs.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
import weakref
from collections import Counter
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


class _PauseClock:
    """Notes when this process last came back from a pause: one ticker task on the loop,
    running while any deadline waits, at the shortest tick among them."""

    def __init__(self) -> None:
        self.resumed_at = -math.inf  # monotonic time the last pause seen ended
        self._ticks: Counter[float] = Counter()  # the waiting deadlines' ticks
        self._task: asyncio.Task[None] | None = None

    def join(self, tick_s: float) -> None:
        self._ticks[tick_s] += 1
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    def leave(self, tick_s: float) -> None:
        self._ticks[tick_s] -= 1
        if not self._ticks[tick_s]:
            del self._ticks[tick_s]
        if not self._ticks and self._task is not None:
            self._task.cancel()  # nothing waits: no wake-ups of an idle loop
            self._task = None

    async def _run(self) -> None:
        while self._ticks:
            tick = min(self._ticks)
            asked = time.monotonic()
            await asyncio.sleep(tick)
            if not_running_s(asked, tick, tick):
                self.resumed_at = time.monotonic()


_CLOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _PauseClock] = (
    weakref.WeakKeyDictionary()
)


def _clock() -> _PauseClock:
    loop = asyncio.get_running_loop()
    clock = _CLOCKS.get(loop)
    if clock is None:
        clock = _CLOCKS[loop] = _PauseClock()
    return clock


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
        clock = _clock()
        clock.join(self._tick)
        try:
            while (left := self.left()) > 0:
                asked = time.monotonic()
                done, _ = await asyncio.wait({task}, timeout=left)
                if done:
                    return task.result()
                if not_running_s(asked, left, self._tick):  # paused as its time came
                    self.restart()
                elif clock.resumed_at > self._start:  # paused before: over from its end
                    self._start = clock.resumed_at
            raise DeadlinePassed(f"{self.seconds:g} s passed")
        finally:
            clock.leave(self._tick)
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

    async def passed(self) -> None:
        """Return once the deadline has passed (restarts put it off)."""
        with contextlib.suppress(DeadlinePassed):
            await self.wait(asyncio.get_running_loop().create_future())
