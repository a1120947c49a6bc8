"""An engine that adopts a pool's running node and the run that was queued behind it (its
operator, holding both, was killed -9) keeps the pool's `max_nodes`: the queued run is
started, but only once the adopted node is gone — never two nodes of a one-node pool.

A real engine process submits both runs and is killed; a new engine adopts them, as a
restarted console does. Real agents on the local pool, real iroh on loopback.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from engine.engine import Engine, EngineConfig
from engine.jobs.pools import load_pools
from engine.run.recovery import QUEUED_RESTART
from tests.support.processes import kill_quietly, node_dirs, pid_alive
from tests.support.runs import agent_pid, events, run_json, waiting_job
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

TWO_RUNS = """
import asyncio, sys
from pathlib import Path
from engine.engine import Engine, EngineConfig
from engine.jobs.jobspec import load_job
from engine.jobs.pools import load_pools

async def main():
    pools = load_pools(Path(sys.argv[3]))
    engine = Engine(EngineConfig(runs_dir=Path(sys.argv[2]), pools=pools))
    await engine.start()
    for _ in range(2):
        await engine.submit(load_job(Path(sys.argv[1])), "one")
    await asyncio.Event().wait()

asyncio.run(main())
"""


def _has(run_dir: Path, kind: str) -> bool:
    return any(e.kind == kind for e in events(run_dir))


async def test_the_queued_run_waits_for_the_adopted_node_of_its_one_node_pool(
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "project", "slots", release)
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.one]\nprovider = "local"\nmax_nodes = 1\n')
    runs = tmp_path / "runs"
    with (tmp_path / "operator.out").open("w") as out:
        operator = subprocess.Popen(
            [sys.executable, "-c", TWO_RUNS, str(job), str(runs), str(pools)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    node = 0
    try:

        def settled() -> bool:  # on disk: one run on the pool's node, the other queued
            dirs = list((runs / "slots").iterdir()) if (runs / "slots").exists() else []
            transitions = all(_has(d, "transition") for d in dirs)
            return len(dirs) == 2 and transitions and sum(_has(d, "node") for d in dirs) == 1

        eventually(settled, 60, "one run on its node, the other queued")
        [first] = [d for d in (runs / "slots").iterdir() if _has(d, "node")]
        [queued] = [d for d in (runs / "slots").iterdir() if d != first]
        node = agent_pid(first)
        eventually(lambda: _has(first, "log"), 30, "the first run's job running")
    finally:
        operator.kill()
        operator.wait()
    adopter = Engine(
        EngineConfig(runs_dir=runs, pools=load_pools(pools), adopt_orphans=True, heartbeat_s=0.5)
    )
    try:
        await adopter.start()
        both = [adopter.wait(first.name), adopter.wait(queued.name)]
        ended = asyncio.ensure_future(asyncio.gather(*both))
        await asyncio.sleep(3)  # room for a wrongly started second node to show
        assert pid_alive(node) and len(node_dirs()) == 1, node_dirs()
        assert not _has(queued, "node") and not ended.done()
        assert QUEUED_RESTART in [e.message for e in events(queued) if e.kind == "alert"]
        release.touch()  # the first run ends, its node goes, the queued run takes the slot
        await asyncio.wait_for(ended, 60)
    finally:
        release.touch()
        await adopter.close()
        if node:
            kill_quietly(node)
    assert run_json(first)["state"] == "COMPLETED" and run_json(queued)["state"] == "COMPLETED"
    came = next(e.ts for e in events(queued) if e.kind == "node")
    left = next(e.ts for e in events(first) if e.kind == "node" and e.state == "gone")
    assert came >= left, "the queued run's node came while the adopted one was up"
    assert node_dirs() == []
