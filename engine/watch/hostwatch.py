"""Remember the hosts that let a run down (engine/state/badhosts.py): a subscriber to the
engine's datastream that notes each run's machine from its Node events and, when the run
ends because its node never joined or was lost, keeps that machine out of the pool's offer
selection for `bad_host_ttl_h` hours. The write is off the event loop; a failed one is
logged, never the run's problem."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from engine.jobs.pools import PoolSet
from engine.report import events as ev
from engine.report.datastream import Subscription
from engine.report.views import RunView
from engine.state import badhosts

BAD_ENDS = ("boot timeout", "node lost", "pre-flight failed")
"""How a run's reason starts when its host, not its job, let it down."""

log = logging.getLogger("swjob.engine")


class HostWatch:
    def __init__(
        self,
        sub: Subscription,
        ttl_of: Callable[[str], float],
        view_of: Callable[[str], RunView | None],
    ) -> None:
        self._sub = sub
        self._ttl_of = ttl_of  # pool name → its bad_host_ttl_h (0: remember nothing)
        self._view_of = view_of
        self._hosts: dict[str, tuple[str, str]] = {}  # run id → (provider, machine id)
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self._sub:
            if isinstance(event, ev.Node) and event.offer and event.offer.get("machine_id"):
                self._hosts[event.run_id] = (event.provider, str(event.offer["machine_id"]))
            elif isinstance(event, ev.Finished) and event.run_id in self._hosts:
                host = self._hosts.pop(event.run_id)
                if (event.reason or "").startswith(BAD_ENDS):
                    await self._remember(event, *host)

    async def _remember(self, event: ev.Finished, provider: str, machine: str) -> None:
        view = self._view_of(event.run_id)
        ttl_h = self._ttl_of(view.pool) if view is not None else 0.0
        if ttl_h <= 0:
            return
        try:
            await asyncio.to_thread(badhosts.remember, provider, machine, event.reason or "", ttl_h)
        except OSError as exc:
            log.warning("cannot remember bad host %s (%s): %s", machine, provider, exc)

    async def close(self) -> None:
        """Once the subscription has ended: the last run's host on record."""
        with contextlib.suppress(Exception):
            await self._task


def for_engine(
    pools: PoolSet,
    subscribe: Callable[[], Subscription],
    view_of: Callable[[str], RunView | None],
) -> HostWatch | None:
    """The engine's host watch, or None when no pool rents nodes that can be remembered."""
    if not any(pool.provider != "local" and pool.bad_host_ttl_h > 0 for pool in pools):
        return None

    def ttl_of(name: str) -> float:
        return pools.get(name).bad_host_ttl_h if name in pools else 0.0

    return HostWatch(subscribe(), ttl_of, view_of)
