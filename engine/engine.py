"""The engine's public API: what the TUI and the CLI call, and nothing else of the engine.

One Engine per process: it owns the process's iroh endpoint and control service,
the datastream, the run index, one provider per pool, and a RunDriver per live run.
It runs on the caller's event loop (the TUI's, or the CLI's `asyncio.run`).

It drives only runs whose lease it holds (engine/state/ownership.py): the runs it
submitted, and — when asked (`adopt`, or `adopt_orphans` for the console) — unfinished
runs whose owner is gone.

The Engine is the wiring and the stable surface; the work is its collaborators'
(engine/core/): `Providers` (a provider per pool), `RunTable` (submit, drive, chain,
index, stop), `Adopter`, `Orphans`, `Nodes` (pools and warm nodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from iroh.iroh_ffi import IrohError

from agent import endpoint as iroh_endpoint
from agent.transfer.errors import TransferError
from agent.transfer.memory import pin_malloc, share_one_arena
from engine.core.adoption import Adopter
from engine.core.config import EngineConfig, SubmitError, new_run_id
from engine.core.nodes import Nodes
from engine.core.orphans import Orphans
from engine.core.providers import Providers
from engine.core.runs import RunTable
from engine.jobs.jobspec import JobSpec
from engine.providers import localspawn
from engine.report import appender, scope
from engine.report import events as ev
from engine.report.datastream import Datastream, Subscription
from engine.report.views import PoolView, RunView, WarmNodeView
from engine.run.control import ControlServer
from engine.run.livehub import LiveHub
from engine.run.manifest import LandingFailed
from engine.run.masking import mask_from_job_file
from engine.sink.place import SinkError
from engine.state import identity
from engine.state.indexwrites import IndexWrites, Unwritten
from engine.state.paths import cache_dir, state_dir
from engine.state.private import set_private_umask
from engine.state.store import Store
from engine.watch import hostwatch, nodetargets, notifier

if TYPE_CHECKING:
    from engine.providers.gc import Collection, Orphan

__all__ = ["Engine", "EngineConfig", "SubmitError", "new_run_id"]

log = logging.getLogger("swjob.engine")

ENDPOINT_CLOSE_S = 0.5  # iroh's close waits ~3 s on a dial cut short (a dead node's reclaim)


class Engine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        set_private_umask()  # run index, landing dirs, node workspaces: the operator's only
        state_dir(), cache_dir()  # made (or tightened, said once) before a UI owns the terminal
        self.config = config or EngineConfig()
        self.stream = Datastream()
        self._providers = Providers(self.config, self.alert)
        self.live = LiveHub(lambda run_id: self._drivers.get(run_id))  # shells, forwards
        self._table = RunTable(self.config, self.stream, self.live, self._providers)
        self._drivers = self._table.drivers
        self._nodes = Nodes(self._table, self._providers)
        self._adopter: Adopter | None = None  # made at start, with the run index
        self._orphans: Orphans | None = None
        self._store: Store | None = None  # read here, on the loop (opened off it)
        self._writes: Store | None = None  # written on the writer thread only (`_index`)
        self._index: IndexWrites | None = None
        self.closing_note: str | None = None
        """What `close` could not record, for a console to print once its screen is gone."""
        self._endpoint = None
        self._server: ControlServer | None = None
        self._identity: identity.Identity | None = None
        self._orphan_check: asyncio.Task[None] | None = None
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
        self._table.attach(self._server, self._endpoint, self._store, self._index)
        self._providers.preload()  # ~1 s of imports: in a thread, while the rest starts
        # before any adoption: a run adopted now (a recorded next attempt, a queued run)
        # boots its node with the pool's targets and is watched like any other
        pools = self.config.pools  # None below: no `notify` target, no pool rents nodes
        self._notifier = notifier.for_engine(pools, self.subscribe, self.run, self.masker)
        self._table.node_notify = await asyncio.to_thread(nodetargets.for_pools, pools)
        self._host_watch = hostwatch.for_engine(pools, self.subscribe, self.run)
        self._adopter = Adopter(
            self._table, self._providers, self.alert,
            store=self._store, index=self._index, endpoint=self._endpoint,
        )  # fmt: skip
        if self.config.adopt_orphans:
            await self._adopter.start()
        self._orphans = Orphans(self._table, self._providers, self.alert, self._store)
        self._orphan_check = asyncio.create_task(self._orphans.check())
        if self.config.warm_agents:
            localspawn.warm()  # last: its imports run while the caller goes on

    async def _bind(self) -> Any:
        """Bind with our persistent identity: on last time's port when it is free, else on
        a fresh one no `bind(0)` takes while we are down (engine/state/identity.py), unless
        the user chose the port (SWJOB_IROH_BIND)."""
        key = self._identity.secret_key
        fresh = iroh_endpoint.chosen_port() is None
        for port in self._identity.ports_to_try(fresh=fresh):
            with contextlib.suppress(IrohError):
                return await iroh_endpoint.bind(accept=True, secret_key=key, port=port)
        return await iroh_endpoint.bind(accept=True, secret_key=key)

    async def close(self, *, stop_running: bool = True) -> None:
        """Stop: with `stop_running`, every run this engine drives is stopped and its node
        torn down; without, they are left to their nodes (which keep running and billing)
        and their leases freed, so another swjob can adopt them."""
        self._table.closing = True  # no next attempt is started from here on
        if self._adopter is not None:
            await self._adopter.close()
        await self._table.close(stop_running=stop_running)
        if self._orphan_check is not None:
            self._orphan_check.cancel()
            await asyncio.gather(self._orphan_check, return_exceptions=True)
        await self.live.close()
        if self._server is not None:
            await self._server.stop()
        if self._endpoint is not None:
            with contextlib.suppress(TimeoutError):  # as the agent's: never held by a close
                async with asyncio.timeout(ENDPOINT_CLOSE_S):
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
        self._table.release_leases()

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

    # ---- runs (engine/core/runs.py, adoption.py) ----------------------------------------

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
        return await self._table.submit(job, pool, cold=cold, names=(label, sweep))

    async def adopt(self, run_id: str) -> bool:
        """Take over `run_id` if it is unfinished and its owner is gone (ownership.py);
        True when this engine drives it now. Raises SubmitError (one line) when the run
        has no owner but cannot be carried on here (e.g. its pool's SDK fails to load)."""
        assert self._adopter is not None
        return await self._adopter.adopt(run_id)

    def successor(self, run_id: str) -> str | None:
        """The run id of the attempt after `run_id`: started here, or recorded (by whoever
        drove it) and maybe not started yet — `adopt` starts it."""
        return self._table.successor(run_id)

    async def stop(self, run_id: str, reason: str = "stopped by operator") -> None:
        await self._table.stop(run_id, reason)

    async def stop_all(self) -> None:
        await self._table.stop_all()

    async def wait(self, run_id: str) -> RunView:
        return await self._table.wait(run_id)

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

    # ---- orphans (engine/core/orphans.py) -------------------------------------------------

    async def orphans(self) -> list[Orphan]:
        """Nodes billing without a live run, for `swjob gc` and the board's collect action
        (engine/core/orphans.py). Raises VastApiError when an account cannot be listed."""
        assert self._orphans is not None
        return await self._orphans.find()

    async def collect_orphans(self, orphans: list[Orphan]) -> Collection:
        """Destroy (verified) the given orphans: how many went, and what went wrong."""
        assert self._orphans is not None
        return await self._orphans.collect(orphans)

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
        return self._table.running_run(run_id)

    def running(self) -> list[RunView]:
        return self._table.running()

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

    # ---- pools and warm nodes (engine/core/nodes.py, docs/warm-nodes.md) ----------------

    def warm_nodes(self) -> list[WarmNodeView]:
        """The nodes this operator keeps warm (parked, or taken by a run), with their bill."""
        return self._nodes.warm_nodes()

    async def release_warm(self, node_id: str | None = None) -> list[str]:
        """Destroy the parked warm node `node_id` (None: every one); the problems, one line
        each (an unknown node is one)."""
        return await self._nodes.release_warm(node_id)

    def pools(self) -> list[PoolView]:
        """Each pool with the nodes of the runs driven here and the nodes kept warm."""
        return self._nodes.pools()
