"""The host pre-flight on the Vast stand-in through the real SDK: a host whose container
shows no GPU (its played nvidia-smi says "No devices were found") fails the node's check
before any file is pushed; its node is destroyed (the pool's one slot freed: the next
rent could not start otherwise), its host remembered, and the next offer serves the run.
The next run leaves that host out; a run whose every offer fails ends FAILED through the
provisioning failure, naming each host."""

from __future__ import annotations

import asyncio

import pytest

from engine.ops.offers import list_offers
from engine.state import badhosts
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.runs import run_json
from tests.support.vast import gpu_pool

pytestmark = pytest.mark.timeout(240)


def _rented(api: StandIn) -> list[int]:
    """The offers the stand-in was asked to create instances from, in order."""
    return [int(path.split("/asks/")[1].strip("/")) for m, path, *_ in api.requests
            if m == "PUT" and "/asks/" in path]  # fmt: skip


async def test_a_host_without_its_gpu_is_replaced_remembered_and_skipped(
    api: StandIn, make_engine: EngineFactory, make_job
) -> None:
    pool = gpu_pool(max_nodes=1, max_offers_tried=2)
    engine = await make_engine(pool)
    first, second, third = [o.offer_id for o in await list_offers(pool)][:3]
    machine = {o: api.cloud.offers[o]["machine_id"] for o in (first, second, third)}
    api.cloud.faults.gpus_shown[machine[first]] = 0

    run_id = await engine.submit(make_job(run="echo served"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 90)
    assert view.state == "COMPLETED", view
    assert _rented(api) == [first, second]
    record = run_json(view.run_dir)
    failed, passed = record["preflight"]
    assert failed["machine_id"] == machine[first] and not failed["passed"]
    assert failed["failed"] == "gpus: 0 GPUs visible, the pool asked for 1"
    assert failed["seconds"] > 0 and failed["dollars"] > 0  # not in the run's own cost
    assert passed["passed"] and [c["name"] for c in passed["checks"]] == [
        "driver", "gpus", "cuda", "disk", "clock",
    ]  # fmt: skip
    [step] = [s for s in record["boot"]["steps"] if s["phase"] == "preflight"]
    assert step["detail"].startswith("passed: driver ok, gpus ok, cuda skipped")
    said = " | ".join(record["alerts"])
    assert f"pre-flight failed on host {machine[first]}" in said
    assert "destroyed and remembered as bad; renting the next offer" in said
    assert Ledger().open_entries() == []  # both nodes' rows closed at their destroys
    [host] = badhosts.listed()
    assert host.machine_id == str(machine[first]) and host.reason.startswith("pre-flight: gpus")

    api.cloud.faults.gpus_shown |= {machine[second]: 0, machine[third]: 0}
    run_id = await engine.submit(make_job(run="echo never"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 90)
    assert _rented(api)[2:] == [second, third]  # the first host left out
    assert view.state == "FAILED", view
    reason = view.reason or ""
    assert reason.startswith("provisioning failed: pre-flight failed on 2 offers of pool 'gpu'")
    assert f"host {machine[second]}" in reason and f"host {machine[third]}" in reason
    assert len(api.cloud.destroyed) == 4 and not api.cloud.instances
