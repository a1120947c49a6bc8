"""A run as its landing dir records it (run.json, events.jsonl), and jobs whose end the
test decides: what tests read back after a real run, in one place."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.engine import Engine
from engine.jobs.jobspec import JobSpec
from engine.report.datastream import read_events
from engine.report.events import Event, Submitted
from engine.report.runbook import new_view
from engine.report.views import RunView
from engine.state.store import Store
from tests.support.waiting import eventually

__all__ = [
    "agent_pid", "events", "finished", "finished_at", "only_run_dir", "run_json", "run_to_end",
    "unfinished_run", "waiting_job",
]  # fmt: skip


async def run_to_end(
    engine: Engine, job: JobSpec, pool: str = "local", timeout: float = 60
) -> RunView:
    """Submit `job` to `pool` and wait for the run's final view."""
    run_id = await engine.submit(job, pool)
    return await asyncio.wait_for(engine.wait(run_id), timeout)


def run_json(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "run.json").read_text())


def only_run_dir(runs_root: Path, job: str) -> Path:
    """The single run directory of `job` (waits until the run has written it: a `swjob`
    process starting on a machine at load 30 took over 30 s to get there)."""
    root = runs_root / job
    eventually(lambda: root.exists() and any(root.iterdir()), 90, what=f"a run of {job}")
    (run_dir,) = root.iterdir()
    return run_dir


def events(run_dir: Path) -> list[Event]:
    return read_events(run_dir / "events.jsonl")


def finished(run_dir: Path) -> Event | None:
    return next((e for e in events(run_dir) if e.kind == "finished"), None)


def finished_at(run_dir: Path) -> datetime:
    event = finished(run_dir)
    assert event is not None
    return event.ts


def agent_pid(run_dir: Path) -> int:
    """The local agent's pid, from the run's first node event."""
    eventually(lambda: any(e.kind == "node" for e in events(run_dir)), what="a node event")
    node = next(e for e in events(run_dir) if e.kind == "node")
    return int(node.offer["pid"])


def waiting_job(project: Path, name: str, release: Path, lines: int = 3, then: str = "") -> Path:
    """A job that prints `lines` lines, then waits for `release` to exist, then prints
    `then` (if any) and writes its output: the test decides when it ends. Returns the job
    file."""
    project.mkdir(parents=True, exist_ok=True)
    run = (
        f"for i in $(seq 1 {lines}); do echo line $i; done; "
        f"while [ ! -e {release} ]; do sleep 0.1; done; "
        + (f"echo {then}; " if then else "")
        + "echo done > out.txt"
    )
    job = project / "job.toml"
    job.write_text(
        f'[job]\nname = "{name}"\nrun = "{run}"\n'
        f'workspace = {{ workdir = "." }}\noutputs = ["out.txt"]\n'
    )
    return job


def unfinished_run(runs_root: Path, run_id: str, job: str = "job", pool: str = "gpu") -> Path:
    """A run as an owner that died right after submitting it leaves it: its landing dir
    with its Submitted event, its row in the run index, unfinished. Returns its run dir."""
    run_dir = runs_root / job / run_id
    run_dir.mkdir(parents=True)
    submitted = Submitted(run_id=run_id, job_name=job, pool=pool, run_dir=str(run_dir), seq=1)
    (run_dir / "events.jsonl").write_text(submitted.model_dump_json() + "\n")
    store = Store()
    store.save(new_view(submitted))
    store.close()
    return run_dir
