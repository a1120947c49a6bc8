"""A pool's `max_nodes`: how many of its nodes may exist at once, across every swjob
process of this user (two terminals, two consoles share a pool's limit).

A node this engine provisions waits for a free slot, first come first served (the run
stays PENDING, "queued"). A node it adopts from an engine that died takes a slot without
waiting — refusing to own a running node would be worse — even past the limit; the runs
queued here then wait for it as for one of their own, so a restarted console that
adopts a pool's running node and the run that was queued behind it starts that run
only once the node is gone.

Across processes a slot is a lock file of the pool (`<state dir>/slots/pool-<name>/<i>`)
held with flock by the process whose node it is: the OS drops it when that process dies
however it dies, so an adopter claims it again for the node it takes over. A process
whose pool slots are all held elsewhere waits, looking again every SHARED_POLL_S. Before
this, `max_nodes` held within one process only: two `swjob run` on a one-node Vast.ai
pool rented two instances at once.
"""

from __future__ import annotations

import asyncio
import fcntl
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from engine.state.paths import state_dir

SHARED_POLL_S = 0.5


def pool_slots(pool: str) -> Path:
    """The directory of `pool`'s slot lock files, in the state dir."""
    return state_dir() / "slots" / f"pool-{quote(pool, safe='')}"


class Slots:
    def __init__(self, limit: int, pool: str | None = None) -> None:
        """`pool`: the pool's name, whose slots every swjob process shares; None: this
        engine's only."""
        self._limit = limit
        self._used = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._pool = pool
        self._shared = pool_slots(pool) if pool is not None else None
        self._claims: list[BinaryIO] = []  # slot files this process holds, one per node
        self._unclaimed = 0  # nodes counted with no slot file (adopted past the limit)

    @property
    def used(self) -> int:
        return self._used

    async def take(self, say: Callable[[str], None] = lambda _message: None) -> None:
        """Wait for a free slot (after those already waiting here) and take it; `say` is
        told once when every slot is held by other processes (none of them here)."""
        await self._take_here()
        try:
            if not self._claim():
                say(
                    f"pool {self._pool}: all {self._limit} of its nodes (max_nodes) are "
                    "held by other swjob processes; waiting for one"
                )
                while not self._claim():
                    await asyncio.sleep(SHARED_POLL_S)
        except BaseException:
            self._give_back_here()
            raise

    async def _take_here(self) -> None:
        if self._used < self._limit and not self._waiting:
            self._used += 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await waiter  # resolved by give_back, with the slot already counted as ours
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():  # handed one as we were cancelled
                self._give_back_here()
            raise
        finally:
            if waiter in self._waiting:
                self._waiting.remove(waiter)

    def hold(self) -> None:
        """Count an adopted node: never waits, may go past the limit."""
        self._used += 1
        if not self._claim():
            self._unclaimed += 1

    def give_back(self) -> None:
        """A node is gone (or was never made): its slot goes to the longest waiting."""
        if self._unclaimed:
            self._unclaimed -= 1
        elif self._claims:
            self._claims.pop().close()  # closing drops its flock
        self._give_back_here()

    def _give_back_here(self) -> None:
        self._used -= 1
        while self._waiting and self._used < self._limit:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._used += 1
                waiter.set_result(None)

    def _claim(self) -> bool:
        """Lock a slot file no process holds; False when all `limit` of them are held."""
        if self._shared is None:
            return True
        self._shared.mkdir(mode=0o700, parents=True, exist_ok=True)
        for index in range(self._limit):
            slot = (self._shared / str(index)).open("ab")  # not inherited by children
            try:
                fcntl.flock(slot.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                slot.close()
                continue
            self._claims.append(slot)
            return True
        return False
