"""Warm nodes on a Vast.ai pool: the real SDK against the stand-in, a real agent started
by each instance's on-start command. The second run takes the rented instance (no second
create); while it is kept it is this operator's, billing, and never an orphan; unclaimed
past its keep time it destroys its own instance with the container's key, its operator
gone."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from engine.jobs.jobspec import JobSpec
from engine.report.events import BootPhase
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory, engine_with
from tests.support.runs import events, run_to_end
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)


async def test_the_next_run_takes_the_rented_instance_and_it_is_no_orphan(
    api: StandIn, make_engine: EngineFactory, make_job: Callable[..., JobSpec]
) -> None:
    api.cloud.faults.boot_delay_s = 0.5
    engine = await make_engine(gpu_pool(keep_warm_s=60))
    job = make_job(run="echo hello")
    one = await run_to_end(engine, job, "gpu")
    assert one.state == "COMPLETED", one.reason
    (warm,) = engine.warm_nodes()
    assert warm.provider == "vastai" and warm.price_per_hour == 0.22
    assert len(api.cloud.instances) == 1 and len(Ledger().open_entries()) == 1  # it bills on
    assert await engine.orphans() == []  # kept, owned: gc leaves it alone

    two = await run_to_end(engine, job, "gpu")
    assert two.state == "COMPLETED", two.reason
    boots = [e for e in events(two.run_dir) if e.kind == "boot"]
    assert [b.phase for b in boots] == [BootPhase.WARM_REUSED, BootPhase.AGENT_JOINED]
    assert two.node is not None and two.node.node_id == warm.node_id
    creates = [r for r in api.requests if r[0] == "PUT" and "/asks/" in r[1]]
    assert len(creates) == 1  # one instance rented for both runs

    assert await engine.release_warm() == []
    assert api.cloud.instances == {} and Ledger().open_entries() == []


async def test_an_unclaimed_instance_destroys_itself_with_its_operator_gone(
    api: StandIn, tmp_path: Path, make_job: Callable[..., JobSpec]
) -> None:
    async with engine_with(tmp_path / "runs", gpu_pool(keep_warm_s=1)) as engine:
        one = await run_to_end(engine, make_job(run="echo hello"), "gpu")
        assert one.state == "COMPLETED", one.reason
    # the operator is gone; the node's own clock runs on
    (instance,) = api.cloud.instances
    await eventually_async(lambda: instance in api.cloud.destroyed, what="its own destroy")
    (destroy,) = [headers for method, _, headers, _ in api.requests if method == "DELETE"]
    assert destroy["Authorization"].startswith("Bearer ck-")  # the node's own key
