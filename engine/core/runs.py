"""The runs this engine drives: a job submitted becomes a run under a lease
(engine/state/ownership.py), driven to its end by its RunDriver; a run its node let down
records its next attempt at its end and starts it (engine/run/chain.py); each change of
a run's summary is indexed. Adoption (adoption.py) hands its recovered drivers here too.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from agent import endpoint as iroh_endpoint
from agent import reattach
from engine.core.config import EngineConfig, SubmitError, new_run_id
from engine.core.providers import Providers
from engine.jobs import envargs
from engine.jobs.jobspec import JobSpec
from engine.jobs.pools import Pool, PoolFileError
from engine.providers.base import Bootstrap, heartbeat_for, silence_for
from engine.report import appender
from engine.report import events as ev
from engine.report.datastream import Datastream
from engine.report.runbook import new_view
from engine.report.views import RunView, short_id
from engine.run import attempts, fsm, recovery
from engine.run.attempts import Attempt
from engine.run.chain import Chains, NextStep
from engine.run.control import ControlServer, NodeSession
from engine.run.fallover import PoolSource
from engine.run.livehub import LiveHub
from engine.run.orchestrator import RunDriver
from engine.sink.check import check_job_env, check_sink
from engine.sink.place import SinkError, place_for
from engine.state import ownership
from engine.state.indexwrites import IndexWrites
from engine.state.private import foreign_dir
from engine.state.store import Store
from engine.watch import nodetargets

# The events that change a run's summary in the index. Cost is one (every few seconds while
# a priced node bills): another console follows the run from the index alone.
_INDEXED = (ev.Transition, ev.Node, ev.Alert, ev.Cost, ev.Finished)


class RunTable:
    """Each run this engine drives: its driver, the task driving it, its lease; and the
    next attempts recorded (`chains`). No next attempt starts once `closing`."""

    def __init__(
        self, config: EngineConfig, stream: Datastream, live: LiveHub, providers: Providers
    ) -> None:
        self.config = config
        self.stream = stream
        self.live = live
        self.providers = providers
        self.drivers: dict[str, RunDriver] = {}
        self.tasks: dict[str, asyncio.Task[RunView]] = {}
        self.chains = Chains()  # next attempts: recorded, then started (engine/run/chain.py)
        self.leases: dict[str, ownership.Lease] = {}
        self.closing = False
        self._starting = asyncio.Lock()
        """Runs submitted at once (a sweep, a script's gather) start one per turn of the
        loop: 12 starts in one turn held the console's loop ~20 ms on a busy machine."""
        self.node_notify: dict[str, nodetargets.NodeTargets] = {}  # pool → what nodes tell
        self._server: ControlServer | None = None
        self._endpoint: Any = None
        self._endpoint_id = ""  # its id as text: every run records it twice, and it never changes
        self._store: Store | None = None  # read here, on the loop
        self._index: IndexWrites | None = None

    def attach(
        self, server: ControlServer, endpoint: Any, store: Store, index: IndexWrites
    ) -> None:
        """What the engine's start made: the node control service on its endpoint, the
        run index (read here) and its writer."""
        self._server, self._endpoint, self._store, self._index = server, endpoint, store, index
        self._endpoint_id = str(endpoint.id())

    async def submit(
        self, job: JobSpec, pool: str, *, cold: bool, names: tuple[str | None, str | None]
    ) -> str:
        """Engine.submit: the run of `job` on `pool` started (it moves to a `fallback`
        pool while provisioning: engine/run/fallover.py); `names` are its (label, sweep)."""
        try:
            pool_def = self.config.pools.get(pool)
        except PoolFileError as exc:
            raise SubmitError(str(exc)) from None
        await self.providers.ready(pool_def)
        try:
            check_job_env(job, pool_def)
            await check_sink(pool_def, job.name)
        except SinkError as exc:  # before any node is rented
            raise SubmitError(str(exc)) from None
        async with self._starting:  # a turn of the loop between two starts
            await asyncio.sleep(0)  # before the start: a cancel after it would lose the run
            return self.start(job, pool_def, None, cold=cold, names=names)

    def start(
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
            self.leases[run_id] = lease
        attempt = attempt or attempts.first_attempt(run_id, pool_def)
        run_dir = (self.config.runs_dir / job.name / run_id).absolute()
        if (foreign := foreign_dir(run_dir)) is not None:  # another user could swap it
            self.leases.pop(run_id).release(finished=fresh)
            raise SubmitError(f"{foreign}: swjob lands no run where another user can move it")
        try:
            run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:  # a file in the way, a read-only disk: nothing started yet
            self.leases.pop(run_id).release(finished=fresh)  # a new run is no run at all
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
        self.chains.pools[run_id] = pool_def
        driver = self.make_driver(
            new_view(submitted), job, attempts.capped(pool_def, attempt), keys, attempt
        )
        driver.cold = cold
        driver.remember(
            orchestrator_id=self._endpoint_id,
            job_file=str(job.source),
            job_sha256=recovery.job_digest(job.source),
            env_args=envargs.record(job),
            pool=pool,
            pool_def=pool_def.model_dump_json(),
            attempt=attempts.to_record(attempt),
            params=job.params,
        )
        self.launch(driver)
        return run_id

    def _new_run_id(self) -> str:
        """A fresh id whose short id (its random tail) no run in the index has: that is
        what the board and `swjob runs` show, and it must name one run."""
        run_id = new_run_id()
        while self._store is not None and self._store.short_id_taken(short_id(run_id)):
            run_id = new_run_id()
        return run_id

    def launch(self, driver: RunDriver) -> None:
        self.drivers[driver.view.run_id] = driver
        self.tasks[driver.view.run_id] = asyncio.create_task(self._drive(driver))
        self.live.run_started(driver.view.run_id)

    def make_driver(
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
        told = self.node_notify.get(pool.name, nodetargets.NodeTargets())
        told.say_skipped(view.run_id)
        bootstrap = Bootstrap(
            run_id=view.run_id,
            ticket=iroh_endpoint.ticket_of(self._endpoint),
            orchestrator_id=self._endpoint_id,
            token=token,
            reattach_id=reattach.public_of(keys.get("reattach_key", "")),
            silence_s=silence_for(pool.node_lost_after_s),
            orphan_timeout_s=pool.orphan_timeout_s,
            max_dollars=pool.caps.max_dollars,
            max_hours=pool.caps.max_hours,
            sink=pool.sink is not None,
            notify=told.spec,
        )
        driver = RunDriver(
            view=view.model_copy(update={"live": True}),
            job=job,
            pool=pool,
            provider=self.providers.get(pool),
            session=session,
            bootstrap=bootstrap,
            stream=self.stream,
            stop_grace_s=self.config.stop_grace_s,
            on_change=self._save,
            attempt=attempt,
            endpoint=self._endpoint,
            pools=PoolSource(self.providers.ready_pool, self.config.heartbeat_s),
        )
        holder.append(driver)
        driver.recovery.update(keys, **{ownership.OWNER: ownership.me()})
        return driver

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
            lease = self.leases.pop(run_id, None)
            if lease is not None and driver.view.terminal and not self._unindexed(run_id):
                lease.release(finished=True)
            elif lease is not None:  # cancelled mid-run, or its end not indexed: held until
                self.leases[run_id] = lease  # close(), then an adopter ends it from its files
        self._chain(driver, view)
        return view

    def _chain(self, driver: RunDriver, view: RunView) -> None:
        """Take the next attempt recorded at the run's end (engine/run/chain.py). An engine
        closing leaves it recorded: the next adopter takes it."""
        pool_def = self.chains.pools.pop(view.run_id, driver.pool)
        step = self.chains.take(view.run_id)
        if step is not None and not self.closing:
            names = (driver.view.label, driver.view.sweep)
            run_id = self.start(driver.job, pool_def, step.attempt, step.run_id, names=names)
            self.chains.started(view.run_id, run_id)

    def _record_next(self, driver: RunDriver) -> NextStep | None:
        """At a run's end, the attempt after it when its node let it down and the chain
        has attempts and money left; its lease is ours before it is recorded, so no
        adopter takes it while we start it."""
        if driver.attempt is None or self.closing:
            return None
        pool = self.chains.pools.get(driver.view.run_id, driver.pool)
        attempt = attempts.next_attempt(driver.view, pool, driver.attempt)
        run_id = new_run_id()
        lease = ownership.acquire(run_id) if attempt is not None else None
        if attempt is None or lease is None:
            return None
        self.leases[run_id] = lease
        return self.chains.recorded(driver.view.run_id, NextStep(run_id, attempt))

    def successor(self, run_id: str) -> str | None:
        """The run id of the attempt after `run_id`: started here, or recorded (by whoever
        drove it) and maybe not started yet — `adopt` starts it."""
        if (started := self.chains.successor(run_id)) is not None:
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

    async def stop(self, run_id: str, reason: str = "stopped by operator") -> None:
        driver = self.drivers.get(run_id)
        if driver is None or not driver.view.stoppable:
            raise SubmitError(f"run {run_id} is not running")
        driver.post(fsm.OperatorStop(reason))

    async def stop_all(self) -> None:
        for driver in list(self.drivers.values()):
            if driver.view.stoppable:  # a FAILED run still collecting has a node up, too
                await self.stop(driver.view.run_id)

    async def wait(self, run_id: str) -> RunView:
        return await asyncio.shield(self.tasks[run_id])

    async def close(self, *, stop_running: bool) -> None:
        """Every run stopped and its node torn down (`stop_running`), or left to its node
        and disowned for an adopter."""
        if stop_running:
            await self.stop_all()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
        else:
            for task in self.tasks.values():
                task.cancel()
            await asyncio.gather(*self.tasks.values(), return_exceptions=True)
            self.disown()

    def release_leases(self) -> None:
        """The engine's last act: every lease still held is given back."""
        for lease in self.leases.values():
            lease.release()

    def disown(self) -> None:
        """Runs left running lose this process's owner stamp in their last row: their
        leases are freed for an adopter, and a stamp naming a process that lives on (a
        console embedded in a longer-lived one, a test) made every other process's
        adopter take them for driven elsewhere, for as long as this process lived."""
        for driver in self.drivers.values():
            if driver.view.finished is None:
                driver.remember(**{ownership.OWNER: None})

    def running_run(self, run_id: str) -> bool:
        """True when this engine drives `run_id` and it has not finished."""
        driver = self.drivers.get(run_id)
        return driver is not None and not driver.view.terminal

    def running(self) -> list[RunView]:
        return [d.view for d in self.drivers.values() if not d.view.terminal]
