"""swjob for Python: submit runs, wait for them, read their results, run sweeps.

    import swjob

    with swjob.Session() as s:                       # scripts, notebooks
        run = s.submit("train/job.toml", pool="local", env={"LR": "0.01"})
        result = run.wait()
        print(result.state, result.exit_code, result.outputs_dir)

    async with swjob.AsyncSession() as s:            # asyncio code
        run = await s.submit("train/job.toml")
        async for event in run.events(): ...

A façade over the engine's public API (engine/api.py), which the CLI and the console call
too; see docs/api.md. `swjob.optuna` (extra `swjob[optuna]`) runs Optuna trials.
"""

from __future__ import annotations

from engine.api import (
    ConfigFileError,
    Event,
    GridError,
    JobFileError,
    JobSpec,
    NodeView,
    PoolFileError,
    PoolView,
    ProviderError,
    RunView,
    SubmitError,
    SweepRow,
    SwjobError,
    events,
    load_job,
)
from swjob.result import Result
from swjob.session import AsyncSession, Run
from swjob.sync import Session, SyncRun

__all__ = [
    "AsyncSession",
    "ConfigFileError",
    "Event",
    "GridError",
    "JobFileError",
    "JobSpec",
    "NodeView",
    "PoolFileError",
    "PoolView",
    "ProviderError",
    "Result",
    "Run",
    "RunView",
    "Session",
    "SubmitError",
    "SweepRow",
    "SwjobError",
    "SyncRun",
    "events",
    "load_job",
]
