"""The host pre-flight, the operator's side: ask a freshly joined rented node to check
itself (agent/preflight.py) before the workspace is pushed, and replace one that fails.

A failed node is destroyed (teardown confirmed: its ledger row closes, its slot frees),
its host is remembered as bad (engine/state/badhosts.py, reason "pre-flight: …") so no
later rent picks it, and the driver rents the next offer — each step an alert and a boot
mark. After `max_offers_tried` failed offers of the pool, `offers_left` raises
OffersUsedUp, a PoolExhausted: the run moves to its next fallback pool as when the pool has
no offer (RunDriver._provision, engine/run/fallover.py), or, with none left, ends FAILED
naming each host's failure.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from agent.protocol import Preflight, PreflightDone
from engine.providers.base import NodeHandle, PoolExhausted, ProvisionError
from engine.report import events as ev
from engine.run.bootmarks import DETAIL_MAX, FAILED
from engine.run.control import NodeGone
from engine.state import badhosts

if TYPE_CHECKING:
    from engine.run.orchestrator import RunDriver

TRIED = "preflight"
"""Recovery facts: run.json's rows so far, so an engine that adopts the run counts the
offers that failed before its first engine died (`max_offers_tried`)."""
HOST_SAID_MAX = 120  # of each host's failure in the run's reason (run.json keeps it whole)
ANSWER_TIMEOUT_S = 180.0  # the node's checks are bounded by 15 s + 120 s (agent/preflight.py)


class OffersUsedUp(PoolExhausted):
    """Every offer the pool may try (`max_offers_tried`) failed its pre-flight."""


class PreflightCheck:
    """One run's pre-flights: the node it asks now, and every node it asked."""

    def __init__(self, driver: RunDriver) -> None:
        self._d = driver
        self._answer: asyncio.Future[PreflightDone] | None = None
        self._stuck: str | None = None  # a failed node whose destroy was not confirmed

    @property
    def tried(self) -> list[dict[str, Any]]:
        """run.json's `preflight`: one row per node checked, kept in the recovery facts
        (replaced, never changed in place: the index may be writing the one it has)."""
        rows: list[dict[str, Any]] = self._d.recovery.get(TRIED, [])
        return rows

    @property
    def wanted(self) -> bool:
        """Only a rented node fresh from its provider: a local node is this machine, a
        warm one passed when it was first rented, and one with a passed mark passed (an
        adopted run's: its engine died after the check)."""
        d = self._d
        return d.pool.provider != "local" and not d.on_warm_node and not d.boot.checked

    def offers_left(self) -> None:
        """Raise OffersUsedUp once `max_offers_tried` nodes of this pool failed (a
        ProvisionError at once when a failed one could not be destroyed: no more renting)."""
        if self._stuck is not None:
            raise ProvisionError(self._stuck)
        pool = self._d.pool
        failed = [row for row in self.tried if row["pool"] == pool.name and not row["passed"]]
        if len(failed) < pool.max_offers_tried:
            return
        hosts = "; ".join(f"{_host_of(row)}: {row['failed'][:HOST_SAID_MAX]}" for row in failed)
        raise OffersUsedUp(
            f"pre-flight failed on {len(failed)} offer{'s' * (len(failed) != 1)} "
            f"of pool {pool.name!r}: {hosts}"
        )

    def on_done(self, msg: PreflightDone) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_result(msg)

    async def passed(self) -> bool:
        """Check the joined node; True when it passed (or is not checked). False: it failed
        and is destroyed, its host remembered; the caller rents the next offer."""
        handle = self._d.handle
        if not self.wanted or handle is None:
            return True
        started = ev.utcnow()
        failed, checks = await self._ask()
        self._mark(started, failed, checks)
        self._record(handle, failed, checks)
        if failed is None:
            return True
        await self._replace(handle, failed)
        return False

    async def _ask(self) -> tuple[str | None, list[dict[str, Any]]]:
        """What failed (None: the node passed; one line, redacted) and every check."""
        r = self._d.pool.resources
        request = Preflight(
            gpu_count=r.gpu_count,
            gpu_memory_mb=r.gpu_memory_mb,
            disk_mb=r.disk_mb,
            operator_time=time.time(),
        )
        self._answer = asyncio.get_running_loop().create_future()
        try:
            await self._d.session.send(request)
            async with asyncio.timeout(ANSWER_TIMEOUT_S):
                answer = await self._answer
        except NodeGone as exc:
            return self._d.redact(f"the node did not take the request ({exc})"), []
        except TimeoutError:
            return f"no answer within {ANSWER_TIMEOUT_S:g} s", []
        finally:
            self._answer = None
        checks = [c.model_dump() for c in answer.checks]
        said = "; ".join(f"{c.name}: {c.detail}" for c in answer.failed)
        return (self._d.redact(said) if said else None), checks

    def _mark(self, started: datetime, failed: str | None, checks: list[dict[str, Any]]) -> None:
        said = ", ".join(f"{c['name']} {'skipped' if c['skipped'] else 'ok'}" for c in checks)
        detail = f"{FAILED}: {failed}" if failed else f"passed: {said}"
        mark = ev.Boot(
            run_id=self._d.view.run_id, phase=ev.BootPhase.PREFLIGHT, at=ev.utcnow(),
            since=started, detail=detail[:DETAIL_MAX],
        )  # fmt: skip
        self._d.publish(mark)

    def _record(self, handle: NodeHandle, failed: str | None, checks: list[dict[str, Any]]) -> None:
        row = {
            "pool": self._d.pool.name,
            "provider": handle.provider,
            "node_id": handle.node_id,
            "machine_id": handle.offer.get("machine_id"),
            "passed": failed is None,
            "failed": failed,
            "checks": checks,
        }
        self._d.remember(**{TRIED: [*self.tried, row]})

    async def _replace(self, handle: NodeHandle, failed: str) -> None:
        """Destroy the failed node (confirmed, or the run ends saying it may bill), and keep
        its host out of the pool's offers."""
        d = self._d
        host = _host_of(self.tried[-1])
        d.publish(ev.Alert(run_id=d.view.run_id, message=f"pre-flight failed on {host}: {failed}"))
        problem = await d.drop_node()
        if problem is not None:  # the run ends (offers_left); its teardown tries again
            message = d.redact(problem)
            d.publish(ev.Alert(run_id=d.view.run_id, message=message, persistent=True))
            self._stuck = f"pre-flight failed on {host}, and its teardown failed: {message}"
            return
        *before, last = self.tried
        self._d.remember(**{TRIED: [*before, last | _bill(handle)]})
        await self._remember(handle, failed)
        said = f"{host} destroyed and remembered as bad; renting the next offer"
        d.publish(ev.Alert(run_id=d.view.run_id, message=said))

    async def _remember(self, handle: NodeHandle, failed: str) -> None:
        machine = handle.offer.get("machine_id")
        ttl_h = self._d.pool.bad_host_ttl_h
        if machine is None or ttl_h <= 0:
            return
        try:
            await asyncio.to_thread(
                badhosts.remember, handle.provider, str(machine), f"pre-flight: {failed}", ttl_h
            )
        except OSError as exc:
            message = f"host {machine} not remembered as bad: {exc}"
            self._d.publish(ev.Alert(run_id=self._d.view.run_id, message=message))


def _bill(handle: NodeHandle) -> dict[str, float]:
    """What a destroyed node cost (the run's own cost is its serving node's)."""
    if handle.created_at is None:
        return {}
    seconds = max(0.0, time.time() - handle.created_at)
    price = handle.price_per_hour
    return {"seconds": round(seconds, 3)} | (
        {"dollars": round(price * seconds / 3600, 6)} if price is not None else {}
    )


def _host_of(row: dict[str, Any]) -> str:
    node = f"node {row['node_id']}"
    return f"host {row['machine_id']} ({node})" if row.get("machine_id") else node
