"""The engine's public API: what the TUI and the CLI call, and nothing else of the engine.

One Engine per process: it owns the process's iroh endpoint and control service,
the datastream, the run index, one provider per pool, and a RunDriver per live run.
It runs on the caller's event loop (the TUI's, or the CLI's `asyncio.run`).

It drives only runs whose lease it holds (engine/state/ownership.py): the runs it
submitted, and — when asked (`adopt`, or `adopt_orphans` for the console) — unfinished
runs whose owner is gone.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iroh.iroh_ffi import IrohError
from pydantic import ValidationError

from agent import endpoint as iroh_endpoint
from agent import reattach
from agent.transfer.errors import TransferError
from agent.transfer.memory import pin_malloc, share_one_arena
from engine.errors import ProviderError, SwjobError, one_line
from engine.jobs import envargs
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import RENTED, Pool, PoolFileError, PoolSet, load_pools
from engine.providers import localspawn, vast_sdk
from engine.providers.base import (
    Bootstrap,
    NodeHandle,
    Provider,
    ProvisionError,
    TeardownError,
    heartbeat_for,
    silence_for,
)
from engine.providers.registry import make_provider
from engine.report import appender, scope
from engine.report import events as ev
from engine.report.datastream import Datastream, Subscription, read_events
from engine.report.runbook import fold, new_view
from engine.report.views import PoolView, RunView, WarmNodeView, short_id
from engine.run import abandon, attempts, fsm, nodeend, reclaim, recovery, warm
from engine.run.attempts import Attempt
from engine.run.chain import Chains, NextStep
from engine.run.control import ControlServer, NodeSession
from engine.run.livehub import LiveHub
from engine.run.manifest import LandingFailed
from engine.run.masking import mask_from_job_file
from engine.run.orchestrator import RunDriver
from engine.sink.check import check_job_env, check_sink
from engine.sink.place import SinkError, place_for
from engine.state import identity, ownership, spill, warmnodes
from engine.state.indexwrites import IndexWrites, Unwritten
from engine.state.ledger import Ledger
from engine.state.paths import DEFAULT_RUNS_DIR, cache_dir, state_dir
from engine.state.private import foreign_dir, set_private_umask
from engine.state.store import Store
from engine.watch import hostwatch, notifier

if TYPE_CHECKING:
    from engine.providers.gc import Collection, Orphan

log = logging.getLogger("swjob.engine")


# The events that change a run's summary in the index. Cost is one (every few seconds while
# a priced node bills): another console follows the run from the index alone.
_INDEXED = (ev.Transition, ev.Node, ev.Alert, ev.Cost, ev.Finished)


class SubmitError(SwjobError):
    """The run could not be submitted; one line for the user."""


@dataclass
class EngineConfig:
    runs_dir: Path = DEFAULT_RUNS_DIR
    pools: PoolSet = field(default_factory=load_pools)
    heartbeat_s: float = 1.0
    stop_grace_s: float = 10.0
    adopt_orphans: bool = False
    """Adopt every unfinished run whose owner is gone, at start and every ADOPT_SCAN_S
    (the console); `swjob run` leaves other runs alone."""
    warm_agents: bool = False
    """Start the local agents' fork server with the engine (the console: its first local
    run then does not wait for an agent's imports either)."""


ADOPT_SCAN_S = 5.0
WARM_READ_S = 1.0


def new_run_id() -> str:
    """Timestamp plus 32 random bits: 32 submits in one second collide with p ~ 1e-7
    (16 bits gave ~0.8%, and a collision overwrote the other run's driver)."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"


class Engine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        set_private_umask()  # run index, landing dirs, node workspaces: the operator's only
        state_dir(), cache_dir()  # made (or tightened, said once) before a UI owns the terminal
        self.config = config or EngineConfig()
        self.stream = Datastream()
        self._drivers: dict[str, RunDriver] = {}
        self._tasks: dict[str, asyncio.Task[RunView]] = {}
        self._chains = Chains()  # next attempts: recorded, then started (engine/run/chain.py)
        self._closing = False
        self._providers: dict[str, Provider] = {}
        self._store: Store | None = None  # read here, on the loop (opened off it)
        self._writes: Store | None = None  # written on the writer thread only (`_index`)
        self._index: IndexWrites | None = None
        self.closing_note: str | None = None
        """What `close` could not record, for a console to print once its screen is gone."""
        self._endpoint = None
        self._server: ControlServer | None = None
        self._identity: identity.Identity | None = None
        self._orphan_check: asyncio.Task[None] | None = None
        self._sdk_loading: asyncio.Future[Any] | None = None
        self.live = LiveHub(self._drivers.get)  # shells and forwarded ports (engine/run/livehub.py)
        self._leases: dict[str, ownership.Lease] = {}
        self._adopting: asyncio.Task[None] | None = None
        self._starting = asyncio.Lock()
        """Runs submitted at once (a sweep, a script's gather) start one per turn of the
        loop: 12 starts in one turn held the console's loop ~20 ms on a busy machine."""
        self._unadoptable: set[str] = set()
        self._warm_read: tuple[float, list[WarmNodeView]] = (-WARM_READ_S, [])
        self._notifier: notifier.Notifier | None = None
        self._host_watch: hostwatch.HostWatch | None = None

    # ---- lifecycle ---------------------------------------------------------------------

    async def start(self) -> None:
        pin_malloc()
        share_one_arena()  # before this process starts threads: they share one arena
        # opened off the loop: an index another process holds before it is in WAL mode
        # makes the open wait for the lock (then fail, naming the file)
        self._store = await asyncio.to_thread(Store, any_thread=True)
        self._writes = await asyncio.to_thread(Store, self._store.path, any_thread=True)
        self._index = IndexWrites(self._writes, self._engine_alert)
        self._identity = identity.acquire()
        self._endpoint = await self._bind()
        self._identity.remember_port(iroh_endpoint.bound_port(self._endpoint))
        self._server = ControlServer(self._endpoint)
        self._server.start()
        await self.live.start()
        if self._rents_nodes():  # ~1 s of imports: in a thread, while the rest starts
            self._sdk_loading = asyncio.ensure_future(asyncio.to_thread(vast_sdk.load))
        if self.config.adopt_orphans:
            await self._adopt_orphans()
            self._adopting = asyncio.create_task(self._keep_adopting())
        self._orphan_check = asyncio.create_task(self._check_orphans())
        pools = self.config.pools  # None below: no `notify` target, no pool rents nodes
        self._notifier = notifier.for_engine(pools, self.subscribe, self.run, self.masker)
        self._host_watch = hostwatch.for_engine(pools, self.subscribe, self.run)
        if self.config.warm_agents:
            localspawn.warm()  # last: its imports run while the caller goes on

    async def _providers_ready(self, pool: Pool) -> None:
        """Wait until `pool`'s provider can be built: a rented pool needs its SDK loaded.
        A failed import raises here, on the call that needed it, as one line."""
        if pool.provider != "vastai":
            return
        if self._sdk_loading is None:
            self._sdk_loading = asyncio.ensure_future(asyncio.to_thread(vast_sdk.load))
        try:
            await asyncio.shield(self._sdk_loading)
        except Exception as exc:
            raise SubmitError(f"pool {pool.name!r}: cannot load the Vast.ai SDK: {exc}") from None

    async def _bind(self) -> Any:
        """Bind with our persistent identity, on last time's port when it is free."""
        key = self._identity.secret_key
        try:
            return await iroh_endpoint.bind(accept=True, secret_key=key, port=self._identity.port)
        except IrohError:
            return await iroh_endpoint.bind(accept=True, secret_key=key)

    async def close(self, *, stop_running: bool = True) -> None:
        """Stop: with `stop_running`, every run this engine drives is stopped and its node
        torn down; without, they are left to their nodes (which keep running and billing)
        and their leases freed, so another swjob can adopt them."""
        self._closing = True  # no next attempt is started from here on
        if self._adopting is not None:
            self._adopting.cancel()
            await asyncio.gather(self._adopting, return_exceptions=True)
        if stop_running:
            await self.stop_all()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        else:
            for task in self._tasks.values():
                task.cancel()
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)
            self._disown()
        if self._orphan_check is not None:
            self._orphan_check.cancel()
            await asyncio.gather(self._orphan_check, return_exceptions=True)
        await self.live.close()
        if self._server is not None:
            await self._server.stop()
        if self._endpoint is not None:
            await self._endpoint.close()
        await appender.written()  # every event and index row on record, or kept
        if self._index is not None and (unwritten := await self._index.close()):
            self._say_unwritten(unwritten)
        self.stream.close()
        if self._notifier is not None:  # its last notices, a bounded while
            await self._notifier.close()
        if self._host_watch is not None:
            await self._host_watch.close()
        for store in (self._store, self._writes):
            if store is not None:
                store.close()
        if self._identity is not None:
            self._identity.release()
        for lease in self._leases.values():
            lease.release()

    def _disown(self) -> None:
        """Runs left running lose this process's owner stamp in their last row: their
        leases are freed for an adopter, and a stamp naming a process that lives on (a
        console embedded in a longer-lived one, a test) made every other process's
        adopter take them for driven elsewhere, for as long as this process lived."""
        for driver in self._drivers.values():
            if driver.view.finished is None:
                driver.remember(**{ownership.OWNER: None})

    # ---- runs --------------------------------------------------------------------------

    async def submit(
        self,
        job: JobSpec,
        pool: str,
        *,
        cold: bool = False,
        label: str | None = None,
        sweep: str | None = None,
    ) -> str:
        """Place the job on a node of `pool` — a warm one when the pool keeps them and one
        fits (`cold`: always a new one); returns the run id at once. `label` names a
        variant (`train[LR=0.1]`), `sweep` the sweep it belongs to."""
        try:
            pool_def = self.config.pools.get(pool)
        except PoolFileError as exc:
            raise SubmitError(str(exc)) from None
        passed: list[str] = []
        if pool_def.fallback:
            pool_def, passed = await self._fall_over(pool_def)
        await self._providers_ready(pool_def)
        try:
            check_job_env(job, pool_def)
            await check_sink(pool_def, job.name)
        except SinkError as exc:  # before any node is rented
            raise SubmitError(str(exc)) from None
        async with self._starting:  # a turn of the loop between two starts
            await asyncio.sleep(0)  # before the start: a cancel after it would lose the run
            run_id = self._start(job, pool_def, None, cold=cold, names=(label, sweep))
        if passed:  # in its timeline and run.json's alerts: which pool served, and why
            said = f"{'; '.join(passed)}: running on pool {pool_def.name!r}"
            self._drivers[run_id].publish(ev.Alert(run_id=run_id, message=said))
        return run_id

    async def _fall_over(self, first: Pool) -> tuple[Pool, list[str]]:
        """The first of `first` and its `fallback` pools with an offer under its limits
        (the provider's own search: one call each), and why each one before it had none.
        A pool that cannot be searched (local) serves as it is; none with an offer: one
        line naming each pool's reason."""
        passed: list[str] = []
        for name in (first.name, *first.fallback):
            pool = self.config.pools.get(name)
            await self._providers_ready(pool)
            search = getattr(self._provider(pool), "search", None)
            if search is None:
                return pool, passed
            try:
                await search()
            except (ProvisionError, ProviderError) as exc:
                passed.append(f"pool {name!r} has no offer ({one_line(exc)})")
                continue
            return pool, passed
        raise SubmitError("; ".join(passed))

    def _start(
        self,
        job: JobSpec,
        pool_def: Pool,
        attempt: Attempt | None,
        run_id: str | None = None,
        *,
        cold: bool = False,
        names: tuple[str | None, str | None] = (None, None),
    ) -> str:
        """Start a run of `job` on `pool_def`: attempt 1 under a new id when `attempt` is
        None, else a recorded next attempt under its `run_id` (whose lease we hold).
        `names`: the run's (label, sweep), kept by every attempt."""
        pool = pool_def.name
        fresh = run_id is None
        if run_id is None:
            run_id = self._new_run_id()
            lease = ownership.acquire(run_id)
            if lease is None:  # a fresh random id: only a collision gets here
                raise SubmitError(f"run id {run_id} is already in use; submit again")
            self._leases[run_id] = lease
        attempt = attempt or attempts.first_attempt(run_id, pool_def)
        run_dir = (self.config.runs_dir / job.name / run_id).absolute()
        if (foreign := foreign_dir(run_dir)) is not None:  # another user could swap it
            self._leases.pop(run_id).release(finished=fresh)
            raise SubmitError(f"{foreign}: swjob lands no run where another user can move it")
        try:
            run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, a read-only disk: nothing started yet
            self._leases.pop(run_id).release(finished=fresh)  # a new run is no run at all
            raise SubmitError(
                f"{run_dir}: cannot make the run's directory: {exc.strerror}"
            ) from None
        # a taker that died before indexing the run left at most its Submitted: start over
        (run_dir / "events.jsonl").unlink(missing_ok=True)
        self.stream.open_run(run_id, run_dir / "events.jsonl")
        submitted = self.stream.publish(
            ev.Submitted(
                run_id=run_id,
                job_name=job.name,
                pool=pool,
                run_dir=str(run_dir),
                attempt=attempt.number,
                attempts=attempt.of,
                previous_run=attempt.previous,
                first_run=attempt.first if attempt.first != run_id else None,
                label=names[0],
                sweep=names[1],
                sink=(place := place_for(pool_def, job.name, run_id)) and place.url,
            )
        )
        keys = {"token": secrets.token_urlsafe(24), "reattach_key": reattach.new_key()}
        self._chains.pools[run_id] = pool_def
        driver = self._driver(
            new_view(submitted), job, attempts.capped(pool_def, attempt), keys, attempt
        )
        driver.cold = cold
        driver.remember(
            orchestrator_id=str(self._endpoint.id()),
            job_file=str(job.source),
            job_sha256=recovery.job_digest(job.source),
            env_args=envargs.record(job),
            pool=pool,
            pool_def=pool_def.model_dump_json(),
            attempt=attempts.to_record(attempt),
            params=job.params,
        )
        self._launch(driver)
        return run_id

    def _new_run_id(self) -> str:
        """A fresh id whose short id (its random tail) no run in the index has: that is
        what the board and `swjob runs` show, and it must name one run."""
        run_id = new_run_id()
        while self._store is not None and self._store.short_id_taken(short_id(run_id)):
            run_id = new_run_id()
        return run_id

    def _launch(self, driver: RunDriver) -> None:
        self._drivers[driver.view.run_id] = driver
        self._tasks[driver.view.run_id] = asyncio.create_task(self._drive(driver))
        self.live.run_started(driver.view.run_id)

    def _driver(
        self,
        view: RunView,
        job: JobSpec,
        pool: Pool,
        keys: dict[str, str],
        attempt: Attempt | None = None,
    ) -> RunDriver:
        """A driver for the run; `keys` are its join token and re-attach credential."""
        assert self._server is not None and self._endpoint is not None
        token = keys["token"]
        holder: list[RunDriver] = []
        session = NodeSession(
            view.run_id,
            token,
            heartbeat_s=heartbeat_for(self.config.heartbeat_s, pool.node_lost_after_s),
            deadline_s=pool.node_lost_after_s,
            on_event=lambda msg: holder[0].on_agent_event(msg),
            on_lost=lambda reason: holder[0].on_node_lost(reason),
        )
        self._server.sessions[view.run_id] = session
        bootstrap = Bootstrap(
            run_id=view.run_id,
            ticket=iroh_endpoint.ticket_of(self._endpoint),
            orchestrator_id=str(self._endpoint.id()),
            token=token,
            reattach_id=reattach.public_of(keys.get("reattach_key", "")),
            silence_s=silence_for(pool.node_lost_after_s),
            orphan_timeout_s=pool.orphan_timeout_s,
            max_dollars=pool.caps.max_dollars,
            max_hours=pool.caps.max_hours,
        )
        driver = RunDriver(
            view=view.model_copy(update={"live": True}),
            job=job,
            pool=pool,
            provider=self._provider(pool),
            session=session,
            bootstrap=bootstrap,
            stream=self.stream,
            stop_grace_s=self.config.stop_grace_s,
            on_change=self._save,
            attempt=attempt,
            endpoint=self._endpoint,
        )
        holder.append(driver)
        driver.recovery.update(keys, **{ownership.OWNER: ownership.me()})
        return driver

    async def adopt(self, run_id: str) -> bool:
        """Take over `run_id` if it is unfinished and its owner is gone (ownership.py);
        True when this engine drives it now. Raises SubmitError (one line) when the run
        has no owner but cannot be carried on here (e.g. its pool's SDK fails to load)."""
        if run_id in self._drivers:
            return self.running_run(run_id)
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
        self._leases[run_id] = lease
        provider = self._provider(pool)
        if saved.get("handle"):
            handle: NodeHandle | None = NodeHandle(**saved["handle"])
            provider.adopt(handle)
        else:
            handle = await self._find_node(provider, run_id)
        # in a thread: a flooded run's events.jsonl is hundreds of MB, and parsing it held
        # the console's loop (every key and run) for seconds at each adoption
        events = await asyncio.to_thread(read_events, view.run_dir / "events.jsonl")
        queued = handle is None and await self._still_queued(provider, run_id, events)
        self._launch(self._recovered_driver(view, saved, pool, handle, events, queued=queued))
        return True

    async def _adoptable_pool(
        self, run_id: str, view: RunView, saved: dict[str, Any], lease: ownership.Lease
    ) -> Pool:
        """The pool to carry `run_id` on, its provider ready; else the lease is given back
        and SubmitError says why (one line)."""
        try:
            pool = self._pool_of(view, saved)
            await self._providers_ready(pool)
            self._provider(pool).check_can_tear_down()  # else its node would bill on unowned
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
        self._leases[run_id] = lease
        self._start(job, pool, attempt, run_id, names=(previous.label, previous.sweep))
        return True

    async def _adopt_orphans(self) -> None:
        assert self._store is not None and self._index is not None
        await self._index.write_in_kept()  # a run left running while the index was held
        unfinished = [view.run_id for view, _ in self._store.unfinished()]
        # and those whose row is still only kept (the index held yet): adopted from it,
        # not when the lock goes — hours later, after their node's orphan timeout
        kept = spill.kept(self._store.path)
        for run_id in dict.fromkeys([*unfinished, *self._store.not_started(), *kept]):
            if run_id in self._drivers or run_id in self._unadoptable:
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
                await self._adopt_orphans()
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
        self._chains.pools[view.run_id] = pool
        driver = self._driver(
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

    def _provider(self, pool: Pool) -> Provider:
        """One provider per configured pool; an adopted run whose pool was since renamed,
        removed or changed gets one of its own definition."""
        key = pool.name
        if pool.name not in self.config.pools or self.config.pools.get(pool.name) != pool:
            key = f"{pool.name} as adopted: {pool.model_dump_json()}"
        if key not in self._providers:
            self._providers[key] = make_provider(
                pool,
                stop_grace_s=self.config.stop_grace_s,
                on_alert=self.alert,
            )
        return self._providers[key]

    async def _drive(self, driver: RunDriver) -> RunView:
        run_id = driver.view.run_id
        try:
            await appender.written()  # its start on record before it asks anything of anyone
            view = await driver.run()
        finally:
            assert self._server is not None
            self._server.sessions.pop(run_id, None)
            await appender.written()  # its end (and the next attempt) on record, then the rest
            await self.live.run_ended(run_id)
            await self.stream.close_run(run_id)
            self._save(driver)
            lease = self._leases.pop(run_id, None)
            if lease is not None and driver.view.terminal and not self._unindexed(run_id):
                lease.release(finished=True)
            elif lease is not None:  # cancelled mid-run, or its end not indexed: held until
                self._leases[run_id] = lease  # close(), then an adopter ends it from its files
        self._chain(driver, view)
        return view

    def _chain(self, driver: RunDriver, view: RunView) -> None:
        """Take the next attempt recorded at the run's end (engine/run/chain.py). An engine
        closing leaves it recorded: the next adopter takes it."""
        pool_def = self._chains.pools.pop(view.run_id, driver.pool)
        step = self._chains.take(view.run_id)
        if step is not None and not self._closing:
            names = (driver.view.label, driver.view.sweep)
            run_id = self._start(driver.job, pool_def, step.attempt, step.run_id, names=names)
            self._chains.started(view.run_id, run_id)

    def _record_next(self, driver: RunDriver) -> NextStep | None:
        """At a run's end, the attempt after it when its node let it down and the chain
        has attempts and money left; its lease is ours before it is recorded, so no
        adopter takes it while we start it."""
        if driver.attempt is None or self._closing:
            return None
        pool = self._chains.pools.get(driver.view.run_id, driver.pool)
        attempt = attempts.next_attempt(driver.view, pool, driver.attempt)
        run_id = new_run_id()
        lease = ownership.acquire(run_id) if attempt is not None else None
        if attempt is None or lease is None:
            return None
        self._leases[run_id] = lease
        return self._chains.recorded(driver.view.run_id, NextStep(run_id, attempt))

    def successor(self, run_id: str) -> str | None:
        """The run id of the attempt after `run_id`: started here, or recorded (by whoever
        drove it) and maybe not started yet — `adopt` starts it."""
        if (started := self._chains.successor(run_id)) is not None:
            return started
        return self._store.next_run(run_id) if self._store is not None else None

    def _save(self, driver: RunDriver, event: ev.Event | None = None) -> None:
        """Index the run when its summary changes (one row upsert; logs and progress skip it);
        its end is saved with the next attempt it records, in one write. The write is the
        writer thread's (a commit waits for the disk), after the events before it. Its
        failure is the engine's alert, not the run's: raised into the run's publish it left
        the run without its driver, its node up; and a run's alert is indexed itself."""
        if self._index is not None and (event is None or isinstance(event, _INDEXED)):
            step = self._record_next(driver) if isinstance(event, ev.Finished) else None
            record = step.record() if step else None
            self._index.save(driver.view, dict(driver.recovery), record)

    def _unindexed(self, run_id: str) -> bool:
        """The index does not hold the run's latest row (another process holds its lock)."""
        return self._index is not None and run_id in self._index.unwritten()

    def _say_unwritten(self, unwritten: Unwritten) -> None:
        """At close, the runs whose last state the index lacks: said on the stream and
        logged, since a closing console or `swjob run` has stopped reading the stream
        (`swjob` prints it as one `swjob:` line; the console's log keeps it, and the
        console prints `closing_note` once its screen is gone)."""
        runs = ", ".join(unwritten.runs)
        if unwritten.kept_in is not None:
            message = (
                f"run index not written at exit: the last state of run(s) {runs} is kept in "
                f"{unwritten.kept_in}; the next swjob to open the index writes it in (then "
                "`swjob-tui` or `swjob attach` carries on a run left running)"
            )
        else:
            message = (
                f"run index not written at exit, nor kept beside it ({unwritten.problem}): "
                f"the last state of run(s) {runs} is only in their landing dirs"
            )
        self._engine_alert(message)
        log.warning("%s", message)
        self.closing_note = message

    def _engine_alert(self, message: str) -> None:
        self.stream.publish(ev.Alert(run_id="", message=message))

    async def stop(self, run_id: str, reason: str = "stopped by operator") -> None:
        driver = self._drivers.get(run_id)
        if driver is None or not driver.view.stoppable:
            raise SubmitError(f"run {run_id} is not running")
        driver.post(fsm.OperatorStop(reason))

    async def stop_all(self) -> None:
        for driver in list(self._drivers.values()):
            if driver.view.stoppable:  # a FAILED run still collecting has a node up, too
                await self.stop(driver.view.run_id)

    async def wait(self, run_id: str) -> RunView:
        return await asyncio.shield(self._tasks[run_id])

    def alert(self, message: str, orphan: str | None = None, collectable: bool = True) -> None:
        """A warning shown by the TUI and the CLI. Raised while working for a run (a
        provider retrying that run's calls) it is the run's, kept in its run.json; else it
        is engine-wide. `orphan` names a node found billing without a run (`collectable`:
        one `swjob gc` would destroy)."""
        driver = self._drivers.get(scope.current_run())
        if driver is not None and not driver.view.terminal:
            driver.publish(ev.Alert(run_id=driver.view.run_id, message=message))
            return
        alert = ev.Alert(run_id="", message=message, orphan=orphan, collectable=collectable)
        self.stream.publish(alert)

    def _rents_nodes(self) -> bool:
        return any(p.provider in RENTED for p in self.config.pools)

    async def orphans(self) -> list[Orphan]:
        """Nodes billing without a live run (Vast.ai labels and ledger rows), for `swjob gc`
        and the board's collect action. Runs not yet finished are never orphans: they
        belong to a live engine or await recovery, and nor are instances whose destroy
        was asked for lately (Vast lists them until it settles). Raises VastApiError when
        an account cannot be listed."""
        if not self._rents_nodes():
            return []
        for pool in self.config.pools:
            await self._providers_ready(pool)
        from engine.providers.gc import find_orphans

        owned, abandoned = self._ownership()
        found = await find_orphans(self.config.pools, Ledger(), owned, abandoned=abandoned)
        return [o for o in found if not o.settling]  # being destroyed: not billing unowned

    def _ownership(self) -> tuple[set[str], set[str]]:
        """(runs some live engine drives, unfinished runs nobody drives). The first are
        never orphans; the nodes of the second are (engine/state/ownership.py)."""
        assert self._store is not None
        rows = self._store.unfinished()
        owned = {v.run_id for v in self.running()} | ownership.owned(self._store.path, rows)
        owned |= warmnodes.holding_runs(owned)  # kept warm: owned, billing, on their timer
        unfinished = {v.run_id for v, _ in rows}
        return owned, unfinished - owned

    async def collect_orphans(self, orphans: list[Orphan]) -> Collection:
        """Destroy (verified) the given orphans: how many went, and what went wrong."""
        for pool in self.config.pools:
            await self._providers_ready(pool)
        from engine.providers.gc import destroy_orphans

        claims = abandon.Claims(self._store) if self._store is not None else None
        done = await destroy_orphans(orphans, self.config.pools, Ledger(), claims=claims)
        for orphan in orphans:
            if orphan.name in done.collected:
                self._node_collected(orphan)
        return done

    def _node_collected(self, orphan: Orphan) -> None:
        """gc destroyed `orphan`: a run this engine drove, whose teardown left that node
        unconfirmed, is told it is gone (its "may still be billing" alert is settled), and
        its provider frees the node's slot of the pool."""
        driver = self._drivers.get(orphan.run_id or "")
        node = driver.view.node if driver is not None else None
        if driver is None or node is None or node.node_id != orphan.instance_id:
            return
        if node.state == ev.NodeState.UNCONFIRMED:
            self._provider(driver.pool).forget(node.node_id)  # its max_nodes slot
            gone = ev.Node(
                run_id=node.run_id, provider=node.provider, node_id=node.node_id,
                state=ev.NodeState.GONE,
            )  # fmt: skip
            driver.publish(gone)

    async def _check_orphans(self) -> None:
        """At start, warn about nodes that bill without a live run (a crash, a lost teardown)."""
        if not self._rents_nodes():
            return
        try:
            found = await self.orphans()
        except Exception as exc:  # whatever broke, the operator hears of it: never silence
            self.alert(f"could not check for orphaned nodes: {one_line(exc)}")
            return
        for orphan in found:  # one gc leaves alone says why (describe), not "run swjob gc"
            described, ours = orphan.describe(), orphan.collectable
            action = " — run `swjob gc`" if ours or orphan.unattributed else ""  # it asks
            self.alert(f"orphaned node: {described}{action}", orphan=described, collectable=ours)

    # ---- reading -----------------------------------------------------------------------

    def notify(self, pool: str | None, title: str, body: str) -> None:
        """Tell the pools file's `notify` targets (and `pool`'s) something of no one run —
        a sweep's end (docs/notifications.md); nothing when none is configured."""
        if self._notifier is not None:
            self._notifier.tell(pool, title, body)

    def subscribe(self, maxsize: int = 10_000) -> Subscription:
        return self.stream.subscribe(maxsize)

    def run(self, run_id: str) -> RunView | None:
        driver = self._drivers.get(run_id)
        if driver is not None:
            return driver.view
        return self._store.find(run_id) if self._store else None

    def masker(self, run_id: str) -> Callable[[str], str]:
        """How to show this run's output names: its job's secrets masked (a live run's own
        redaction; a past run's from its job file, see engine/run/masking.py)."""
        driver = self._drivers.get(run_id)
        if driver is not None:
            return driver.redact
        return mask_from_job_file(self._store.recovery(run_id) if self._store else None)

    def runs(self) -> list[RunView]:
        live = [d.view for d in self._drivers.values()]
        seen = {v.run_id for v in live}
        history = [v for v in (self._store.views() if self._store else []) if v.run_id not in seen]
        return sorted([*live, *history], key=lambda v: v.created, reverse=True)

    def running_run(self, run_id: str) -> bool:
        """True when this engine drives `run_id` and it has not finished."""
        driver = self._drivers.get(run_id)
        return driver is not None and not driver.view.terminal

    def running(self) -> list[RunView]:
        return [d.view for d in self._drivers.values() if not d.view.terminal]

    async def pull_outputs(self, run_id: str) -> str:
        """Land a finished run's outputs from its sink into its landing dir, each verified
        against the manifest (`swjob pull`'s download); what landed, in one line. SubmitError
        (one line) when the run has no sink, is still running, or the sink refuses."""
        from engine.sink.pull import pull

        if self.running_run(run_id):
            raise SubmitError(f"run {run_id} is still running: its outputs are not final")
        try:
            pulled = await pull(run_id)
        except (SinkError, TransferError, LandingFailed) as exc:
            raise SubmitError(str(exc)) from None
        landed = sum(1 for e in pulled.result.files if e.verified)
        lost = len(pulled.result.not_landed)
        return f"{landed} file(s) pulled from {pulled.url}, verified" + (
            f"; {lost} did not land" if lost else ""
        )

    def log_path(self, run_id: str, step: str) -> Path:
        view = self.run(run_id)
        if view is None:
            raise SubmitError(f"unknown run {run_id}")
        return view.run_dir / "logs" / f"{step}.log"

    # ---- warm nodes (docs/warm-nodes.md) -------------------------------------------------

    def warm_nodes(self) -> list[WarmNodeView]:
        """The nodes this operator keeps warm (parked, or taken by a run), with their bill."""
        now = time.time()
        return [warmnodes.view(node, now) for node in warmnodes.listing()]

    async def release_warm(self, node_id: str | None = None) -> list[str]:
        """Destroy the parked warm node `node_id` (None: every one); the problems, one line
        each (an unknown node is one)."""
        nodes = [n for n in warmnodes.listing() if n.in_use_by is None]
        chosen = [n for n in nodes if node_id is None or n.node_id == node_id]
        if node_id is not None and not chosen:
            return [f"no parked warm node {node_id} (see `swjob nodes`)"]
        problems = []
        for node in chosen:
            try:
                pool = self.config.pools.get(node.pool)
                await self._providers_ready(pool)
                problem = await warm.release(self._provider(pool), node)
            except (PoolFileError, SubmitError) as exc:
                problem = f"warm node {node.node_id}: {one_line(exc)}"
            if problem is not None:
                problems.append(problem)
        return problems

    def pools(self) -> list[PoolView]:
        """Each pool with the nodes of the runs driven here and the nodes kept warm."""
        views = []
        kept = self._warm_listing()
        for pool in self.config.pools:
            nodes = [
                d.view.node
                for d in self._drivers.values()
                if d.pool.name == pool.name
                and d.view.node
                and d.view.node.state not in ("gone", "warm")  # warm: listed with `warm`
            ]
            views.append(
                PoolView(
                    name=pool.name,
                    provider=pool.provider,
                    max_nodes=pool.max_nodes,
                    summary=pool.summary(),
                    nodes=nodes,
                    max_dollars=pool.caps.max_dollars,
                    max_hours=pool.caps.max_hours,
                    warm=[w for w in kept if w.pool == pool.name and w.in_use_by is None],
                )
            )
        return views

    def _warm_listing(self) -> list[WarmNodeView]:
        """The warm nodes, read at most once a second: the console asks for pools ten
        times a second, and the records are files (any swjob process may park one)."""
        now = time.monotonic()
        if now - self._warm_read[0] >= WARM_READ_S:
            try:
                self._warm_read = (now, self.warm_nodes())
            except OSError:
                self._warm_read = (now, [])
        return self._warm_read[1]
