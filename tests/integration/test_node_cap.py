"""The node keeps its run's money limits while its operator is away (agent/budget.py).

A real agent on a Vast.ai stand-in instance, told its price and cap on its command line as
the provider's on-start tells it: its operator gone (closed laptop, kill -9), the node
stops the job, puts its outputs in the run's sink (a real S3 server: SeaweedFS) within
its bound, and destroys its own instance with the container's key at the cap — not at
its orphan timeout, half an hour later.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

import pytest

from agent import orphan
from agent.budget import (
    OPERATOR_MARGIN_S,
    Budget,
    billing_start,
    cap_reason,
    provider_start,
    reached,
    reported_start,
)
from agent.protocol import NodeFault, RunStep, Step, UseSink
from agent.sink.download import read_manifest
from agent.sink.store import open_store
from engine.providers.base import NodeHandle
from engine.state.ledger import Ledger
from tests.integration.agent_helpers import AgentProc, FakeOrchestrator, kill_leftover_group
from tests.standin.server import StandIn
from tests.support.s3 import Bucket
from tests.support.vast import bootstrap, gpu_pool, provider
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)
TOKEN = "join-token-capped-77e1"
PRICE = 3600.0  # $/h: a dollar a second, so a cap of a few dollars is a few seconds


def test_the_node_and_the_operator_meter_with_one_formula() -> None:
    budget = Budget(since=1000.0, price_per_hour=PRICE, max_dollars=3.0, max_hours=1.0)
    assert budget.allowance_s() == pytest.approx(3.0)
    assert budget.reason(1002.9) is None
    assert budget.reason(1003.0) == cap_reason(3.0, PRICE, 3.0, 1.0)
    assert cap_reason(3.0, PRICE, 3.0, 1.0) == "cap reached: max_dollars $3 (spent $3.0000)"
    assert Budget(since=0, max_hours=0.5).allowance_s() == 1800
    assert Budget(since=0, max_dollars=1.0).allowance_s() is None  # no price: no dollars


async def test_with_its_operator_connected_the_node_steps_in_only_when_it_does_not_meter() -> None:
    """Past the cap by more than the margin, the job still running, never asked to stop:
    the operator heartbeats but does not meter, and the node acts. Asked to stop (the
    operator collecting what the job left), it leaves the node to the operator."""
    overdue = Budget(since=time.time() - OPERATOR_MARGIN_S - 10, max_hours=1 / 3600)
    unmetered = reached(overdue, alone=lambda: False, operator_stopping=lambda: False,
                        busy=lambda: True)  # fmt: skip
    said = await asyncio.wait_for(unmetered, 5)
    assert said == "cap reached: max_hours 0.000277778; the operator did not stop the job"
    metered = reached(overdue, alone=lambda: False, operator_stopping=lambda: True,
                      busy=lambda: True)  # fmt: skip
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(metered, 1.1)
    fresh = Budget(since=time.time() - 2, max_hours=1 / 3600)  # just past: its meter's turn
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reached(fresh, alone=lambda: False, operator_stopping=lambda: False,
                                       busy=lambda: True), 1.1)  # fmt: skip


def test_a_billing_start_is_the_providers_where_it_reports_one_else_the_pre_create_time() -> None:
    assert billing_start(None, 100.0) == 100.0  # not reported (yet): the pre-create time
    assert billing_start(99.5, 100.0) == 99.5  # reported: the provider's, earlier or later
    assert billing_start(100.5, 100.0) == 100.5
    assert reported_start({"start_date": 1.7e9}) == 1.7e9
    for row in ({"start_date": None}, {"start_date": 0}, {"start_date": True}, {}, None, []):
        assert reported_start(row) is None, row


async def test_the_operators_meter_and_the_nodes_count_from_one_start(
    api: StandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Vast lists an instance's `start_date` null until it first runs: until then both
    meters count from the moment before the create (the ledger's intent, the node's
    --billed-since); from the first listing that reports a start, both count from it —
    the engine's handle and ledger row, and what the node computes with its own key. An
    adopter takes the ledger's start over a handle saved before it was reported; a warm
    claim keeps counting from its claim."""
    api.cloud.faults.never_start = api.cloud.faults.unstarted_null_start = True
    vast = provider(api, gpu_pool(), [], poll_s=0.05)
    capped = dataclasses.replace(bootstrap(), max_dollars=4.0)
    handle = await vast.provision(capped)
    inst = api.cloud.instances[int(handle.node_id)]
    [row] = Ledger().open_entries()
    assert handle.created_at == row.created_at == row.intent_at < inst.start_date
    assert f"--billed-since {row.intent_at!r} " in inst.request["onstart"]
    saved = dataclasses.asdict(handle)  # as the run index kept it before Vast said
    watch = asyncio.create_task(vast.node_exited(handle))
    try:
        await asyncio.sleep(0.3)  # listings with start_date null: no start to take
        assert handle.created_at == row.intent_at
        inst.running()  # it runs: its listing reports start_date from now on
        await eventually_async(lambda: handle.created_at != row.intent_at, 30, "the start")
    finally:
        watch.cancel()
    assert handle.created_at == inst.start_date == Ledger().open_entries()[0].created_at
    monkeypatch.setenv(orphan.ID_ENV, str(inst.id))  # the node's side, with its own key
    monkeypatch.setenv(orphan.KEY_ENV, inst.container_key)
    node_start = billing_start(provider_start(api.url), row.intent_at)
    assert node_start == handle.created_at
    adopted = NodeHandle(**saved)
    provider(api, gpu_pool(), []).adopt(adopted)
    assert adopted.created_at == inst.start_date
    claimed = NodeHandle(**{**saved, "created_at": time.time()})  # engine/run/warm.py
    claim_time = claimed.created_at
    provider(api, gpu_pool(), []).adopt(claimed)
    assert claimed.created_at == claim_time
    await vast.teardown(handle)


def test_the_bootstrap_gives_the_node_its_caps_only_with_a_billing_start() -> None:
    plain = dataclasses.replace(bootstrap(), max_dollars=0.5)
    assert "--max-dollars" not in plain.agent_args()  # the local pool: nothing bills
    billed = dataclasses.replace(plain, price_per_hour=0.4, billed_since=12.5)
    args = " ".join(billed.agent_args())
    assert "--billed-since 12.5 --price-per-hour 0.4 --max-dollars 0.5" in args
    assert "--max-hours" not in args


def _notes(root: Path) -> list[str]:
    path = root / "state" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["reason"] for e in events if e["type"] == NodeFault.model_fields["type"].default]


async def test_a_node_whose_operator_is_gone_saves_to_the_sink_and_destroys_itself_at_its_cap(
    tmp_path: Path, api: StandIn, monkeypatch: pytest.MonkeyPatch, s3: Bucket
) -> None:
    api.cloud.faults.never_start = True  # the instance is ours; its agent runs here
    vast = provider(api, gpu_pool(), [])
    capped = dataclasses.replace(bootstrap(), max_dollars=4.0)
    handle = await vast.provision(capped)
    inst = api.cloud.instances[int(handle.node_id)]
    onstart = inst.request["onstart"]
    assert f"--price-per-hour {handle.price_per_hour!r} --max-dollars 4.0" in onstart
    monkeypatch.setenv(orphan.ID_ENV, str(inst.id))  # as Vast sets them in the container
    monkeypatch.setenv(orphan.KEY_ENV, inst.container_key)
    cap_s = time.time() - inst.start_date + 6.0  # room to join on a loaded machine
    cap = round(PRICE * cap_s / 3600, 3)
    orch = await FakeOrchestrator.start(TOKEN)
    root = tmp_path / "node"
    node = await AgentProc.start(
        orch,
        root,
        *("--orphan-timeout", "1800", "--on-orphan", "destroy-instance"),
        *("--vast-url", api.url, "--billed-since", repr(time.time())),
        *("--price-per-hour", repr(PRICE), "--max-dollars", repr(cap)),
    )
    try:
        await eventually_async(lambda: "joined; replaying" in node.stderr(), 30, "the join")
        await orch.until(lambda: orch.channel is not None)
        target = s3.target(prefix="results/job/run-1", patterns=["out.txt"])
        await orch.send(UseSink(target=target))
        await orch.send(RunStep(step=Step.RUN, command="echo 42 > out.txt; sleep 300"))
        await eventually_async(lambda: (root / "work/out.txt").exists(), 30, "the output")
        await orch.close()  # the operator is gone for good: kill -9, a closed lid
        assert await node.exit_code(60) == 6, node.stderr()
    finally:
        await node.kill()
        kill_leftover_group(root)
    lived = time.time() - inst.start_date
    assert inst.id not in api.cloud.instances and inst.id in api.cloud.destroyed
    assert cap <= lived * PRICE / 3600 and lived < 1800, "at its cap, not its orphan timeout"
    notes = _notes(root)
    assert notes[0].startswith(f"cap reached: max_dollars ${cap:g} (spent $"), notes
    assert notes[0].endswith(": job stopped, destroying node")
    assert notes[1] == "outputs saved to the sink before leaving: 1 files"
    assert notes[2] == f"destroyed own Vast.ai instance {inst.id}"
    assert inst.container_key not in node.stderr() + "".join(notes)
    manifest = await read_manifest(open_store(target))
    assert manifest is not None and manifest.complete and set(manifest.files) == {"out.txt"}
    await vast.teardown(handle)
