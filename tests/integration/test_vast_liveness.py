"""The agent's heartbeat decides whether a Vast.ai node is alive, not one answer of a listing.

Real engine, real agents on the stand-in, through the real SDK. A lookup answering "gone"
once (404, `[]` or null: Vast's listings are eventually consistent) while the agent
heartbeats leaves the run going; a provider that keeps saying the node died while its
agent still answers gets its outputs pulled before the node is torn down; a verdict is
believed only once it held over the pool's grace (engine/providers/hearsay.py).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.engine import Engine
from engine.jobs.jobspec import load_job
from engine.providers.hearsay import Hearsay
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.runs import waiting_job
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(120)
GRACE_S = 2.0  # the pool's node_lost_after_s: the grace a "gone" answer must hold over


@pytest.fixture
async def engine(api: StandIn, make_engine: EngineFactory) -> Engine:
    return await make_engine(gpu_pool(node_lost_after_s=GRACE_S))


def test_a_verdict_is_believed_only_when_it_held_over_the_grace() -> None:
    hearsay = Hearsay(grace_s=10)
    assert hearsay.heard("gone", now=0) is None and hearsay.suspected
    assert hearsay.heard(None, now=5) is None and not hearsay.suspected  # listed again
    assert hearsay.heard("gone", now=6) is None
    assert hearsay.heard("gone", now=15) is None  # twice, but within the grace
    assert hearsay.heard("gone", now=16) == "gone"


async def _running(engine: Engine, api: StandIn, tmp_path: Path) -> tuple[str, Path, int]:
    release = tmp_path / "release"
    job = load_job(waiting_job(tmp_path / "project", "alive", release))
    run_id = await engine.submit(job, "gpu")
    run_log = engine.run(run_id).run_dir / "logs" / "run.log"
    await eventually_async(
        lambda: run_log.exists() and "line 3" in run_log.read_text(), 60, "the job running"
    )
    [instance] = api.cloud.instances
    return run_id, release, instance


def _lookups(api: StandIn, instance: int) -> int:
    return sum(1 for m, p, *_ in api.requests if m == "GET" and f"/instances/{instance}/" in p)


async def test_gone_answers_never_kill_a_run_whose_agent_talks(
    engine: Engine, api: StandIn, tmp_path: Path
) -> None:
    """Two lookups in a row answer 404 (within the grace), then the listing is right again;
    the positive control (a verdict that holds) is test_vast_non_happy's 404 and `[]`."""
    run_id, release, instance = await _running(engine, api, tmp_path)
    faults = api.cloud.faults
    faults.gone_404, faults.vanish_lookups = True, 2
    await eventually_async(lambda: faults.vanish_lookups == 0, 30, "the lookups answered 404")
    after = _lookups(api, instance)
    await eventually_async(lambda: _lookups(api, instance) >= after + 2, 30, "two more looks")
    release.touch()
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert api.cloud.instances == {} and Ledger().open_entries() == []


async def test_a_node_said_dead_while_its_agent_answers_has_its_outputs_pulled_first(
    engine: Engine, api: StandIn, tmp_path: Path
) -> None:
    """Vast lists the instance "exited" on every look, confirmed over the grace, while the
    agent heartbeats: the run fails "node lost" — with what the node had collected."""
    run_id, release, instance = await _running(engine, api, tmp_path)
    workdir = api.cloud.instances[instance].root / "root" / "swjob" / "work"
    (workdir / "out.txt").write_text("partial\n")  # what the job wrote so far
    api.cloud.faults.listed_status = "exited"
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "FAILED"
    assert view.reason.startswith(f"node lost: Vast.ai instance {instance} is exited: ")
    assert (view.run_dir / "outputs" / "out.txt").read_text() == "partial\n"
    assert api.cloud.instances == {} and Ledger().open_entries() == []
    release.touch()
