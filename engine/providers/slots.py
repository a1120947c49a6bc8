"""A pool's `max_nodes` within one engine: how many of its nodes may exist at once.

A node this engine provisions waits for a free slot, first come first served (the run
stays PENDING, "queued"). A node it adopts from an engine that died takes a slot without
waiting — refusing to own a running node would be worse — even past the limit; the runs
queued here then wait for it as for one of their own, so a restarted console that
adopts a pool's running node and the run that was queued behind it starts that run
only once the node is gone.
"""

from __future__ import annotations

import asyncio
from collections import deque


class Slots:
    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._used = 0
        self._waiting: deque[asyncio.Future[None]] = deque()

    @property
    def used(self) -> int:
        return self._used

    async def take(self) -> None:
        """Wait for a free slot (after those already waiting) and take it."""
        if self._used < self._limit and not self._waiting:
            self._used += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter  # resolved by give_back, with the slot already counted as ours
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed one as we were cancelled
                self.give_back()
            raise
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)

    def hold(self) -> None:
        """Count an adopted node: never waits, may go past the limit."""
        self._used += 1

    def give_back(self) -> None:
        """A node is gone (or was never made): its slot goes to the longest waiting."""
        self._used -= 1
        while self._waiting and self._used < self._limit:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._used += 1
                waiter.set_result(None)
