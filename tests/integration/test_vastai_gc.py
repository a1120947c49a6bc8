"""`swjob gc`: orphans found from instance labels and the ledger, listed, and collected."""

from __future__ import annotations

import asyncio
import io
import time

import pytest

from engine.jobs.pools import BUILTIN_LOCAL, PoolSet
from engine.providers.gc import GONE, cli_gc, destroy_orphans, find_orphans
from engine.state.ledger import Ledger
from tests.standin.server import PAGE_CAP, StandIn
from tests.support.vast import FAST, bootstrap, gpu_pool, provider

pytestmark = pytest.mark.timeout(60)


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
    assert (
        by_run["run-elsewhere"].instance_id == str(foreign) and not by_run["run-elsewhere"].entries
    )
    assert by_run["run-halfway"].status == GONE and by_run["run-halfway"].entries == (half,)

    done = await destroy_orphans(orphans, pools, ledger, retry=FAST)
    assert done.problems == [] and done.summary() == "collected 3 of 3", done
    assert set(api.cloud.instances) == {int(live), unrelated}
    assert [e.run_id for e in ledger.open_entries()] == ["run-live"]
    api.cloud.destroy(int(live))
    api.cloud.destroy(unrelated)


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


async def test_a_ledger_row_of_a_pool_no_longer_configured_is_reported_not_guessed(
    api, pools
) -> None:
    ledger = Ledger()
    entry = ledger.record_intent("run-old", "vastai", "swjob:run-old", pool="retired")
    ledger.record_created(entry, "424242")
    [orphan] = await find_orphans(pools, ledger, set(), retry=FAST)
    assert orphan.status.startswith("unverifiable") and orphan.instance_id == "424242"
    done = await destroy_orphans([orphan], pools, ledger, retry=FAST)
    assert done.destroyed == 0 and len(done.problems) == 1 and "retired" in done.problems[0]
    assert [e.entry for e in ledger.open_entries()] == [entry]


async def test_an_instance_labelled_later_through_the_sdk_is_found(api, pools) -> None:
    from engine.providers.vastai import make_api

    api.cloud.faults.never_start = True
    instance = stray(api, None)
    assert await find_orphans(pools, Ledger(), set(), retry=FAST) == []
    await make_api(gpu_pool()).call("label", "label_instance", instance, "swjob:run-late")
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
