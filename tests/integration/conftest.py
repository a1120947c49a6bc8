"""Fixtures for end-to-end runs on the real local pool: real agents, real iroh on loopback."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
import tomlkit

from engine.engine import Engine, EngineConfig
from engine.jobs.jobspec import JobSpec, load_job
from engine.jobs.pools import load_pools


@pytest.fixture
def make_job(tmp_path: Path) -> Callable[..., JobSpec]:
    """Write a job file (and optional workspace files) and load it like a user would."""

    def make(files: dict[str, str] | None = None, **fields: object) -> JobSpec:
        root = tmp_path / "project"
        root.mkdir(exist_ok=True)
        for rel, text in (files or {}).items():
            path = root / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        fields.setdefault("name", "t")
        doc = tomlkit.document()
        doc["job"] = fields
        job_file = root / "job.toml"
        job_file.write_text(tomlkit.dumps(doc))
        return load_job(job_file)

    return make


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[Engine]:
    eng = Engine(
        EngineConfig(
            runs_dir=tmp_path / "runs",
            pools=load_pools(None),
            heartbeat_s=0.5,
            stop_grace_s=2.0,
        )
    )
    await eng.start()
    try:
        yield eng
    finally:
        await eng.close(stop_running=True)
