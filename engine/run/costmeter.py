"""A run's money: price × time the node has been alive, split by phase, and the caps.

Cost is not an in-memory stopwatch: it counts from the node handle's `created_at`
(wall clock; for a rented node the ledger's start, which the node's own meter counts
from too: the provider's reported start, else the moment before the create, see
agent/budget.billing_start) and is split by the run's phase clock (wall clock, replayed
from events.jsonl after a restart). So an engine killed and restarted any number of
times shows the same dollars, and `max_dollars` / `max_hours` are enforced on the
node's whole life, not on the last process's share.
The caps are checked every second (overshoot ≤ ~1 s of price, plus the teardown);
the Cost event is published every few seconds. The node keeps the same meter with the
same formula (agent/budget.py) for when this process is not there to.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING

from agent.budget import cap_reason
from engine.report import events as ev
from engine.run import fsm
from engine.run.runrecord import cost_by_phase

if TYPE_CHECKING:
    from engine.jobs.pools import Caps
    from engine.providers.base import NodeHandle
    from engine.run.orchestrator import RunDriver

CAP_CHECK_S = 1.0
COST_EVENT_EVERY_S = 5.0


def over_cap(caps: Caps, price_per_hour: float | None, alive_s: float) -> str | None:
    """Why a run whose node has lived `alive_s` at `price_per_hour` must stop, or None while
    it is within `caps`. Reaching a cap is over it: the next check is a second later. The
    node keeps the same caps by the same definition when its operator is away
    (agent/budget.py)."""
    return cap_reason(alive_s, price_per_hour, caps.max_dollars, caps.max_hours)


class CostMeter:
    """Publishes the run's cost and stops the run, like an operator stop, past a cap."""

    def __init__(self, driver: RunDriver) -> None:
        self._d = driver
        self._handle: NodeHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._end: float | None = None  # the node ended by then at the latest (end_by)

    def start(self, handle: NodeHandle) -> None:
        """Meter `handle` (once per node: a recovered run starts it when it resumes, a
        run whose node failed its pre-flight again for the next one)."""
        if handle.created_at is None:
            handle.created_at = time.time()  # not known (an old record): bill from now
        if self._handle is not None and handle is not self._handle:
            self._end = None  # a replacement node (pre-flight): it bills until it ends
        self._handle = handle
        caps = self._d.pool.caps
        wanted = handle.price_per_hour is not None or caps.max_hours is not None
        if wanted and self._task is None:
            self._task = asyncio.create_task(self._tick())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def end_by(self, at: float | None) -> None:
        """The node was gone by epoch `at` at the latest: destroyed then, or ended by its
        own timers while nobody drove it (engine/run/nodeend.py); None: it is alive again
        (its agent spoke), and bills up to now."""
        self._end = at

    def destroyed(self, at: float) -> None:
        """The node was destroyed at `at`: it billed up to then (or up to an earlier end
        its own timers set while nobody drove it)."""
        self._end = at if self._end is None else min(self._end, at)

    def _until(self) -> float:
        now = time.time()
        return now if self._end is None else min(now, self._end)

    @property
    def _price(self) -> float | None:
        return self._handle.price_per_hour if self._handle else None

    def _alive_s(self) -> float:
        assert self._handle is not None and self._handle.created_at is not None
        return max(0.0, self._until() - self._handle.created_at)

    def by_phase(self) -> dict[str, float]:
        """Dollars per phase so far ({} when the node has no price)."""
        if self._handle is None or self._price is None:
            return {}
        end = self._until()
        spans = [(p, b, min(e, end)) for p, b, e in self._d.clock.spans(end)]
        return cost_by_phase(self._price, spans, self._handle.created_at)

    def publish_final(self) -> None:
        if self._price is not None:
            self._publish()

    def _publish(self) -> None:
        by_phase = self.by_phase()
        dollars = sum(by_phase.values())
        self._d.publish(ev.Cost(run_id=self._d.view.run_id, dollars=dollars, by_phase=by_phase))

    def _over_cap(self) -> str | None:
        """The reason to stop the run, or None while it is within its caps."""
        return over_cap(self._d.pool.caps, self._price, self._alive_s())

    async def _tick(self) -> None:
        """Check every second for as long as the run lives: a stop posted in a phase that
        cannot act on it is ignored, so the next check posts it again."""
        last_event = float("-inf")
        stopping = False
        since = self._handle.created_at if self._handle else None
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                if self._handle is not None and self._handle.created_at != since:
                    # its provider reported the node's start: kept for an adopter and gc
                    since = self._handle.created_at
                    self._d.remember(handle=dataclasses.asdict(self._handle))
                if (reason := self._over_cap()) is not None:
                    if self._price is not None and not stopping:
                        self._publish()
                    stopping = True
                    self._d.post(fsm.OperatorStop(reason))
                if self._price is not None and time.monotonic() - last_event >= COST_EVENT_EVERY_S:
                    last_event = time.monotonic()
                    self._publish()
                await asyncio.sleep(CAP_CHECK_S)
