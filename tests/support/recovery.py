"""An operator that dies and one that takes over: the engine-process script the crash tests
kill at a chosen moment, and the engine that adopts what the dead one left."""

from __future__ import annotations

import asyncio
from pathlib import Path

from engine.engine import Engine, EngineConfig
from engine.jobs.pools import PoolSet
from engine.report.views import RunView

__all__ = ["ENGINE_MAIN", "recover"]

ENGINE_MAIN = """
import asyncio, sys
from pathlib import Path
from engine.engine import Engine, EngineConfig
from engine.jobs.jobspec import load_job
from engine.jobs.pools import load_pools

async def main():
    engine = Engine(EngineConfig(runs_dir=Path(sys.argv[2]), pools=load_pools(None)))
    await engine.start()
    await engine.submit(load_job(Path(sys.argv[1])), "local")
    await asyncio.Event().wait()

asyncio.run(main())
"""
"""An engine process driving the job file argv[1] into the runs dir argv[2] until it is
killed: a test puts its patch (where the process dies or hangs) in front of it."""


async def recover(runs_dir: Path, pools: PoolSet, run_id: str) -> RunView:
    """Start a new engine that adopts the dead one's runs and wait for `run_id` to end."""
    engine = Engine(EngineConfig(runs_dir=runs_dir, pools=pools, adopt_orphans=True))
    await engine.start()
    try:
        return await asyncio.wait_for(engine.wait(run_id), 60)
    finally:
        await engine.close()
