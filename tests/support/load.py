"""Many jobs at once on the local pool: the workload of the load test and the engine benchmark.

Job i pushes a one-line workspace, prints a few numbered lines, copies its input to an
output and exits i % 2 — so half COMPLETE and half FAIL, and every one of them has a log
and an output whose content says which job made it.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path

import tomlkit

from engine.engine import Engine
from engine.jobs.jobspec import JobSpec, load_job
from engine.report import events as ev
from engine.report.views import RunView
from tests.support.tap import Tap

LINES = 5


def load_jobs(root: Path, count: int) -> list[JobSpec]:
    """Write `count` job projects under `root` and load them as a user would."""
    jobs = []
    for i in range(count):
        project = root / f"job{i:02d}"
        project.mkdir(parents=True)
        (project / "input.txt").write_text(f"input of job {i}\n")
        doc = tomlkit.document()
        doc["job"] = {
            "name": f"load{i:02d}",
            "run": f"for k in $(seq {LINES}); do echo job {i} line $k; done; "
            f"cp input.txt result.txt; exit {i % 2}",
            "workspace": {"workdir": "."},
            "outputs": ["result.txt"],
        }
        (project / "job.toml").write_text(tomlkit.dumps(doc))
        jobs.append(load_job(project / "job.toml"))
    return jobs


@dataclass
class LoadResult:
    views: list[RunView]
    most_nodes: int  # most nodes that existed at one time (provisioning until gone)
    most_pending: int  # most runs in PENDING at one time
    wall_s: float


def _peaks(events: list[ev.Event]) -> tuple[int, int]:
    """Replay the datastream: how many nodes existed, and how many runs waited, at most."""
    nodes: set[str] = set()
    pending: set[str] = set()
    most_nodes = most_pending = 0
    for event in events:
        if isinstance(event, ev.Node):
            (nodes.discard if event.state is ev.NodeState.GONE else nodes.add)(event.node_id)
        elif isinstance(event, ev.Transition):
            waiting = event.to_state == "PENDING" and event.to_phase != "teardown"
            (pending.add if waiting else pending.discard)(event.run_id)
        most_nodes, most_pending = max(most_nodes, len(nodes)), max(most_pending, len(pending))
    return most_nodes, most_pending


async def run_load(engine: Engine, jobs: list[JobSpec], timeout: float = 120) -> LoadResult:
    """Submit every job at once, wait for all of them, and replay what happened."""
    tap = Tap(engine)
    started = time.monotonic()
    try:
        run_ids = [await engine.submit(job, "local") for job in jobs]
        waits = [engine.wait(run_id) for run_id in run_ids]
        views = await asyncio.wait_for(asyncio.gather(*waits), timeout)
        await tap.until(lambda e: isinstance(e, ev.Finished) and e.run_id == run_ids[-1])
    finally:
        tap.close()
    wall = time.monotonic() - started
    most_nodes, most_pending = _peaks([e for _, e in tap.seen])
    return LoadResult(list(views), most_nodes, most_pending, wall)
