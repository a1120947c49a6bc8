"""Giving up on a transfer that moves nothing: a node can hang, a link can black-hole.

Collection after a run must end even when the node stops sending without closing
anything (no error ever arrives): `StallGuard.run` cancels the transfer once no byte
has moved for `stall_s` and raises `Stalled`. Movement is whatever the transfer's
progress meter reports (at least every 0.1 s while bytes flow).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")

# A wait that comes back this much later than asked means this process did not run
# meanwhile (Ctrl-Z, SIGSTOP, a starved machine): the bytes that sat unread then are no
# stall of the transfer, so the transfer gets a whole `stall_s` from when it runs again.
PAUSED_S = 0.5


class Stalled(Exception):
    """No byte moved for the stall deadline; the transfer was cancelled."""


class StallGuard:
    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._last = time.monotonic()

    def moved(self) -> None:
        self._last = time.monotonic()

    async def run(self, work: Awaitable[T]) -> T:
        """`work`'s result, unless it goes `stall_s` without movement (then `Stalled`)."""
        self._last = time.monotonic()
        task = asyncio.ensure_future(work)
        try:
            while True:
                left = self.stall_s - (time.monotonic() - self._last)
                if left <= 0:
                    raise Stalled(f"no bytes moved for {self.stall_s:g} s")
                asked = time.monotonic()
                done, _ = await asyncio.wait({task}, timeout=left)
                if done:
                    return task.result()
                now = time.monotonic()
                if now - asked - left > PAUSED_S:  # this process did not run: the clock restarts
                    self._last = now
        finally:
            if not task.done():
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
