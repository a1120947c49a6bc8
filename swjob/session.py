"""`AsyncSession` and `Run`: the engine (engine/api.py) as a few small objects for Python
callers. A session owns one engine on the caller's event loop; a `Run` is a handle on one
run it submitted — wait for it, follow its events, read its logs, stop it.

The CLI and the console call the same engine API; this adds only the handle's bookkeeping
(each run's events kept for its `events()` iterators).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.api import (
    DEFAULT_RUNS_DIR,
    Engine,
    EngineConfig,
    Event,
    JobSpec,
    Metric,
    NodeView,
    PoolView,
    RunView,
    SubmitError,
    Sweep,
    Variant,
    events,
    expand,
    load_job,
    load_pools,
)
from swjob.result import Result

JobLike = JobSpec | str | Path
PoolsLike = Any  # a pools file path, an engine PoolSet, or None for the user's own


class Run:
    """A run this session submitted."""

    def __init__(self, session: AsyncSession, run_id: str) -> None:
        self.session, self.run_id = session, run_id
        self._events: list[Event] = []
        self._changed = asyncio.Event()

    def __repr__(self) -> str:
        return f"<Run {self.run_id} {self.name} {self.view.state}>"

    @property
    def view(self) -> RunView:
        """The run as the engine sees it now (a frozen snapshot)."""
        view = self.session.engine.run(self.run_id)
        assert view is not None  # a run this session submitted is always known
        return view

    @property
    def name(self) -> str:
        return self.view.name

    @property
    def outputs_dir(self) -> Path:
        return self.view.run_dir / "outputs"

    async def wait(self, timeout: float | None = None) -> Result:
        """The run's result once it has ended (its node torn down, its outputs landed).
        TimeoutError after `timeout` seconds; the run goes on."""
        async with asyncio.timeout(timeout):
            view = await self.session.engine.wait(self.run_id)
        return Result.of(view)

    async def stop(self, reason: str = "stopped by operator") -> None:
        """The operator's stop: the job's processes ended, outputs collected, node gone.
        SubmitError when the run has already ended (or is tearing down)."""
        await self.session.engine.stop(self.run_id, reason)

    def logs(self, step: str = "run") -> str:
        """What the `setup` or `run` step printed so far (secrets masked), as on disk."""
        path = self.session.engine.log_path(self.run_id, step)
        try:
            return path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    async def events(self) -> AsyncIterator[Event]:
        """Every event of the run from its submission, then each new one as it comes;
        ends after its `Finished` (or when the session closes)."""
        seen = 0
        while True:
            while seen < len(self._events):
                event = self._events[seen]
                seen += 1
                yield event
                if isinstance(event, events.Finished):
                    return
            if self.session.closed:
                return
            self._changed.clear()
            await self._changed.wait()

    def _push(self, event: Event | None) -> None:
        if event is not None:
            self._events.append(event)
        self._changed.set()


class AsyncSession:
    """One engine on the running event loop: `async with AsyncSession() as s:`.

    `pools`: a pools file, a PoolSet, or None for the user's own pools file (plus the
    built-in `local` pool). `settings` are EngineConfig fields (`heartbeat_s`,
    `stop_grace_s`, `warm_agents`…). Closing stops every run it still drives unless
    `stop_on_close` is False (they then go on, for `swjob attach` or the console)."""

    def __init__(
        self,
        pools: PoolsLike = None,
        *,
        runs_dir: str | Path = DEFAULT_RUNS_DIR,
        stop_on_close: bool = True,
        **settings: Any,
    ) -> None:
        if pools is None or isinstance(pools, str | Path):
            pools = load_pools(Path(pools) if pools is not None else None)
        config = EngineConfig(runs_dir=Path(runs_dir), pools=pools, **settings)
        self.engine = Engine(config)
        self.stop_on_close = stop_on_close
        self.closed = False
        self._runs: dict[str, Run] = {}
        self._follow: asyncio.Task[None] | None = None

    async def __aenter__(self) -> AsyncSession:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        try:
            await self.engine.start()
        except BaseException:  # half started (an endpoint bound, its identity taken): undone
            with contextlib.suppress(Exception):  # the start's own error is the one to see
                await self.engine.close(stop_running=False)
            raise
        self._follow = asyncio.create_task(self._dispatch(self.engine.subscribe(1_000_000)))

    async def close(self) -> None:
        try:
            await self.engine.close(stop_running=self.stop_on_close)
        finally:
            self.closed = True
            if self._follow is not None:
                await asyncio.gather(self._follow, return_exceptions=True)
            for run in self._runs.values():
                run._push(None)

    async def _dispatch(self, subscription: Any) -> None:
        """Hand each event to its run's handle (the engine's stream has them all)."""
        async for event in subscription:
            run = self._runs.get(event.run_id)
            if run is not None:
                run._push(event)

    async def submit(
        self,
        job: JobLike,
        pool: str = "local",
        *,
        env: Mapping[str, str] | None = None,
        label: str | None = None,
    ) -> Run:
        """Start a run of `job` (a job file or a JobSpec) on a node of `pool`; returns at
        once. `env` adds parameters to the job's environment: shown in the run's name
        (`job[LR=0.1]`) and kept with the run so an adopter carries them on — so no
        secrets there (those belong in the job file's env); like every env value they
        are masked in the run's logs."""
        spec = job if isinstance(job, JobSpec) else load_job(Path(job))
        params = {str(k): str(v) for k, v in (env or {}).items()}
        if params:
            try:
                spec = spec.with_params(params)
            except ValueError as exc:
                raise SubmitError(str(exc)) from None
            label = label or Variant(params).label(spec.name)
        run_id = await self.engine.submit(spec, pool, label=label)
        run = self._runs[run_id] = Run(self, run_id)  # before the loop turns: no event missed
        return run

    def sweep(
        self,
        job: JobLike,
        grid: Mapping[str, Sequence[Any]] | None = None,
        *,
        variants: Sequence[Mapping[str, Any]] | None = None,
        pool: str = "local",
        concurrency: int = 4,
        max_dollars: float | None = None,
        fail_fast: bool = False,
        metric: str | None = None,
        minimize: bool = True,
    ) -> Sweep:
        """A sweep over `grid` (NAME → values, every combination) or explicit `variants`;
        `await sweep.run()` runs it and returns its rows (engine/sweep/runner.py)."""
        spec = job if isinstance(job, JobSpec) else load_job(Path(job))
        if grid is not None:
            chosen = expand({k: [str(v) for v in vs] for k, vs in grid.items()})
        else:
            chosen = [Variant({k: str(v) for k, v in p.items()}) for p in variants or []]
        return Sweep(
            self.engine, spec, chosen, pool=pool, concurrency=concurrency,
            max_dollars=max_dollars, fail_fast=fail_fast,
            metric=Metric.parse(metric) if metric else None, minimize=minimize,
        )  # fmt: skip

    def run(self, run_id: str) -> Run:
        """The handle of a run this session submitted."""
        try:
            return self._runs[run_id]
        except KeyError:
            raise SubmitError(f"run {run_id} was not submitted by this session") from None

    def runs(self) -> list[RunView]:
        """Every run this user has: live ones and the history, newest first."""
        return self.engine.runs()

    def pools(self) -> list[PoolView]:
        return self.engine.pools()

    def nodes(self) -> list[NodeView]:
        """The nodes up for this session's runs, pool by pool."""
        return [node for pool in self.engine.pools() for node in pool.nodes]
