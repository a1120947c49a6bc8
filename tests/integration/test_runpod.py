"""Whole jobs on a `runpod` pool: the real Engine, the real `runpod` SDK against the GraphQL
stand-in, and a real agent started by the pod's own start command, joining over iroh."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent import credentials, nodenotify, orphan
from engine.engine import Engine
from engine.jobs.pools import PoolSet, Selection
from engine.ops.offers import OffersError, list_offers
from engine.ops.poolcheck import check_pool
from engine.providers.gc import destroy_orphans, find_orphans
from engine.providers.runpod_provider import RunPodProvider
from engine.providers.slots import pool_slots
from engine.providers.vast_boot import label_for
from engine.state.ledger import Ledger
from tests.standin.runpod_server import RunPodStandIn
from tests.support.engines import EngineFactory, engine_config
from tests.support.jobs import RESUMING
from tests.support.runpod import pod_pool, standin
from tests.support.vast import bootstrap, gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def rp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodStandIn]:
    yield from standin(tmp_path, monkeypatch)


@pytest.fixture
async def engine(rp: RunPodStandIn, make_engine: EngineFactory) -> Engine:
    quick = {"node_lost_after_s": 2.0}  # a preempted pod goes silent: noticed in ~2 s
    spot = pod_pool(
        "spot", interruptible=True, bid_fraction=0.6, sync_every_s=0.3, max_attempts=2, **quick
    )
    capped = pod_pool("capped", caps={"max_dollars": 0.0002})  # ~3 s of a $0.22/h pod
    return await make_engine(pod_pool(), pod_pool("slow", boot_timeout_s=2.0), spot, capped)


async def test_a_job_runs_end_to_end_on_a_pod(engine, rp, make_job, capfd) -> None:
    job = make_job(
        files={"data/in.txt": "42\n"},
        run="cp data/in.txt result.txt && echo pod=$RUNPOD_POD_ID key=$RUNPOD_API_KEY",
        workspace={"workdir": "."},
        outputs=["result.txt"],
    )
    rp.faults.boot_delay_s = 0.5  # RunPod pulling the image: listed without a runtime
    run_id = await engine.submit(job, "pod")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs/result.txt").read_text() == "42\n"
    assert view.node is not None and view.node.provider == "runpod"
    # the cheapest offer under $0.60/h for 24 GB: a community RTX 3090 at $0.22
    assert view.node.price_per_hour == 0.22 and view.node.offer["gpu_name"] == "RTX 3090"
    assert rp.live() == [] and len(rp.terminated) == 1
    assert Ledger().open_entries() == []
    events = [json.loads(line) for line in (view.run_dir / "events.jsonl").read_text().splitlines()]
    boot = {e["phase"]: e["detail"] for e in events if e["kind"] == "boot"}
    assert boot["offer_chosen"] == "1× RTX 3090 (community cloud)"
    assert boot["instance_created"] == f"RunPod pod {rp.terminated[0]}"
    assert {"agent_installed", "agent_joined"} <= set(boot)
    # RunPod's phases, each done: seen by a status look, or proven by a later step
    steps = json.loads((view.run_dir / "run.json").read_text())["boot"]["steps"]
    assert [s["phase"] for s in steps if s["at"] is None] == [], steps
    running = next(s for s in steps if s["phase"] == "container_running")
    assert running["inferred"] or "started container" in running["detail"], running
    log = (view.run_dir / "logs" / "run.log").read_text()
    # the pod's own key (it can terminate the pod) is kept out of the job's environment
    assert f"pod={rp.terminated[0]} key=\n" in log
    out, err = capfd.readouterr()
    written = "".join(p.read_text(errors="replace") for p in view.run_dir.rglob("*") if p.is_file())
    for text in (written, out, err):
        assert rp.api_key not in text
    assert re.search(r"rpa_pod_[0-9a-f]{32}", written) is None


async def test_a_spot_pod_bids_and_an_interrupted_run_resumes_on_a_new_pod(
    engine, rp, make_job
) -> None:
    """Interrupted → FAILED "preempted" in RunPod's words → the next attempt, on a new spot
    pod, carries the synced checkpoint and completes; both pods terminated, both at the bid."""
    first = await engine.submit(make_job(run=RESUMING, outputs=["ck/", "result.txt"]), "spot")

    def running() -> bool:
        view = engine.run(first)
        assert view is None or view.phase != "done", view.reason if view else None
        return view is not None and view.phase == "run"

    await eventually_async(running, timeout=60, what=f"run {first} in its run step")
    [pod] = rp.pods.values()
    # 60 % of the community RTX 3090's $0.22, above its $0.11 spot price
    assert pod.bid == 0.132 and pod.row()["podType"] == "INTERRUPTABLE"
    assert Ledger().open_entries()[0].price_per_hour == 0.132
    landed = engine.run(first).run_dir / "outputs/ck/last.txt"
    await eventually_async(landed.exists, what="a live sync landed the checkpoint")
    rp.preempt(pod.id)
    lost = await asyncio.wait_for(engine.wait(first), 30)
    assert (lost.reason or "").startswith("preempted: RunPod stopped spot pod"), lost.reason
    assert "higher bid" in (lost.reason or "")  # RunPod's own words
    second = engine.successor(first)
    assert second is not None
    done = await asyncio.wait_for(engine.wait(second), 60)
    assert done.state == "COMPLETED", done.reason
    assert (done.run_dir / "outputs/result.txt").read_text() == "resumed from epoch-3\n"
    assert rp.live() == [] and len(rp.terminated) == 2 and Ledger().open_entries() == []
    assert lost.node.price_per_hour == done.node.price_per_hour == 0.132


async def test_a_capped_run_is_stopped_and_its_pod_terminated(engine, rp, make_job) -> None:
    run_id = await engine.submit(make_job(run="sleep 60"), "capped")
    view = await asyncio.wait_for(engine.wait(run_id), 40)
    assert "cap reached: max_dollars $0.0002" in (view.reason or ""), view.reason
    assert rp.live() == [] and len(rp.terminated) == 1 and Ledger().open_entries() == []


async def test_an_image_that_never_comes_up_fails_in_runpods_words(engine, rp, make_job) -> None:
    rp.faults.never_start = True
    run_id = await engine.submit(make_job(run="true"), "slow")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and "boot timeout" in (view.reason or "")
    assert "never came up: Error response from daemon: pull access denied" in (view.reason or "")
    assert rp.live() == [] and Ledger().open_entries() == []


async def test_no_capacity_anywhere_fails_in_one_line(engine, rp, make_job) -> None:
    rp.faults.no_capacity = {"*"}
    run_id = await engine.submit(make_job(run="true"), "pod")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    reason = view.reason or ""
    assert view.state == "FAILED" and "no capacity" in reason and "\n" not in reason
    assert "RTX 3090" in reason and "RTX 4090" in reason
    assert rp.pods == {} and Ledger().open_entries() == []


async def test_a_refused_key_fails_in_one_line(engine, rp, make_job, monkeypatch) -> None:
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_wrong")
    run_id = await engine.submit(make_job(run="true"), "pod")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    reason = view.reason or ""
    assert view.state == "FAILED" and "API key was refused" in reason, reason
    assert "rpa_wrong" not in reason and rp.api_key not in reason


async def test_pools_check_says_whether_the_key_works(rp, monkeypatch) -> None:
    good = await check_pool(pod_pool())
    assert good.ok and good.note == "API key works ($RUNPOD_API_KEY; 0 pods on the account)"
    monkeypatch.setenv("RUNPOD_API_KEY", "rpa_wrong")
    bad = await check_pool(pod_pool())
    assert not bad.ok and "API key was refused" in bad.note and "rpa_wrong" not in bad.note


async def test_offers_lists_gpu_types_by_cloud_and_price(rp) -> None:
    views = await list_offers(pod_pool(selection={"max_price_per_hour": 1.0}))
    assert [(v.gpu_name, v.location, v.price_per_hour) for v in views] == [
        ("RTX 3090", "community cloud", 0.22),
        ("RTX 4090", "community cloud", 0.34),
        ("RTX 4090", "secure cloud", 0.69),
        ("RTX A6000", "secure cloud", 0.76),
    ]
    assert views[0].chosen
    a6000 = pod_pool(cloud_type="secure", gpu_types=("NVIDIA RTX A6000",))
    with pytest.raises(OffersError, match=r"max_price_per_hour \$0.6/h"):
        await list_offers(a6000)
    listed = await list_offers(a6000.model_copy(update={"selection": Selection()}))
    assert [(v.gpu_name, v.price_per_hour) for v in listed] == [("RTX A6000", 0.76)]


def test_an_orphaned_pod_terminates_itself_with_its_own_key(rp, monkeypatch) -> None:
    rp.faults.never_start = True  # no container: the pod's own API call is under test
    mine, other = rp.add_pod("swjob:me:run-1"), rp.add_pod("someone-else")
    monkeypatch.setenv("RUNPOD_API_KEY", mine.key)  # as RunPod sets it in the pod
    monkeypatch.setenv("RUNPOD_POD_ID", other.id)  # the key acts on its own pod only
    assert "could not terminate own RunPod pod" in orphan.terminate_own_pod(rp.url)
    assert other.status == "RUNNING"
    monkeypatch.setenv("RUNPOD_POD_ID", mine.id)
    said = orphan.terminate_own_pod(rp.url)
    assert said == f"terminated own RunPod pod {mine.id}" and mine.status == "TERMINATED"
    assert mine.key not in said
    rp.terminate(other.id)


async def test_gc_collects_our_orphaned_pod_and_never_anothers(rp) -> None:
    rp.faults.never_start = True
    pools = PoolSet({"pod": pod_pool()})
    ours = rp.add_pod(label_for("run-gone"))  # its engine died before writing it down
    theirs = rp.add_pod("swjob:another-operator:run-x")
    notebook = rp.add_pod("my-notebook")  # not swjob's at all: never listed
    found = {o.instance_id: o for o in await find_orphans(pools, Ledger(), set())}
    assert set(found) == {ours.id, theirs.id}
    assert found[theirs.id].foreign == "another-operator" and not found[theirs.id].collectable
    done = await destroy_orphans(list(found.values()), pools, Ledger())
    assert done.destroyed == 1 and ours.status == "TERMINATED"
    assert theirs.status == notebook.status == "RUNNING"
    rp.terminate(theirs.id)
    rp.terminate(notebook.id)


async def test_a_pod_whose_create_answer_was_never_written_is_found_by_its_name(rp) -> None:
    """The engine died between the create and writing its answer down: the ledger's intent
    (written first) and the pod's name find it; price from the pod's own costPerHr."""
    rp.faults.never_start = True
    ledger = Ledger()
    ledger.record_intent("run-7", "runpod", label_for("run-7"), pool="pod")
    pod = rp.add_pod(label_for("run-7"))
    provider = RunPodProvider(pod_pool(), ledger)
    assert await provider.may_have_node("run-7") and not await provider.may_have_node("run-8")
    handle = await provider.find_node("run-7")
    assert handle is not None and handle.node_id == pod.id and handle.price_per_hour == 0.22
    await provider.teardown(handle)
    assert pod.status == "TERMINATED" and ledger.open_entries() == []


async def test_a_pool_whose_offers_are_taken_falls_over_to_another_providers_pool(
    api, rp, make_engine, make_job
) -> None:
    """Vast.ai has offers, but each create answers that it was rented away (no_such_ask):
    the run moves to the RunPod pool while it provisions, and runs there. The Vast pool
    keeps nothing of it (slot, ledger row, instance); run.json says which pool served and
    why the other did not; the boot timeline is the pod's, every step done."""
    vast = gpu_pool("vast", max_nodes=1, fallback=("pod",))
    engine = await make_engine(vast, pod_pool())
    api.cloud.faults.vanish_at_create = set(api.cloud.offers)
    run_id = await engine.submit(make_job(run="true"), "vast")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED" and view.pool == "pod", view.reason
    summary = json.loads((view.run_dir / "run.json").read_text())
    assert summary["pool"] == "pod" and summary["node"]["provider"] == "runpod"
    [passed] = summary["pools_passed"]
    assert passed["pool"] == "vast" and "rented away" in passed["reason"], passed
    assert any("moving to pool 'pod'" in a for a in summary["alerts"]), summary["alerts"]
    assert api.cloud.instances == {} and rp.live() == [] and Ledger().open_entries() == []
    # its slot given back: no slot file of the Vast pool names the run (which runs on)
    assert [p.read_text() for p in pool_slots("vast").iterdir()] == [""]
    boot = {s["phase"]: s for s in summary["boot"]["steps"]}
    assert boot["instance_created"]["detail"].startswith("RunPod pod ")
    for phase in ("image_loading", "container_running", "agent_joined"):
        assert boot[phase]["at"] is not None, (phase, boot)  # seen or inferred: never missing


async def test_a_pool_whose_nodes_fail_preflight_falls_over_to_another_providers_pool(
    api, rp, make_engine, make_job
) -> None:
    """The one Vast.ai node the pool may try (`max_offers_tried = 1`) shows no GPU: its
    pre-flight fails, which uses the pool's offers up (OffersUsedUp, a PoolExhausted), and
    the run moves to RunPod, whose pod passes and serves. The Vast node is destroyed, its
    ledger row closed, its slot free; the boot shown is the pod's."""
    vast = gpu_pool("vast", max_nodes=1, max_offers_tried=1, fallback=("pod",))
    engine = await make_engine(vast, pod_pool())
    first = (await list_offers(vast))[0].offer_id
    api.cloud.faults.gpus_shown[api.cloud.offers[first]["machine_id"]] = 0
    run_id = await engine.submit(make_job(run="true"), "vast")
    view = await asyncio.wait_for(engine.wait(run_id), 80)
    assert view.state == "COMPLETED" and view.pool == "pod", view.reason
    summary = json.loads((view.run_dir / "run.json").read_text())
    [passed] = summary["pools_passed"]
    assert passed["pool"] == "vast", passed
    assert passed["reason"].startswith("pre-flight failed on 1 offer of pool 'vast'"), passed
    failed, served = summary["preflight"]
    assert not failed["passed"] and served["passed"] and served["pool"] == "pod"
    boot = {s["phase"]: s for s in summary["boot"]["steps"]}
    assert boot["instance_created"]["detail"].startswith("RunPod pod ")
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert rp.live() == [] and Ledger().open_entries() == []
    assert [p.read_text() for p in pool_slots("vast").iterdir()] == [""]


async def test_a_run_that_fell_over_is_adopted_on_the_pool_it_moved_to(
    api, rp, make_engine, make_job, tmp_path
) -> None:
    """Its engine closes leaving it running: the next engine adopts it on the RunPod pool
    it moved to (its pod rejoins and completes), never on the Vast.ai pool it left."""
    vast = gpu_pool("vast", fallback=("pod",))
    api.cloud.faults.vanish_at_create = set(api.cloud.offers)
    release = tmp_path / "release"
    job = make_job(run=f"while [ ! -e {release} ]; do sleep 0.1; done; echo done")
    first = Engine(engine_config(tmp_path / "runs", vast, pod_pool()))
    await first.start()
    try:
        run_id = await first.submit(job, "vast")
        await eventually_async(lambda: first.run(run_id).phase == "run", timeout=60)
    finally:
        await first.close(stop_running=False)
    assert rp.live() != []  # its pod bills on, unowned for now
    release.touch()
    second = await make_engine(vast, pod_pool(), adopt_orphans=True)
    view = await asyncio.wait_for(second.wait(run_id), 60)
    assert view.state == "COMPLETED" and view.pool == "pod", view.reason
    assert view.pools_passed == [{"pool": "vast", "reason": view.pools_passed[0]["reason"]}]
    assert rp.live() == [] and len(rp.terminated) == 1 and api.cloud.instances == {}
    assert Ledger().open_entries() == []


async def test_every_pool_exhausted_fails_the_run_naming_each_pools_reason(
    api, rp, make_engine, make_job
) -> None:
    """No Vast.ai host is that reliable; RunPod has no capacity for any GPU type: FAILED,
    one line naming both pools' reasons, nothing rented or left in the ledger."""
    vast = gpu_pool("vast", selection={"reliability_min": 0.9999}, fallback=("pod",))
    engine = await make_engine(vast, pod_pool())
    rp.faults.no_capacity = {"*"}
    run_id = await engine.submit(make_job(run="true"), "vast")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    reason = view.reason or ""
    assert view.state == "FAILED" and "\n" not in reason, reason
    assert reason.startswith("no pool could serve the run: pool 'vast': "), reason
    assert "reliability" in reason and "pool 'pod': RunPod pool 'pod': no capacity" in reason
    summary = json.loads((view.run_dir / "run.json").read_text())
    assert [p["pool"] for p in summary["pools_passed"]] == ["vast", "pod"]
    assert rp.pods == {} and api.cloud.instances == {} and Ledger().open_entries() == []


async def test_an_on_demand_pod_gets_the_pools_notify_targets_whole(rp) -> None:
    """The runpod SDK puts each env value between quotes in its GraphQL and escapes
    nothing: the node's notify targets (JSON: quotes) broke the create, which RunPod
    refuses as a syntax error. They travel encoded, and the pod's agent reads them back."""
    rp.faults.never_start = True  # the create is what is under test, not the boot
    requests = [{"kind": "json", "url": "http://h/x", "headers": {"Authorization": 'B "q"'}}]
    provider = RunPodProvider(pod_pool(), Ledger())
    told = dataclasses.replace(bootstrap("run-9"), notify=nodenotify.encode(requests))
    handle = await provider.provision(told)
    try:
        pod = rp.pods[handle.node_id]
        assert nodenotify.targets(pod.env[credentials.NOTIFY_ENV]) == requests
    finally:
        await provider.teardown(handle)
