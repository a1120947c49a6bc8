"""Fall-over while a run provisions: its pool had nothing left for it, so it moves on.

A pool has nothing left when its provider raises PoolExhausted (engine/providers/base.py):
no offer under its limits, every offer tried taken or without capacity, or every node
tried failing host pre-flight. The provider has then given back the pool's slot and
closed the ledger rows of what it tried; the run moves to the next of its first pool's
`fallback` pools, which may be another provider's, and provisions there. Not on any other
failure: a refused key or a broken image fails the run where it is.

Each move is on record as it happens: the datastream's PoolPassed (the run's `pool`
becomes the one it moved to; run.json's `pools_passed` keeps each pool passed with its
reason) and an alert in words; the recovery facts (the pool and its definition, the pools
still to try, those passed) let an engine that adopts the run carry it on where it went.
A next attempt (after preemption) starts from the first pool again: it may have stock now.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import one_line
from engine.jobs.pools import Pool
from engine.providers.base import Provider
from engine.report import events as ev
from engine.sink.check import check_job_env

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

LEFT = "fallback_left"  # recovery facts: the pools still to try, in order
PASSED = "pools_passed"  # and those passed: {"pool", "reason"}


@dataclass(frozen=True)
class PoolSource:
    """What the engine lends a driver to move: a configured pool by name with its provider
    ready (raising, in one line, when it cannot be), and the engine's heartbeat."""

    ready: Callable[[str], Awaitable[tuple[Pool, Provider]]]
    heartbeat_s: float


async def fall_over(driver: RunDriver, why: str) -> str | None:
    """Move `driver` off its pool, which had nothing left (`why`, one line), to the next
    fallback pool that can take the run; None once it did. Else the run's reason: the
    provisioning failure as it is on a pool without fallback, or every pool's reason."""
    left = list(driver.recovery.get(LEFT, driver.pool.fallback))
    passed: list[dict[str, str]] = [*driver.recovery.get(PASSED, [])]
    gone = [(driver.pool.name, why)]
    chosen: tuple[Pool, Provider] | None = None
    while left and driver.pools is not None and chosen is None:
        name = left.pop(0)
        try:
            chosen = await driver.pools.ready(name)
            check_job_env(driver.job, chosen[0])  # the job asks for a sink it has not
        except Exception as exc:  # a pool that cannot take the run is passed like one empty
            gone.append((name, driver.redact(one_line(exc))))
            chosen = None
    passed += [{"pool": name, "reason": reason} for name, reason in gone]
    going = chosen[0].name if chosen else None
    for name, reason in gone:
        driver.publish(
            ev.PoolPassed(run_id=driver.view.run_id, pool=name, reason=reason, next_pool=going)
        )
    if chosen is None:
        if len(passed) == 1:
            return f"provisioning failed: {why}"
        each = "; ".join(f"pool {p['pool']!r}: {p['reason']}" for p in passed)
        return f"no pool could serve the run: {each}"
    pool, provider = chosen
    assert driver.pools is not None
    facts: dict[str, Any] = {LEFT: left, PASSED: passed, "handle": None}
    driver.remember(pool=pool.name, pool_def=pool.model_dump_json(), **facts)
    driver.seat(pool, provider, driver.pools.heartbeat_s)
    said = "; ".join(f"pool {name!r} had nothing for the run ({r})" for name, r in gone)
    driver.publish(ev.Alert(run_id=driver.view.run_id, message=f"{said}: moving to pool {going!r}"))
    return None
