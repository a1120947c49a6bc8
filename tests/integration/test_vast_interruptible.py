"""Interruptible (bid) Vast.ai pools, through the real SDK against the stand-in: offers
searched in the bid market and rented with the bid as `price`; a node Vast takes back
(outbid) ends the run FAILED "preempted" and is destroyed, its cost at the bid; a bid that
is refused or below the minimum leaves no stopped instance behind."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from engine.engine import Engine
from engine.providers.base import Preempted, ProvisionError
from engine.run import fsm, nodeloss
from engine.state.ledger import Ledger
from tests.standin.cloud import storage
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.jobs import RESUMING
from tests.support.vast import bootstrap, gpu_pool, provider
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)

BID = {"interruptible": True, "bid_fraction": 0.5}  # offer 103: $0.22 on demand, min bid 0.11
BILLED = 0.132  # $/h: the bid plus the disk's storage (offer 103's $0.22 total − $0.198 base)


@pytest.fixture
async def engine(api: StandIn, make_engine: EngineFactory) -> Engine:
    """A short node-loss deadline: a preempted node goes silent and is noticed in ~2 s."""
    quick = {"node_lost_after_s": 2.0}
    return await make_engine(
        gpu_pool("spot", **BID, **quick),
        gpu_pool("spot-sync", **BID, **quick, sync_every_s=0.3),
        gpu_pool("spot-retry", **BID, **quick, sync_every_s=0.3, max_attempts=2),
        gpu_pool(**quick),
    )


async def _running_instance(engine: Engine, api: StandIn, run_id: str) -> int:
    """The instance of `run_id` once its job runs."""

    def running() -> bool:
        view = engine.run(run_id)
        assert view is None or view.phase != "done", view.reason if view else None
        return view is not None and view.phase == "run"

    await eventually_async(running, timeout=60, what=f"run {run_id} in its run step")
    [instance] = api.cloud.instances
    return instance


async def test_a_preempted_node_fails_the_run_preempted_is_destroyed_and_costs_the_bid(
    engine, api, make_job
) -> None:
    started = time.monotonic()
    run_id = await engine.submit(make_job(run="sleep 60"), "spot")
    instance = await _running_instance(engine, api, run_id)
    [row] = Ledger().open_entries()
    assert row.price_per_hour == BILLED, "the ledger prices the node at the bid + storage"
    searches = [json.loads(b) for m, p, _, b in api.requests if p.startswith("/api/v0/bundles")]
    assert searches and all(s["type"] == "bid" for s in searches)
    [create] = [json.loads(b) for m, p, _, b in api.requests if m == "PUT" and "/asks/" in p]
    assert create["price"] == 0.11
    api.cloud.preempt(instance)
    preempted_at = time.monotonic()
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    detected_s = time.monotonic() - preempted_at
    assert view.state == "FAILED", view.reason
    assert (view.reason or "").startswith("preempted: Vast.ai stopped interruptible instance")
    assert "outbid" in (view.reason or ""), "Vast's status_msg is in the reason"
    assert detected_s < 2.0 + 5.0 + 5.0, "within the node-loss deadline (+ look + teardown)"
    assert api.cloud.instances == {} and api.cloud.destroyed == [instance]
    assert Ledger().open_entries() == []
    assert view.node is not None and view.node.price_per_hour == BILLED
    assert view.node.offer["bid"] == 0.11 and view.node.offer["dph"] == 0.22
    elapsed_h = (time.monotonic() - started) / 3600
    assert view.cost_dollars is not None and 0 < view.cost_dollars <= BILLED * elapsed_h
    summary = json.loads((view.run_dir / "run.json").read_text())
    assert summary["reason"].startswith("preempted")


async def test_a_preempted_run_keeps_the_checkpoint_its_last_sync_landed(
    engine, api, make_job
) -> None:
    job = make_job(run="mkdir -p ck && echo epoch-3 > ck/last.txt && sleep 60", outputs=["ck/"])
    run_id = await engine.submit(job, "spot-sync")
    instance = await _running_instance(engine, api, run_id)
    landed = engine.run(run_id).run_dir / "outputs/ck/last.txt"
    await eventually_async(landed.exists, what="a live sync landed the checkpoint")
    api.cloud.preempt(instance)
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and (view.reason or "").startswith("preempted"), view.reason
    assert landed.read_text() == "epoch-3\n"
    assert view.last_sync is not None and view.last_sync.paths == ["ck/last.txt"]
    assert api.cloud.instances == {}


async def test_a_preempted_run_resumes_on_a_new_node_and_completes(engine, api, make_job) -> None:
    """Preempt → next attempt on a new instance, its push carrying the synced checkpoint →
    the job resumes from it and completes; both instances destroyed, both at the bid."""
    job = make_job(run=RESUMING, outputs=["ck/", "result.txt"])
    first = await engine.submit(job, "spot-retry")
    instance = await _running_instance(engine, api, first)
    landed = engine.run(first).run_dir / "outputs/ck/last.txt"
    await eventually_async(landed.exists, what="a live sync landed the checkpoint")
    api.cloud.preempt(instance)
    lost = await asyncio.wait_for(engine.wait(first), 30)
    second = engine.successor(first)
    assert lost.reason and lost.reason.startswith("preempted") and second is not None
    done = await asyncio.wait_for(engine.wait(second), 60)
    assert done.state == "COMPLETED", done.reason
    assert (done.run_dir / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    assert (done.attempt, done.attempts, done.previous_run) == (2, 2, first)
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 2
    assert instance in api.cloud.destroyed and Ledger().open_entries() == []
    assert lost.node.price_per_hour == done.node.price_per_hour == BILLED


async def test_the_same_stop_on_an_on_demand_node_is_a_node_loss(engine, api, make_job) -> None:
    """Positive control: only an interruptible pool reads a stopped node as preempted."""
    run_id = await engine.submit(make_job(run="sleep 60"), "gpu")
    instance = await _running_instance(engine, api, run_id)
    api.cloud.preempt(instance)
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and (view.reason or "").startswith("node lost: ")
    assert api.cloud.instances == {}


async def test_a_refused_bid_leaves_no_stopped_instance(api: StandIn) -> None:
    """The minimum bid rose between search and create: Vast answers 400 yet creates the
    instance, stopped. The provider finds it by its label and destroys it."""
    api.cloud.faults.bid_war = 0.05
    api.cloud.faults.refuse_low_bids = True
    alerts: list[str] = []
    vast = provider(api, gpu_pool("spot", **BID), alerts)
    with pytest.raises(ProvisionError, match="below the minimum bid"):
        await vast.provision(bootstrap())
    assert len(api.cloud.destroyed) == 1 and api.cloud.instances == {}
    assert Ledger().open_entries() == []
    assert any("left Vast.ai instance" in a for a in alerts), alerts


async def test_a_bid_below_the_minimum_reads_preempted_and_is_destroyed(api: StandIn) -> None:
    """Accepted, but never started: the stopped instance is taken back from the start."""
    api.cloud.faults.bid_war = 0.05
    vast = provider(api, gpu_pool("spot", **BID), [], poll_s=0.05)
    handle = await vast.provision(bootstrap())
    lost = await asyncio.wait_for(vast.node_exited(handle), 30)
    assert isinstance(lost, Preempted) and "below the minimum bid" in lost.reason
    await vast.teardown(handle)
    assert api.cloud.instances == {} and Ledger().open_entries() == []


async def test_a_fixed_bid_searches_offers_whose_minimum_it_meets(api: StandIn) -> None:
    api.cloud.faults.never_start = True
    pool = gpu_pool("spot", interruptible=True, bid_per_hour=0.18)  # 4090s: min 0.175, 0.2
    vast = provider(api, pool, [])
    handle = await vast.provision(bootstrap())
    try:
        assert handle.offer["offer_id"] in (103, 102)
        offer = api.cloud.offers[handle.offer["offer_id"]]
        assert handle.price_per_hour == round(0.18 + storage(offer), 6)  # bid + storage
        assert api.cloud.instances[int(handle.node_id)].bid == 0.18
    finally:
        await vast.teardown(handle)


async def test_a_fraction_no_offer_takes_fails_in_one_line(api: StandIn) -> None:
    for offer in api.cloud.offers.values():
        offer["min_bid"] = offer["dph_total"] * 0.9
    vast = provider(api, gpu_pool("spot", **BID), [])
    with pytest.raises(ProvisionError, match=r"bid_fraction 0.5 .* below every matching offer"):
        await vast.provision(bootstrap())
    assert api.cloud.instances == {}


async def test_a_silent_node_is_preempted_only_when_vast_says_so(api: StandIn) -> None:
    """The session's loss asks the provider once; a failed look leaves a plain node loss
    (the run is not held up by the API), a good look says preempted."""
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool("spot", **BID), [])
    handle = await vast.provision(bootstrap())
    try:
        running = await nodeloss.explain(vast, handle, "no heartbeat for 3 s")
        assert type(running) is fsm.NodeLost, "a running instance: the loss is the node's"
        api.cloud.preempt(int(handle.node_id))
        api.cloud.faults.fail_next = 100  # every look fails
        failed = await nodeloss.explain(vast, handle, "no heartbeat for 3 s")
        assert type(failed) is fsm.NodeLost and failed.reason == "no heartbeat for 3 s"
        api.cloud.faults.fail_next = 0
        taken = await nodeloss.explain(vast, handle, "no heartbeat for 3 s")
        assert isinstance(taken, fsm.NodePreempted) and "outbid" in taken.reason
    finally:
        await vast.teardown(handle)


async def test_offers_vast_lists_without_a_price_take_no_fractional_bid(api: StandIn) -> None:
    """Vast may list `dph_total` as null: a fraction of it is no bid. It was an infinite one,
    which the SDK could not even send ('Out of range float values are not JSON
    compliant'); now no such offer is rented, and the reason says why."""
    for offer in api.cloud.offers.values():
        offer["dph_total"] = None
    pool = gpu_pool("spot", **BID, selection={"reliability_min": 0.98})  # no price cap
    with pytest.raises(ProvisionError) as refused:
        await provider(api, pool, []).provision(bootstrap())
    assert "no matching offer lists the on-demand price (dph_total)" in str(refused.value)
    assert not [p for m, p, *_ in api.requests if m == "PUT" and "/asks/" in p]
    assert Ledger().entries_of("run-1") == []
