"""A container restart is a recoverable event (agent/restart.py).

Real engine, real agents on the Vast stand-in: the stand-in restarts the container as Vast
does (every process dies, the disk stays, the on-start runs again). The new agent proves
it is the same node with the key it left on the node's disk, rejoins instead of being
refused ("join token already used"), and says the step it ran was interrupted: the
files on the node's disk are collected and the run fails "container restarted" — a node
failure, which a next attempt (max_attempts) runs again from those files: with live sync
it resumes from the outputs synced before the restart and completes.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agent.reattach import Target
from agent.restart import KEY_FILE, node_key, save_target, saved_target
from engine.engine import Engine
from engine.report import events as ev
from engine.run.attempts import retryable
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.jobs import RESUMING
from tests.support.tap import Tap
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(120)


def test_the_node_key_survives_on_the_nodes_disk(tmp_path: Path) -> None:
    first = node_key(tmp_path)
    assert node_key(tmp_path) == first and len(first) == 32
    assert (tmp_path / KEY_FILE).stat().st_mode & 0o777 == 0o600
    (tmp_path / KEY_FILE).write_bytes(b"torn")  # not a key: a fresh one, kept
    assert node_key(tmp_path) not in (first, b"torn") and node_key(tmp_path) != first


def test_a_restarted_node_dials_the_orchestrator_that_adopted_it(tmp_path: Path) -> None:
    given, adopter = Target("o" * 64, "ticket-1"), Target("a" * 64, "ticket-2")
    assert saved_target(tmp_path, given) == given  # a first start: its command line's
    save_target(tmp_path, adopter)
    assert saved_target(tmp_path, given) == adopter


async def test_a_restarted_container_rejoins_and_its_files_are_collected(
    api: StandIn, make_engine: EngineFactory, make_job
) -> None:
    engine: Engine = await make_engine(gpu_pool())
    job = make_job(run="mkdir -p ck && echo epoch-3 > ck/last.txt && sleep 60", outputs=["ck/"])
    first = await engine.submit(job, "gpu")
    workdir: list[Path] = []

    def checkpointed() -> bool:
        view = engine.run(first)
        assert view is not None and view.phase != "done", view and view.reason
        workdir[:] = [i.root / "root/swjob/work" for i in api.cloud.instances.values()]
        return bool(workdir) and (workdir[0] / "ck/last.txt").exists()

    await eventually_async(checkpointed, 60, "the job's checkpoint on the node")
    [instance] = api.cloud.instances
    api.cloud.restart(instance)
    failed = await asyncio.wait_for(engine.wait(first), 60)
    assert failed.state == "FAILED"
    assert (failed.reason or "").startswith("container restarted: the step it ran was"), (
        failed.reason
    )
    assert (failed.run_dir / "outputs/ck/last.txt").read_text() == "epoch-3\n"  # collected
    assert not any("join token already used" in a for a in failed.all_alerts)
    assert retryable(failed), "a next attempt would run it again (test_next_attempt.py)"
    assert api.cloud.instances == {} and Ledger().open_entries() == []


async def test_a_restarted_containers_next_attempt_resumes_from_its_synced_outputs(
    api: StandIn, make_engine: EngineFactory, make_job
) -> None:
    """max_attempts = 2 with live sync: the container restarts mid-job, attempt 1 ends
    FAILED "container restarted", and attempt 2 runs on a new instance with the outputs
    synced (and collected) before the restart laid in its workdir: the job resumes from
    its checkpoint and completes."""
    engine: Engine = await make_engine(gpu_pool(max_attempts=2, sync_every_s=0.3))
    tap = Tap(engine)
    first = await engine.submit(make_job(run=RESUMING, outputs=["ck/", "result.txt"]), "gpu")
    await tap.until(lambda e: isinstance(e, ev.OutputsSynced) and e.run_id == first, 60)
    [instance] = api.cloud.instances
    api.cloud.restart(instance)
    failed = await asyncio.wait_for(engine.wait(first), 60)
    assert (failed.reason or "").startswith("container restarted"), failed.reason
    assert (failed.attempt, failed.attempts) == (1, 2)
    second = engine.successor(first)
    assert second is not None, failed.reason
    done = await asyncio.wait_for(engine.wait(second), 60)
    assert done.state == "COMPLETED", done.reason
    assert (done.attempt, done.attempts, done.previous_run) == (2, 2, first)
    assert "resumed from epoch-3" in (done.run_dir / "logs/run.log").read_text()
    assert (done.run_dir / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    assert api.cloud.destroyed[0] == instance and len(api.cloud.destroyed) == 2
    assert api.cloud.instances == {} and Ledger().open_entries() == []
