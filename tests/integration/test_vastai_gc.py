"""`swjob gc`: orphans found from instance labels and the ledger, listed, and collected."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import Callable

import pytest

from engine.jobs.pools import BUILTIN_LOCAL, PoolSet
from engine.providers.gc import GONE, cli_gc, destroy_orphans, find_orphans
from engine.run.abandon import GONE_REASON
from engine.state.identity import operator_id
from engine.state.ledger import Ledger
from engine.state.store import Store
from tests.standin.server import PAGE_CAP, StandIn
from tests.support.cli import swjob, swjob_run
from tests.support.runs import run_json, unfinished_run
from tests.support.vast import FAST, POOLS_FILE, bootstrap, gpu_pool, provider


@pytest.fixture
def pools() -> PoolSet:
    return PoolSet({"local": BUILTIN_LOCAL, "gpu": gpu_pool(max_nodes=10)})


async def leak(api: StandIn, run_id: str) -> str:
    """Provision and walk away, as a crashed engine would."""
    handle = await provider(api, gpu_pool(max_nodes=10), []).provision(bootstrap(run_id))
    return handle.node_id


def stray(api: StandIn, label: str | None) -> int:
    """An instance made outside this machine's ledger (another machine, the web console)."""
    offer = api.cloud.rentable()[0]["id"]
    body = {"image": "x", "disk": 10, "env": {}, "onstart": None, "label": label}
    inst = api.cloud.create(offer, body)
    assert inst is not None
    return inst.id


async def test_orphans_from_labels_and_ledger_are_found_and_collected(api, pools) -> None:
    api.cloud.faults.never_start = True
    ledger = Ledger()
    crashed = await leak(api, "run-crashed")
    live = await leak(api, "run-live")
    foreign = stray(api, "swjob:run-elsewhere")
    unrelated = stray(api, "my-notebook")
    half = ledger.record_intent("run-halfway", "vastai", "swjob:run-halfway", pool="gpu")
    assert len(api.cloud.instances) > PAGE_CAP  # the listing had to page

    orphans = await find_orphans(pools, ledger, {"run-live"}, retry=FAST)
    by_run = {o.run_id: o for o in orphans}
    assert set(by_run) == {"run-crashed", "run-elsewhere", "run-halfway"}
    assert by_run["run-crashed"].instance_id == crashed and by_run["run-crashed"].entries
    assert by_run["run-crashed"].price_per_hour == 0.22
    assert (
        by_run["run-crashed"].billing_s >= 0 and "billing for" in by_run["run-crashed"].describe()
    )
    elsewhere = by_run["run-elsewhere"]
    assert elsewhere.instance_id == str(foreign) and not elsewhere.entries
    assert elsewhere.unattributed and not elsewhere.collectable  # no operator id: asked apart
    assert by_run["run-halfway"].status == GONE and by_run["run-halfway"].entries == (half,)

    done = await destroy_orphans(orphans, pools, ledger, retry=FAST)
    assert done.problems == [] and done.summary() == "collected 2 of 2", done
    assert set(api.cloud.instances) == {int(live), unrelated, foreign}
    assert [e.run_id for e in ledger.open_entries()] == ["run-live"]
    for instance in (int(live), unrelated, foreign):
        api.cloud.destroy(instance)


def test_gc_asks_apart_about_unattributed_instances_and_claims_a_lost_operator_id(
    api: StandIn, pools: PoolSet
) -> None:
    """A shared account: an instance whose label names no operator (an older swjob's, or
    another operator's) is never destroyed by --yes, only on a question of its own; one
    labelled with another operator id is left, unless that id is claimed — an operator
    who lost its state dir (and its id with it) collects its own instances so."""
    api.cloud.faults.never_start = True
    old, lost = stray(api, "swjob:run-old-format"), stray(api, "swjob:0badc0de:run-lost")

    out = io.StringIO()
    assert cli_gc(pools, yes=True, out=out) == 0
    said = out.getvalue()
    assert "no operator id in its label" in said, said
    assert "0badc0de's, not ours" in said and f"this operator is {operator_id()}" in said
    assert "left 1 instance(s) without an operator id" in said
    assert {old, lost} <= set(api.cloud.instances)

    questions: list[str] = []
    out = io.StringIO()
    assert cli_gc(pools, yes=False, out=out, ask=lambda q: questions.append(q) or "y") == 0
    assert "1 instance(s) carry no operator id" in questions[0], questions
    assert "collected 1 of 1" in out.getvalue()
    assert old not in api.cloud.instances and lost in api.cloud.instances

    out = io.StringIO()
    assert cli_gc(pools, yes=True, out=out, claim=frozenset({"0badc0de"})) == 0
    assert "collected 1 of 1" in out.getvalue() and api.cloud.instances == {}


def test_gc_claim_takes_only_an_operator_id(tmp_path) -> None:
    refused = swjob("gc", "--claim", "nope", cwd=tmp_path)
    assert refused.returncode == 2 and "'nope' is not an operator id" in refused.stderr


def test_cli_gc_lists_then_destroys_only_after_confirmation(api, pools) -> None:
    api.cloud.faults.never_start = True
    instance = asyncio.run(leak(api, "run-crashed"))
    out = io.StringIO()
    assert cli_gc(pools, yes=False, out=out, ask=lambda _prompt: "n") == 0
    assert f"instance {instance}" in out.getvalue() and "nothing destroyed" in out.getvalue()
    assert int(instance) in api.cloud.instances

    questions: list[str] = []
    out = io.StringIO()
    assert cli_gc(pools, yes=False, out=out, ask=lambda q: questions.append(q) or "y") == 0
    assert questions and "1 orphan" in questions[0]
    assert api.cloud.instances == {} and Ledger().open_entries() == []

    out = io.StringIO()
    assert cli_gc(pools, yes=True, out=out) == 0
    assert "no orphaned nodes" in out.getvalue()


def test_cli_gc_yes_skips_the_question_and_reports_failures(api, pools) -> None:
    api.cloud.faults.never_start = True
    instance = asyncio.run(leak(api, "run-crashed"))
    api.cloud.faults.destroy_never = True
    out = io.StringIO()

    def never_asked(_prompt: str) -> str:
        raise AssertionError("--yes must not ask")

    code = cli_gc(pools, yes=True, out=out, ask=never_asked, retry=FAST)
    assert code == 1 and instance in out.getvalue() and "billing" in out.getvalue()
    assert api.api_key not in out.getvalue()
    api.cloud.faults.destroy_never = False
    assert cli_gc(pools, yes=True, out=io.StringIO(), retry=FAST) == 0
    assert api.cloud.instances == {}


def test_cli_gc_says_when_the_account_cannot_be_listed(api, pools) -> None:
    api.cloud.faults.fail_next = 100
    out = io.StringIO()
    assert cli_gc(pools, yes=True, out=out, retry=FAST) == 1
    assert "HTTP 500" in out.getvalue() and api.api_key not in out.getvalue()


async def test_a_ledger_row_of_a_pool_no_longer_configured_is_not_collectable_here(
    api, pools, tmp_path
) -> None:
    """Its instance is on an account no configured pool lists: nothing here can verify or
    destroy it. It counted as ours to collect, and collecting it was then reported as a
    problem (`swjob gc --yes` exited 1 with "unknown pool 'retired'"); now it is listed
    as not collectable here, naming its pool, and gc destroys nothing."""
    ledger = Ledger()
    entry = ledger.record_intent("run-old", "vastai", "swjob:run-old", pool="retired")
    ledger.record_created(entry, "424242")
    [orphan] = await find_orphans(pools, ledger, set(), retry=FAST)
    why = "its pool retired is gone from the pools file"
    assert not orphan.collectable and orphan.why_left == why, orphan
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    done = await asyncio.to_thread(
        swjob, "gc", "--yes", "--pools", str(tmp_path / "pools.toml"), cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        f"  instance 424242 (run run-old): not collectable here — {why}",
        "nothing to destroy",
    ], done.stdout
    assert [e.entry for e in ledger.open_entries()] == [entry]


async def test_an_instance_labelled_later_through_the_sdk_is_found(api, pools) -> None:
    from engine.providers.vastai import make_api

    api.cloud.faults.never_start = True
    instance = stray(api, None)
    assert await find_orphans(pools, Ledger(), set(), retry=FAST) == []
    label = f"swjob:{operator_id()}:run-late"
    await make_api(gpu_pool()).call("label", "label_instance", instance, label)
    [orphan] = await find_orphans(pools, Ledger(), set(), retry=FAST)
    assert (orphan.run_id, orphan.instance_id) == ("run-late", str(instance))
    done = await destroy_orphans([orphan], pools, Ledger(), retry=FAST)
    assert (done.destroyed, done.problems) == (1, [])


def test_cli_gc_lists_and_collects_an_instance_vast_has_not_started(api, pools) -> None:
    """Vast lists a created/loading instance with `start_date: null`; the SDK's own
    `show_instances` subtracts it from the time (TypeError) and gc said only
    "show instances: TypeError". It is listed, judged and collected like any other."""
    api.cloud.faults.never_start = True  # loading for ever
    api.cloud.faults.unstarted_null_start = True
    instance = asyncio.run(leak(api, "run-crashed"))
    time.sleep(0.3)
    [orphan] = asyncio.run(find_orphans(pools, Ledger(), set(), retry=FAST))
    assert orphan.billing_s >= 0.3  # since the ledger saw it created: Vast gives no start
    out = io.StringIO()
    assert cli_gc(pools, yes=True, out=out, retry=FAST) == 0, out.getvalue()
    listed = [line for line in out.getvalue().splitlines() if f"instance {instance}" in line]
    assert listed and "run-crashed" in listed[0] and "loading" in listed[0], out.getvalue()
    assert api.cloud.instances == {} and Ledger().open_entries() == []


def test_gc_right_after_a_run_says_its_settling_destroy_and_leaves_it(api, tmp_path) -> None:
    """A clean `swjob run` on Vast: its destroy was accepted, but Vast lists the instance a
    while longer (eventually consistent). `swjob gc` right after called it an orphan
    "billing for 0.00 h" and `--yes` destroyed it again. It is said to be being destroyed
    (the ledger records the destroy asked) and left to Vast; an instance truly left behind
    is still listed and collected."""
    api.cloud.faults.destroy_lag_s = 120
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    (tmp_path / "job.toml").write_text('[job]\nname = "hi"\nrun = "echo hi"\n')
    code, out = swjob_run(tmp_path, tmp_path / "job.toml", "--pool", "gpu", "--pools", "pools.toml")
    assert code == 0, out
    [settling] = api.cloud.instances  # destroyed, still listed
    api.cloud.faults.never_start = True
    left = asyncio.run(leak(api, "run-crashed"))

    done = swjob("gc", "--yes", "--pools", "pools.toml", cwd=tmp_path)
    shown = done.stdout + done.stderr
    [about_settling] = [line for line in shown.splitlines() if f"instance {settling} " in line]
    assert "being destroyed" in about_settling and "billing" not in about_settling, shown
    [about_left] = [line for line in shown.splitlines() if f"  instance {left} " in line]
    assert "run-crashed" in about_left and "billing for" in about_left, shown
    # its destroy accepted, Vast still lists it: being destroyed, not yet collected
    assert done.returncode == 0 and "collected 0 of 1, 1 being destroyed" in shown, shown
    deletes = [p for m, p, _, _ in api.requests if m == "DELETE" and f"/{settling}/" in p]
    assert len(deletes) == 1, "gc asked again for a destroy already asked"
    assert int(left) in api.cloud.vanishing  # its destroy asked (and settling, too)
    [row] = [e for e in Ledger().open_entries() if e.instance_id == left]
    assert row.destroy_requested_at is not None  # the next gc says it is being destroyed

    api.cloud.vanishing.update({settling: 0.0, int(left): 0.0})  # Vast catches up
    done = swjob("gc", "--yes", "--pools", "pools.toml", cwd=tmp_path)  # closes its row
    assert done.returncode == 0 and api.cloud.instances == {}, done.stdout
    assert Ledger().open_entries() == []


async def test_a_destroy_asked_long_ago_and_still_listed_is_an_orphan_again(
    api, pools, monkeypatch
) -> None:
    """Settling has an end: still listed past the confirmation window, the destroy did not
    take — the instance is an orphan again, said so, and collected."""
    from engine.providers import gc

    api.cloud.faults.never_start = True
    instance = await leak(api, "run-done")
    ledger = Ledger()
    [row] = ledger.open_entries()
    ledger.record_destroy_requested(row.entry)
    [orphan] = await find_orphans(pools, ledger, set(), retry=FAST)
    assert orphan.settling and not orphan.collectable and "being destroyed" in orphan.describe()
    done = await destroy_orphans([orphan], pools, ledger, retry=FAST)
    assert done.asked == 0 and int(instance) in api.cloud.instances
    out = io.StringIO()
    await asyncio.to_thread(cli_gc, pools, yes=True, out=out, ledger=ledger, retry=FAST)
    assert out.getvalue().splitlines()[-1] == "nothing to destroy", out.getvalue()

    monkeypatch.setattr(gc, "CONFIRM_FOR_S", 0.0)  # the window is over
    [orphan] = await find_orphans(pools, ledger, set(), retry=FAST)
    assert orphan.collectable and "did not take" in orphan.describe(), orphan.describe()
    done = await destroy_orphans([orphan], pools, ledger, retry=FAST)
    assert (done.destroyed, done.problems) == (1, []) and api.cloud.instances == {}


async def test_the_engine_start_up_check_does_not_call_a_settling_destroy_an_orphan(
    api, make_engine
) -> None:
    from engine.report import events as ev
    from tests.support.tap import Tap

    api.cloud.faults.never_start = True
    settling = await leak(api, "run-done")
    left = await leak(api, "run-crashed")
    ledger = Ledger()
    [row] = [e for e in ledger.open_entries() if e.instance_id == settling]
    ledger.record_destroy_requested(row.entry)
    tap = Tap(await make_engine(gpu_pool(max_nodes=10)))  # before its check has run

    def alert_about(instance: str) -> Callable[[ev.Event], bool]:
        return lambda e: isinstance(e, ev.Alert) and f"instance {instance} " in e.message

    await tap.until(alert_about(left))  # the listing is in order: `settling` came first
    assert not any(alert_about(settling)(e) for _, e in tap.seen), tap.seen
    for instance in (settling, left):
        api.cloud.destroy(int(instance))


def test_gc_fails_an_abandoned_run_once_its_settling_node_is_seen_gone(api, tmp_path) -> None:
    """Two runs whose owners died, on Vast with its destroy lagging: A's owner had asked
    its node's destroy, B's node gc destroys. While Vast lists them, gc says they are being
    destroyed and leaves the runs be. Then Vast stops listing them, and gc closed their
    ledger rows through "no instance exists" without ending the runs: unfinished for
    good, with nothing left to find them by. They are FAILED, saying why."""
    api.cloud.faults.destroy_lag_s = 120
    api.cloud.faults.never_start = True
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    a_dir = unfinished_run(tmp_path / "runs", "run-a")
    b_dir = unfinished_run(tmp_path / "runs", "run-b")
    a, b = asyncio.run(leak(api, "run-a")), asyncio.run(leak(api, "run-b"))
    ledger = Ledger()
    [a_row] = [e for e in ledger.open_entries() if e.instance_id == a]
    ledger.record_destroy_requested(a_row.entry)  # A's owner asked, then died
    assert api.cloud.destroy(int(a)) and int(a) in api.cloud.instances

    def gc() -> str:
        done = swjob("gc", "--yes", "--pools", "pools.toml", cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout + done.stderr

    def unfinished() -> set[str]:
        store = Store()
        try:
            return {view.run_id for view, _ in store.unfinished()}
        finally:
            store.close()

    shown = gc()  # A being destroyed, left; B destroyed by gc, still listed
    assert f"instance {a} (pool gpu, run run-a, loading): being destroyed" in shown, shown
    assert "collected 0 of 1, 1 being destroyed (instance " + b in shown, shown
    assert unfinished() == {"run-a", "run-b"} and not (a_dir / "run.json").exists()
    assert not (b_dir / "run.json").exists(), "a run ended before its node was seen gone"

    shown = gc()  # both still listed: both being destroyed, nothing asked again
    assert shown.count("being destroyed — asked") == 2 and "nothing to destroy" in shown, shown
    deletes = [p for m, p, _, _ in api.requests if m == "DELETE"]
    assert deletes == [f"/api/v0/instances/{b}/"], deletes  # A's owner asked A's
    assert unfinished() == {"run-a", "run-b"} and len(ledger.open_entries()) == 2

    api.cloud.vanishing.update({int(a): 0.0, int(b): 0.0})  # Vast catches up
    shown = gc()
    for run_id in ("run-a", "run-b"):
        said = f"ledger row of run {run_id} (pool gpu): no instance exists — its run is abandoned"
        assert said in shown, shown
    assert "collected 2 of 2" in shown and ledger.open_entries() == [], shown
    assert unfinished() == set() and api.cloud.instances == {}
    for run_dir in (a_dir, b_dir):
        assert (run_json(run_dir)["state"], run_json(run_dir)["reason"]) == (
            "FAILED",
            GONE_REASON,
        )
