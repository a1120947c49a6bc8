"""Carrying on runs whose owner is gone (engine/state/ownership.py): a run `swjob run`
left when it died, or a next attempt its recorder never started. The console adopts
every such run at start and every ADOPT_SCAN_S; `swjob attach` one by id.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError

from engine.core.config import EngineConfig, SubmitError
from engine.core.providers import Providers
from engine.core.runs import RunTable
from engine.errors import one_line
from engine.jobs.pools import Pool, PoolFileError
from engine.providers.base import NodeHandle, Provider, TeardownError
from engine.report import events as ev
from engine.report.datastream import Datastream, read_events
from engine.report.runbook import fold
from engine.report.views import RunView
from engine.run import attempts, fallover, nodeend, reclaim, recovery
from engine.run.orchestrator import RunDriver
from engine.state import ownership, spill
from engine.state.indexwrites import IndexWrites
from engine.state.store import Store

log = logging.getLogger("swjob.engine")

ADOPT_SCAN_S = 5.0


class Adopter:
    """Adopts runs into `table`; its warnings go to `alert`."""

    def __init__(
        self,
        table: RunTable,
        providers: Providers,
        alert: Callable[[str], None],
        *,
        store: Store,
        index: IndexWrites,
        endpoint: Any,
    ) -> None:
        self.table = table
        self.providers = providers
        self.alert = alert
        self.config: EngineConfig = table.config
        self.stream: Datastream = table.stream
        self._store: Store | None = store
        self._index: IndexWrites | None = index
        self._endpoint = endpoint
        self._unadoptable: set[str] = set()
        self._adopting: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Adopt every orphaned run now, then keep scanning for more."""
        await self.adopt_orphans()
        self._adopting = asyncio.create_task(self._keep_adopting())

    async def close(self) -> None:
        if self._adopting is not None:
            self._adopting.cancel()
            await asyncio.gather(self._adopting, return_exceptions=True)

    async def adopt(self, run_id: str) -> bool:
        """Take over `run_id` if it is unfinished and its owner is gone (ownership.py);
        True when this engine drives it now. Raises SubmitError (one line) when the run
        has no owner but cannot be carried on here (e.g. its pool's SDK fails to load)."""
        if run_id in self.table.drivers:
            return self.table.running_run(run_id)
        assert self._store is not None
        lease = ownership.acquire(run_id)
        if lease is None:
            return False
        found = self._store.adoptable_run(run_id)  # read after the lease: it may have ended
        if found is None:
            return await self._take_recorded(run_id, lease)
        view, saved = found
        if ownership.elsewhere(saved.get(ownership.OWNER)):  # its lock file deleted under it
            lease.release()
            return False
        pool = await self._adoptable_pool(run_id, view, saved, lease)
        self.table.leases[run_id] = lease
        provider = self.providers.get(pool)
        if saved.get("handle"):
            handle: NodeHandle | None = NodeHandle(**saved["handle"])
            provider.adopt(handle)
        else:
            handle = await self._find_node(provider, run_id)
        # in a thread: a flooded run's events.jsonl is hundreds of MB, and parsing it held
        # the console's loop (every key and run) for seconds at each adoption
        events = await asyncio.to_thread(read_events, view.run_dir / "events.jsonl")
        queued = handle is None and await self._still_queued(provider, run_id, events)
        self.table.launch(self._recovered_driver(view, saved, pool, handle, events, queued=queued))
        return True

    async def _adoptable_pool(
        self, run_id: str, view: RunView, saved: dict[str, Any], lease: ownership.Lease
    ) -> Pool:
        """The pool to carry `run_id` on, its provider ready; else the lease is given back
        and SubmitError says why (one line)."""
        try:
            pool = self._pool_of(view, saved)
            await self.providers.ready(pool)
            self.providers.get(pool).check_can_tear_down()  # else its node would bill on unowned
        except (PoolFileError, SubmitError, ValidationError, TeardownError) as exc:
            lease.release()
            raise SubmitError(f"run {run_id} cannot be adopted: {one_line(exc)}") from None
        return pool

    async def _take_recorded(self, run_id: str, lease: ownership.Lease) -> bool:
        """Start `run_id` if it is a next attempt recorded but never started (its recorder
        died first: engine/run/chain.py); False when it is no such thing."""
        assert self._store is not None
        recorded = self._store.recorded_attempt(run_id)
        attempt = attempts.from_record(recorded[2]) if recorded else None
        if recorded is None or attempt is None:
            lease.release()
            return False
        previous, saved, _ = recorded
        job, fault = recovery.recovered_job(previous, saved)
        if fault is not None:
            lease.release()
            raise SubmitError(f"attempt {attempt.number} of {previous.job_name}: {fault}")
        pool = await self._adoptable_pool(run_id, previous, saved, lease)
        self.table.leases[run_id] = lease
        self.table.start(job, pool, attempt, run_id, names=(previous.label, previous.sweep))
        return True

    async def adopt_orphans(self) -> None:
        assert self._store is not None and self._index is not None
        await self._index.write_in_kept()  # a run left running while the index was held
        unfinished = [view.run_id for view, _ in self._store.unfinished()]
        # and those whose row is still only kept (the index held yet): adopted from it,
        # not when the lock goes — hours later, after their node's orphan timeout
        kept = spill.kept(self._store.path)
        for run_id in dict.fromkeys([*unfinished, *self._store.not_started(), *kept]):
            if run_id in self.table.drivers or run_id in self._unadoptable:
                continue
            try:
                await self.adopt(run_id)
            except SubmitError as exc:
                self._unadoptable.add(run_id)  # said once, not every scan
                self.alert(str(exc))
            except OSError as exc:  # its lock file cannot be made (a full disk): next scan
                log.warning("run %s not adopted: %s", run_id, one_line(exc))

    async def _keep_adopting(self) -> None:
        """The console carries on runs whose `swjob run` died while it was open."""
        while True:
            await asyncio.sleep(ADOPT_SCAN_S)
            try:
                await self.adopt_orphans()
            except Exception as exc:  # a broken row must not end the scan for good
                log.warning("adoption scan failed: %s", one_line(exc))

    def _pool_of(self, view: RunView, saved: dict[str, Any]) -> Pool:
        """The pool to carry the run on. The pools file as it is now wins when it still
        names the run's pool on the same provider: deadlines the operator changed while the
        run was unattended are the ones meant, and caps may be tightened but never lifted
        (Caps.tightened_by: the run's node keeps the caps it was started with). A pool
        since renamed, removed or moved to another provider falls back to the definition
        kept with the run (its node lives where that says); runs from before it was kept
        use the configured pool."""
        name = saved.get("pool", view.pool)
        if not saved.get("pool_def"):
            return self.config.pools.get(name)
        try:
            configured: Pool | None = self.config.pools.get(name)
        except PoolFileError:
            configured = None
        kept = Pool.model_validate_json(saved["pool_def"])
        if configured is not None and configured.provider == kept.provider:
            caps = kept.caps.tightened_by(configured.caps)
            return configured.model_copy(update={**kept.run_choices(), "caps": caps})
        return kept

    async def _find_node(self, provider: Provider, run_id: str) -> NodeHandle | None:
        try:
            return await provider.find_node(run_id)
        except Exception as exc:  # the provider's API is down: recover what we can, say so
            self.alert(f"could not look up the node of run {run_id}: {exc} — run `swjob gc`")
            return None

    async def _still_queued(self, provider: Provider, run_id: str, events: list[ev.Event]) -> bool:
        """recovery.still_queued; a provider that cannot tell (its ledger unreadable) leaves
        the run to be failed as one whose node may exist, and says why."""
        try:
            return await recovery.still_queued(provider, run_id, events)
        except Exception as exc:
            self.alert(f"could not tell whether run {run_id} was still queued: {one_line(exc)}")
            return False

    def _recovered_driver(
        self,
        view: RunView,
        saved: dict[str, Any],
        pool: Pool,
        handle: NodeHandle | None,
        events: list[ev.Event],
        *,
        queued: bool = False,
    ) -> RunDriver:
        """A driver carrying on `view` from its `events`; `queued`: it was still waiting for
        a slot of its pool when its operator died (recovery.still_queued)."""
        job, fault = recovery.recovered_job(view, saved)
        seq = events[-1].seq if events else 0
        self.stream.open_run(view.run_id, view.run_dir / "events.jsonl", seq)
        keys = {k: saved[k] for k in ("token", "reattach_key") if saved.get(k)}
        attempt = attempts.from_record(saved.get("attempt"))
        self.table.chains.pools[view.run_id] = self._first_pool(saved, pool)
        driver = self.table.make_driver(
            fold(events) or view, job, attempts.capped(pool, attempt), keys, attempt
        )
        driver.clock.replay(events)  # phase times (and the cost split) span the restart
        driver.logs.restore(events)  # what the dead owner wrote past its datastream goes
        driver.recovery.update(saved, **{ownership.OWNER: ownership.me()})  # ours now
        driver.started = set(saved.get("started", []))
        driver.birth_run = saved.get("birth_run", view.run_id)  # a warm node's first run
        driver.session.endpoint_id = saved.get("endpoint_id")
        driver.session.heartbeat_s = recovery.node_heartbeat(saved, driver.session.heartbeat_s)
        driver.session.last_seq = max(saved.get("last_seq", 0), recovery.last_node_seq(events))
        node_end = handle and nodeend.unattended_end(saved, pool, attempt, handle, events)
        driver.resume(recovery.fsm_state_of(events, job), handle, node_end)
        driver.start_work(recovery.continue_run(driver, fault, queued=queued))
        if saved.get("agent_ticket") and saved.get("reattach_key"):
            driver.start_work(
                reclaim.until_joined(
                    self._endpoint, driver.session, saved["agent_ticket"], saved["reattach_key"]
                )
            )
        said = recovery.QUEUED_RESTART if queued and fault is None else recovery.RECOVERED
        driver.publish(ev.Alert(run_id=view.run_id, message=said))
        return driver

    def _first_pool(self, saved: dict[str, Any], pool: Pool) -> Pool:
        """Where a next attempt of the run starts: the first pool it was submitted to, as a
        run that fell over (engine/run/fallover.py) starts its next attempt there again
        (it may have stock now); `pool` when it never moved or that pool is gone."""
        passed = saved.get(fallover.PASSED) or []
        if not passed:
            return pool
        try:
            return self.table.config.pools.get(passed[0]["pool"])
        except (PoolFileError, KeyError, TypeError):
            return pool
