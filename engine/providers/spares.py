"""The standby agent the next local node may be: at most one at a time.

A local node's start is mostly its agent's imports. `swjob run` starts one agent in
standby before it imports the engine and hands it over, to be used once. The console
runs many jobs over its life, so its engine keeps a spare (`EngineConfig.keep_spare`):
started in the background once the engine is up, taken by the next local node, replaced
right after, and ended when the engine closes. A spare whose operator is killed sees
its stdin close and exits by itself (agent/standby.py): none outlives its operator.
"""

from __future__ import annotations

import asyncio

from engine.providers.localspawn import StandbyAgent


class Spares:
    def __init__(self, first: StandbyAgent | None = None, *, keep: bool = False) -> None:
        """`first`: an agent its starter already has running; `keep`: start another
        whenever there is none (after `fill`, until `close`)."""
        self._spare = first
        self._keep = keep
        self._starting: asyncio.Task[None] | None = None
        self._closed = False

    def fill(self) -> None:
        """Start a spare in the background, if one is kept and none is there or coming."""
        if self._keep and not self._closed and self._spare is None and self._starting is None:
            self._starting = asyncio.create_task(self._start(), name="spare agent")

    async def _start(self) -> None:
        try:
            self._spare = await StandbyAgent.start()  # None when it cannot be started
        finally:
            self._starting = None

    def take(self) -> StandbyAgent | None:
        """The spare, if one is running (one still being started is left to finish: the
        node then starts a fresh agent); the next one is started at once."""
        spare, self._spare = self._spare, None
        self.fill()
        return spare

    async def close(self) -> None:
        """End the spare no node took. One being started is awaited, not cancelled: a
        cancel could land after its process exists and leave it unowned."""
        self._closed = True
        starting = self._starting
        if starting is not None:
            await asyncio.gather(starting, return_exceptions=True)
        spare, self._spare = self._spare, None
        if spare is not None:
            await spare.close()
