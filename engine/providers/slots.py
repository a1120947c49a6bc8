"""A pool's `max_nodes`: how many of its nodes may exist at once, across every swjob
process of this user (two terminals, two consoles share a pool's limit).

A node this engine provisions waits for a free slot, first come first served (the run
stays PENDING, "queued"). A node it adopts from an engine that died takes a slot without
waiting — refusing to own a running node would be worse — even past the limit; the runs
queued here then wait for it as for one of their own, so a restarted console that
adopts a pool's running node and the run that was queued behind it starts that run
only once the node is gone.

Across processes a slot is a lock file of the pool (`<state dir>/slots/pool-<name>/<i>`)
held with flock by the process whose node it is, and naming the run the node is for. The
OS drops the lock when that process dies, however it dies, but the node may live on (a
`kill -9`'d `swjob run` leaves its node running for an adopter): a slot whose file names
a run the run index still lists as unfinished stays taken until that run ends — adopted
and carried to its end, or settled by `swjob gc` — and the adopter locks that very file
again for the node it takes over. A node kept warm for the pool's next run
(engine/state/warmnodes.py) holds no slot file but counts as taken while it is parked;
the run that claims it takes a slot as an adopter does. Slot files past the limit count
too: a process started before the user lowered max_nodes may hold one, and its node is
as real as the others.
A run whose node its provider confirms gone (a node that gave up on its own while nobody
drove its run: `node_gone`) holds its slot no more.
A process whose pool slots are all taken elsewhere
waits, looking again every SHARED_POLL_S, and says once why. Before, `max_nodes` held
within one process only: two `swjob run` on a one-node Vast.ai pool rented two instances
at once; and a dead operator's node was not counted at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import inspect
import os
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import BinaryIO
from urllib.parse import quote

from agent.fdio import write_all
from engine.state import warmnodes
from engine.state.paths import state_dir
from engine.state.planted import own_subdir, refuse_planted
from engine.state.store import run_unfinished

SHARED_POLL_S = 0.5


def pool_slots(pool: str) -> Path:
    """The directory of `pool`'s slot lock files, in the state dir."""
    return state_dir() / "slots" / f"pool-{quote(pool, safe='')}"


class Slots:
    def __init__(
        self,
        limit: int,
        pool: str | None = None,
        node_gone: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        """`pool`: the pool's name, whose slots every swjob process shares; None: this
        engine's only. `node_gone(run)`: whether the provider confirms that the node of
        a run whose operator died is gone (its slot is then free). A provider's own
        method is held weakly: a strong one would tie the provider and these slots in a
        cycle, and an engine dropped without tearing down would keep its slot files
        locked until the cycle collector ran, not let them go at once (below)."""
        self._node_gone: Callable[[], Callable[[str], Awaitable[bool]] | None] | None = None
        if inspect.ismethod(node_gone):
            self._node_gone = weakref.WeakMethod(node_gone)
        elif node_gone is not None:
            self._node_gone = lambda: node_gone
        self._gone: set[str] = set()  # such runs: their slots are free
        self._limit = limit
        self._used = 0
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._pool = pool
        self._shared = pool_slots(pool) if pool is not None else None
        # run → the slot files it holds (name, file): files, not descriptors, so an engine
        # dropped without tearing down (a test's, a crashed one's) lets its locks go with it
        self._claims: dict[str, list[tuple[str, BinaryIO]]] = {}

    @property
    def used(self) -> int:
        return self._used

    async def take(self, run_id: str, say: Callable[[str], None] = lambda _message: None) -> None:
        """Wait for a free slot for `run_id`'s node (after those already waiting here) and
        take it; `say` is told once when every slot is taken by other processes' nodes."""
        await self._take_here()
        try:
            if (orphans := await self._claim_healed(run_id)) is not None:
                say(self._held_elsewhere(orphans))
                while await self._claim_healed(run_id) is not None:
                    await asyncio.sleep(SHARED_POLL_S)
        except BaseException:
            self._give_back_here()
            raise

    async def _claim_healed(self, run_id: str) -> list[str] | None:
        """`_claim`, once more after asking the provider about the dead operators' runs
        that hold slots: those whose nodes are gone free theirs."""
        orphans = self._claim(run_id)
        node_gone = self._node_gone() if self._node_gone is not None else None
        if not orphans or node_gone is None:
            return orphans
        gone = {run for run in orphans if run not in self._gone and await node_gone(run)}
        if not gone:
            return orphans
        self._gone |= gone
        return self._claim(run_id)

    def _held_elsewhere(self, orphans: list[str]) -> str:
        ours = sum(map(len, self._claims.values()))
        many = f"{self._limit - ours} of its {self._limit}" if ours else f"all {self._limit} of its"
        said = f"pool {self._pool}: {many} nodes (max_nodes) are held by other swjob processes"
        if orphans:
            whose = (
                "a run whose swjob process" if len(orphans) == 1 else "runs whose swjob processes"
            )
            said += (
                f", {len(orphans)} by {whose} died ({', '.join(orphans)}): "
                "`swjob attach RUN` carries it to its end, `swjob gc` collects its node"
            )
        if self._pool is not None and (warm := warmnodes.parked_in(self._pool)):
            said += f"; {warm} kept warm for a run they fit (`swjob nodes release` frees them)"
        return said + "; waiting for one"

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

    def hold(self, run_id: str) -> None:
        """Count an adopted node of `run_id`: never waits, may go past the limit. The slot
        file its dead operator held (naming the run) is locked again if there is one."""
        self._used += 1
        if not self._reclaim(run_id):
            self._claim(run_id)  # past the limit, it holds no file: counted here alone

    def give_back(self, run_id: str) -> None:
        """`run_id`'s node is gone (or was never made): its slot goes to the longest waiting."""
        held = self._claims.get(run_id)
        if held:
            _name, slot = held.pop()
            if not held:
                del self._claims[run_id]
            with contextlib.suppress(OSError):
                slot.truncate(0)  # names no run: free for anyone
            slot.close()  # closing drops its flock
        self._give_back_here()

    def _give_back_here(self) -> None:
        self._used -= 1
        while self._waiting and self._used < self._limit:
            waiter = self._waiting.popleft()
            if not waiter.done():
                self._used += 1
                waiter.set_result(None)

    def _claim(self, run_id: str) -> list[str] | None:
        """Lock a free slot file for `run_id`: None once one is ours, else the runs of dead
        operators among those holding the slots (the rest are held by live processes).
        The files held here count as taken unopened; with no file past the limit and no
        node parked, the first free one is taken at once (the ones after it cannot fill
        the pool). A hundred claims opened, locked and read ten thousand files before."""
        if self._shared is None:
            return None
        own_subdir(own_subdir(self._shared.parent) / self._shared.name)
        orphans: list[str] = []
        opened: list[int] = []  # closed at the end, but the one kept
        free: list[tuple[int, str]] = []
        names = self._slot_names()
        taken = warmnodes.parked_in(self._pool) if self._pool is not None else 0
        first_free_fits = taken == 0 and len(names) == self._limit
        mine = {name for held in self._claims.values() for name, _slot in held}
        try:
            for name in names:
                if name in mine:
                    taken += 1
                    continue
                fd = _locked(self._shared / name)
                if fd is None:
                    taken += 1  # a live process's node
                    continue
                opened.append(fd)
                named = _named(fd)
                if named and named not in (run_id, *self._gone) and run_unfinished(named):
                    taken += 1
                    orphans.append(named)
                elif int(name) < self._limit:
                    free.append((fd, name))  # (one past the limit is free, not one to take)
                    if first_free_fits:
                        break
            if taken >= self._limit or not free:
                return orphans
            opened.remove(free[0][0])
            self._keep(run_id, *free[0])
            return None
        finally:
            for fd in opened:
                os.close(fd)

    def _slot_names(self) -> list[str]:
        """The slot files' names below the limit (made when first locked), then any past
        it: a process started before max_nodes was lowered holds those, and its nodes
        count as well. Names, not paths: a path is made only for a file opened."""
        assert self._shared is not None
        past = [n for n in os.listdir(self._shared) if n.isdigit() and int(n) >= self._limit]
        return [*map(str, range(self._limit)), *sorted(past, key=int)]

    def _reclaim(self, run_id: str) -> bool:
        """Lock the slot file naming `run_id` (its dead operator's), wherever it is."""
        if self._shared is None:
            return True
        for path in self._shared.glob("*") if self._shared.is_dir() else ():
            fd = _locked(path)
            if fd is None:
                continue
            if _named(fd) == run_id:
                self._keep(run_id, fd, path.name)
                return True
            os.close(fd)
        return False

    def _keep(self, run_id: str, fd: int, name: str) -> None:
        slot = os.fdopen(fd, "r+b", buffering=0)
        slot.truncate(0)
        write_all(fd, run_id.encode())
        self._claims.setdefault(run_id, []).append((name, slot))


def _locked(path: Path) -> int | None:
    """The slot file open and locked, or None when another process holds it."""
    refuse_planted(path)  # a link is refused by the open, a fifo only here
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _named(fd: int) -> str:
    """The run a slot file names (empty: none)."""
    return os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
