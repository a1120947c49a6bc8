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
from engine.state import warmnodes
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory, engine_with
from tests.support.runs import events, run_to_end
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)
CACHED_SETUP = (
    "if [ -e ~/.cache/warm-demo ]; then echo cache-hit; "
    "else mkdir -p ~/.cache && touch ~/.cache/warm-demo && echo cache-miss; fi"
)
"""A setup that fills a cache the first time: the second run on a kept node finds it."""


async def test_the_next_run_takes_the_rented_instance_and_it_is_no_orphan(
    api: StandIn, make_engine: EngineFactory, make_job: Callable[..., JobSpec]
) -> None:
    api.cloud.faults.boot_delay_s = 0.5
    engine = await make_engine(gpu_pool(keep_warm_s=60))
    job = make_job(setup=CACHED_SETUP, run="echo hello")
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
    setups = [(run.run_dir / "logs" / "setup.log").read_text() for run in (one, two)]
    assert "cache-miss" in setups[0] and "cache-hit" in setups[1]  # ~/.cache persists

    # a run took it, and its engine died: nobody drives that run, so its node is an orphan
    assert warmnodes.take(warm.node_id, "run-of-a-dead-engine") is not None
    (orphan,) = await engine.orphans()
    assert orphan.instance_id == warm.node_id and orphan.collectable
    done = await engine.collect_orphans([orphan])
    assert done.collected == [orphan.name], done.problems
    assert api.cloud.instances == {} and Ledger().open_entries() == []
    assert engine.warm_nodes() == []  # its record went with it


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


async def test_two_operators_on_one_account_never_share_a_warm_node(
    api: StandIn, tmp_path: Path, make_job: Callable[..., JobSpec], monkeypatch: pytest.MonkeyPatch
) -> None:
    job = make_job(run="echo hello")
    pool = gpu_pool(keep_warm_s=60)
    async with engine_with(tmp_path / "runs-a", pool) as first:  # operator A
        await run_to_end(first, job, "gpu")
        (a_node,) = first.warm_nodes()
    for name in ("state", "cache"):  # operator B: same account, its own state
        monkeypatch.setenv(f"SWJOB_{name.upper()}_DIR", str(tmp_path / f"b-{name}"))
    async with engine_with(tmp_path / "runs-b", pool) as second:
        view = await run_to_end(second, job, "gpu")
        assert view.state == "COMPLETED", view.reason
        assert view.node is not None and view.node.node_id != a_node.node_id  # rented anew
        assert [n.node_id for n in second.warm_nodes()] == [view.node.node_id]
        assert all(not o.collectable for o in await second.orphans())  # A's: never B's to end
        assert await second.release_warm() == []
    assert int(a_node.node_id) in api.cloud.instances  # A's node waits for A alone
    api.cloud.destroy(int(a_node.node_id))  # (A's own timer would, in time)
