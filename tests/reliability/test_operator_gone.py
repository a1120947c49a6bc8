"""The operator dies (kill -9) under a rented node, through real `swjob` processes against
the Vast.ai stand-in.

Money survives the operator: a priced run with a tiny `max_dollars`, killed mid-job and
taken back with `swjob attach`, is still stopped by its cap counted on the node's whole
life, and run.json shows the true cost — the ledger's created→destroyed time at the
offer's price. A node whose operator never returns destroys its own instance.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.providers.base import silence_for
from engine.report.datastream import read_events
from engine.run.costmeter import COST_EVENT_EVERY_S
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

Start = Callable[..., Cli]
PRICE = 0.22  # $/h of offer 103, the cheapest verified 1-GPU offer of the stand-in
AWAY_S = 1.0  # how long the killed operator stays away before `swjob attach`
TIMER_S = 1  # the lonely node's silence deadline and orphan timeout
TOLERANCE_S = COST_EVENT_EVERY_S + silence_for(TIMER_S)  # charged past the self-destroy, at most
LOAD_SLACK_S = 5.0  # a loaded node may act a few seconds after its timers ran out
POOLS = """
[pools.gpu]
provider = "vastai"
image = "img"
agent_install = "swjob"
[pools.gpu.resources]
gpu_count = 1
"""
TIMERS = f"orphan_timeout_s = {TIMER_S}\nnode_lost_after_s = {TIMER_S}\n"
LONELY = POOLS.replace("[pools.gpu.resources]", TIMERS + "[pools.gpu.resources]")


def test_a_cap_holds_across_kill_9_and_attach_with_the_true_cost(
    tmp_path: Path, api: StandIn, clis: Start, record_fault: Callable[..., None]
) -> None:
    """The cap is set while the operator is away, at 2 s of node life beyond what the node
    has already lived (boot time varies with load): counted on the node's whole life it
    stops the run within ~1 s of that mark; counted from the restart (the old bug), it
    would stop it only after the attach plus the whole cap."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    (tmp_path / "job.toml").write_text('[job]\nname = "priced"\nrun = "echo started; sleep 300"\n')
    api.cloud.faults.fail_next, api.cloud.faults.fail_paths = 1, "/bundles/"  # one retry
    cli = clis("run", "job.toml", "--pool", "gpu", "--pools", "pools.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), timeout=60, what="the job started")
    cli.kill9()
    retry = [
        line
        for line in cli.output().splitlines()
        if "warning: Vast.ai search offers: HTTP 500" in line
    ]
    assert retry, "the provider's retry reached the user"
    time.sleep(AWAY_S)  # the fault: the operator stays away (the node bills on)
    [run_dir] = (tmp_path / "swjob-runs" / "priced").iterdir()
    [born] = [e.created_at for e in Ledger().entries_of(run_dir.name)]
    assert born is not None
    cap_s = time.time() - born + 2.0
    pools.write_text(POOLS + f"[pools.gpu.caps]\nmax_dollars = {PRICE * cap_s / 3600!r}\n")
    attach = clis("attach", run_dir.name, "--pools", "pools.toml", cwd=tmp_path)
    assert attach.wait(90) == 1, attach.output()
    out = attach.output()
    assert "cap reached: max_dollars" in out
    [row] = Ledger().entries_of(run_dir.name)
    assert row.created_at is not None and row.destroyed_at is not None
    assert row.price_per_hour == PRICE
    stop = next(
        e
        for e in read_events(run_dir / "events.jsonl")
        if getattr(e, "cause", "") == "OperatorStop"
    )
    stopped_after = stop.ts.timestamp() - row.created_at
    # An attach slowed past the mark (a loaded machine) must stop the run as it adopts it;
    # counted from the restart (the old bug), the stop would come a whole cap later.
    adopted = next(
        e
        for e in read_events(run_dir / "events.jsonl")
        if getattr(e, "message", "") == "recovered after operator restart"
    )
    adopted_after = adopted.ts.timestamp() - row.created_at
    due = max(cap_s, adopted_after)
    assert cap_s <= stopped_after <= due + 1.5, "the cap counted the node's whole life"
    summary = json.loads((run_dir / "run.json").read_text())
    true_cost = PRICE * (row.destroyed_at - row.created_at) / 3600
    assert summary["cost_dollars"] == pytest.approx(true_cost, abs=PRICE * 0.5 / 3600)
    assert sum(summary["cost_by_phase"].values()) == pytest.approx(summary["cost_dollars"])
    assert summary["cost_by_phase"]["run"] > PRICE * AWAY_S / 3600  # the time nobody watched
    assert any("search offers: HTTP 500" in alert for alert in summary["alerts"])
    assert api.cloud.instances == {} and Ledger().open_entries() == []
    record_fault(
        f"operator kill -9 mid-run on a $0.22/h node; attach {AWAY_S:g} s later, cap at "
        f"{cap_s:.1f} s of node life",
        stopped_after,
        f"cap stopped it at {stopped_after:.1f} s of node life; run.json cost "
        f"${summary['cost_dollars']:.6f} = ledger's ${true_cost:.6f}",
    )


def test_a_node_left_alone_destroys_itself_and_the_attach_charges_only_its_life(
    tmp_path: Path, api: StandIn, clis: Start, record_fault: Callable[..., None]
) -> None:
    """`swjob run` on a Vast pool with `orphan_timeout_s = 1`, killed with -9 while the job
    runs: the agent notices the silence (the pool's `node_lost_after_s`, 1 s), waits 1 s
    more, stops the job and destroys its own instance; the ledger row stays open.

    The operator comes back (`swjob attach`) only after its node's timers ran out, with a
    cap tightened while it was away that the node's life stayed under and the time away
    would not have. The run is charged the node's life up to the end its own timers set
    (engine/run/nodeend.py: the operator's last event + the node's silence deadline + a
    cost event's interval + the orphan timeout), never up to "now", and no "cap reached"
    is said. The life runs from Vast's `start_date` (both meters' start). Its end is no
    earlier than the self-destroy (the node's timers allowed no later one), but for a
    loaded node acting late on them (LOAD_SLACK_S); it is later by what the operator
    could not record of its last seconds: at most `COST_EVENT_EVERY_S` + the silence
    deadline (TOLERANCE_S)."""
    pools = tmp_path / "pools.toml"
    pools.write_text(LONELY)
    (tmp_path / "job.toml").write_text('[job]\nname = "lonely"\nrun = "echo started; sleep 300"\n')
    cli = clis("run", "job.toml", "--pool", "gpu", "--pools", str(pools), cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), timeout=60, what="the job started")
    cli.kill9()
    [inst] = api.cloud.instances.values()
    timers = f"--deadline {TIMER_S} --orphan-timeout {TIMER_S} --on-orphan destroy-instance"
    assert timers in inst.request["onstart"]
    killed_at = time.time()
    eventually(lambda: api.cloud.instances == {}, timeout=40)
    destroyed_at = api.cloud.destroyed_at[inst.id]
    assert api.cloud.destroyed == [inst.id]
    [row] = Ledger().open_entries()  # the node cannot close it: attach (or gc) does
    assert row.instance_id == str(inst.id) and row.created_at == inst.start_date
    [run_dir] = (tmp_path / "swjob-runs" / "lonely").iterdir()
    seen = max(e.ts.timestamp() for e in read_events(run_dir / "events.jsonl"))
    timers_end = seen + silence_for(TIMER_S) + COST_EVENT_EVERY_S + TIMER_S
    cap_s = timers_end - row.created_at + 0.5  # its life stays under it; "now" will not
    pools.write_text(LONELY + f"[pools.gpu.caps]\nmax_dollars = {PRICE * cap_s / 3600!r}\n")
    time.sleep(max(0.0, row.created_at + cap_s - time.time()))  # the fault: away that long
    attach_at = time.time()
    attach = clis("attach", run_dir.name, "--pools", str(pools), cwd=tmp_path)
    assert attach.wait(60) == 1, attach.output()
    out, summary = attach.output(), json.loads((run_dir / "run.json").read_text())
    assert "cap reached" not in out + summary["reason"], summary["reason"]
    charged_end = row.created_at + summary["cost_dollars"] / PRICE * 3600
    assert charged_end == pytest.approx(timers_end, abs=0.05), "up to its timers' end"
    assert -LOAD_SLACK_S <= charged_end - destroyed_at <= TOLERANCE_S
    assert charged_end < attach_at, "never up to now"
    assert sum(summary["cost_by_phase"].values()) == pytest.approx(summary["cost_dollars"])
    assert api.cloud.instances == {} and Ledger().open_entries() == []
    record_fault(
        f"operator kill -9 mid-run (orphan_timeout_s = {TIMER_S}); attach after the node's timers",
        destroyed_at - killed_at,
        f"agent destroyed its own instance {destroyed_at - killed_at:.1f} s after the kill; "
        f"attach charged its life to {charged_end - destroyed_at:+.1f} s of its destroy, "
        f"not the {time.time() - destroyed_at:.1f} s since; no cap reached",
        "the job's uncollected outputs",
    )
