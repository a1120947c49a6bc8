"""Real engines for tests: one way to configure them, one way to close them.

Every engine a test makes uses short deadlines (a 0.5 s heartbeat, a 2 s stop grace) so a
stop or a lost node is seen in seconds, on the built-in local pool plus whatever rented
pools the test names; a test changes only what it is about.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from engine.engine import Engine, EngineConfig
from engine.jobs.pools import Pool, PoolSet, load_pools

__all__ = ["EngineFactory", "engine", "engine_config", "engine_with", "local_pools", "make_engine"]

QUICK = {"heartbeat_s": 0.5, "stop_grace_s": 2.0}


def local_pools(*extra: Pool, **settings: Any) -> PoolSet:
    """The pools a user has (the builtins, and the pools file a test may have written into
    its config dir), the local pool's `settings` changed (short test deadlines), and `extra`."""
    pools = load_pools(None)
    local = pools.get("local").model_copy(update=settings)
    every = {pool.name: pool for pool in (*pools, local, *extra)}
    return PoolSet(every, pools.source, pools.notify)


def engine_config(
    runs_dir: Path, *extra: Pool, local: dict[str, Any] | None = None, **overrides: Any
) -> EngineConfig:
    """A config with the test deadlines, `local` pool settings and `overrides` applied."""
    pools = local_pools(*extra, **(local or {}))
    return EngineConfig(runs_dir=runs_dir, pools=pools, **{**QUICK, **overrides})


@contextlib.asynccontextmanager
async def engine_with(
    runs_dir: Path,
    *extra: Pool,
    deadline_s: float = 10.0,
    heartbeat_s: float = 0.5,
    grace_s: float = 2.0,
    **local: Any,
) -> AsyncIterator[Engine]:
    """A started engine with `deadline_s` as the local pool's node_lost_after_s (and any other
    `local` pool settings), and `extra` pools; closed, every live run stopped, afterwards."""
    config = engine_config(
        runs_dir, *extra, local={"node_lost_after_s": deadline_s, **local},
        heartbeat_s=heartbeat_s, stop_grace_s=grace_s,
    )  # fmt: skip
    eng = Engine(config)
    await eng.start()
    try:
        yield eng
    finally:
        await eng.close(stop_running=True)


EngineFactory = Callable[..., Awaitable[Engine]]


@pytest.fixture
async def make_engine(tmp_path: Path) -> AsyncIterator[EngineFactory]:
    """`await make_engine(*pools, **config)`: a started engine on the local pool plus `pools`,
    its runs under the test's tmp dir unless `runs_dir` says otherwise; closed, its runs
    stopped, when the test ends. (The console starts and closes its engine itself: its
    tests build one from `engine_config` and hand it over unstarted.)"""
    async with contextlib.AsyncExitStack() as started:

        async def make(*pools: Pool, runs_dir: Path | None = None, **config: Any) -> Engine:
            eng = Engine(engine_config(runs_dir or tmp_path / "runs", *pools, **config))
            await eng.start()
            started.push_async_callback(eng.close)
            return eng

        yield make


@pytest.fixture
async def engine(make_engine: EngineFactory) -> Engine:
    """A started engine on the built-in local pool; a file whose tests need other pools or
    settings overrides this fixture with its own call of `make_engine`."""
    return await make_engine()
