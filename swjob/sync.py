"""`Session`: the async API for scripts and notebooks, without `await`.

The engine runs on an event loop of its own in a background thread, so a `Session` works
the same in a plain script and inside a running loop (Jupyter's, or an async test) — where
`asyncio.run` would refuse. Each call hands a coroutine to that loop and waits for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Iterator, Mapping, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

from engine.api import Event, NodeView, PoolView, RunView, SweepRow
from swjob.result import Result
from swjob.session import AsyncSession, JobLike, PoolsLike, Run

T = TypeVar("T")


class _Loop:
    """An event loop in a daemon thread, for the session's lifetime."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="swjob", daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        future: Future[T] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join()
        self.loop.close()


async def _made(make: Any) -> Any:
    return make()


class SyncRun:
    """A run handle whose calls block: `Run`'s, one by one."""

    def __init__(self, session: Session, run: Run) -> None:
        self._session, self._run = session, run
        self.run_id = run.run_id

    def __repr__(self) -> str:
        return repr(self._run)

    @property
    def view(self) -> RunView:
        return self._run.view

    @property
    def name(self) -> str:
        return self._run.name

    @property
    def outputs_dir(self) -> Path:
        return self._run.outputs_dir

    def wait(self, timeout: float | None = None) -> Result:
        return self._session.call(self._run.wait(timeout))

    def stop(self, reason: str = "stopped by operator") -> None:
        self._session.call(self._run.stop(reason))

    def logs(self, step: str = "run") -> str:
        return self._run.logs(step)

    def events(self) -> Iterator[Event]:
        """The run's events as `Run.events` yields them, each waited for here."""
        stream = self._run.events()
        while True:
            try:
                yield self._session.call(anext(stream))
            except StopAsyncIteration:
                return


class Session:
    """`with swjob.Session() as s: s.submit("job.toml").wait()` — `AsyncSession`'s
    arguments; every method blocks until the engine has done it."""

    def __init__(self, pools: PoolsLike = None, **options: Any) -> None:
        self._loop = _Loop()
        try:  # built on its loop: what it makes there belongs to that loop
            self._async: AsyncSession = self.call(_made(lambda: AsyncSession(pools, **options)))
        except BaseException:
            self._loop.close()
            raise
        self._started = False

    def __enter__(self) -> Session:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def async_session(self) -> AsyncSession:
        """The AsyncSession underneath, for APIs that take one (`swjob.optuna.Executor`):
        use its coroutines through `call`."""
        return self._async

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Run a coroutine of this session's (AsyncSession's, a Sweep's…) on its loop."""
        return self._loop.call(coro)

    def start(self) -> None:
        self.call(self._async.start())
        self._started = True

    def close(self) -> None:
        """Stop the session's runs (unless `stop_on_close=False`) and its loop; once."""
        if self._loop.loop.is_closed():
            return
        try:
            if self._started:
                self.call(self._async.close())
        finally:
            self._loop.close()

    def submit(
        self,
        job: JobLike,
        pool: str = "local",
        *,
        env: Mapping[str, str] | None = None,
        label: str | None = None,
    ) -> SyncRun:
        run = self.call(self._async.submit(job, pool, env=env, label=label))
        return SyncRun(self, run)

    def sweep(self, job: JobLike, grid: Mapping[str, Sequence[Any]] | None = None,
              **options: Any) -> list[SweepRow]:  # fmt: skip
        """Run a sweep to its end (AsyncSession.sweep's arguments); its rows."""
        sweep = self._async.sweep(job, grid, **options)
        return self.call(sweep.run())

    def run(self, run_id: str) -> SyncRun:
        """The handle of a run this session submitted (SubmitError for any other)."""
        return SyncRun(self, self._async.run(run_id))

    def runs(self) -> list[RunView]:
        return self._async.runs()

    def pools(self) -> list[PoolView]:
        return self._async.pools()

    def nodes(self) -> list[NodeView]:
        return self._async.nodes()
