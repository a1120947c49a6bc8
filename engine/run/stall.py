"""Giving up on a transfer that moves nothing: a node can hang, a link can black-hole.

Collection after a run must end even when the node stops sending without closing
anything (no error ever arrives): `StallGuard.run` cancels the transfer once no byte
has moved for `stall_s` and raises `Stalled`. Movement is whatever the transfer's
progress meter reports (at least every 0.1 s while bytes flow).
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import TypeVar

from engine.run.paused import DeadlinePassed, RunningDeadline

T = TypeVar("T")


class Stalled(Exception):
    """No byte moved for the stall deadline; the transfer was cancelled."""


class StallGuard:
    """Time this process was not running (Ctrl-Z, SIGSTOP, a starved machine) is no stall:
    the bytes that sat unread then move once it runs again (engine/run/paused.py)."""

    def __init__(self, stall_s: float) -> None:
        self.stall_s = stall_s
        self._quiet = RunningDeadline(stall_s)

    def moved(self) -> None:
        self._quiet.restart()

    async def run(self, work: Awaitable[T]) -> T:
        """`work`'s result, unless it goes `stall_s` without movement (then `Stalled`)."""
        self._quiet.restart()
        try:
            return await self._quiet.wait(work)
        except DeadlinePassed:
            raise Stalled(f"no bytes moved for {self.stall_s:g} s") from None
