"""Vast.ai answers that are not the happy path (Vast's docs, other clients' issues), through
the real SDK against the stand-in: 404 for a gone instance, a destroy that stays listed for
a while, a 400 with Vast's message on create, `status_msg`, a node found by its label, and
the container's own key that acts on its instance only."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import time
import urllib.error
import urllib.request

import pytest

from engine.providers.base import Listed, NodeHandle, ProvisionError, TeardownError
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.vast import bootstrap, gpu_pool, provider
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(60)


async def _rented(api: StandIn, alerts: list[str], **kwargs: float):
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(node_lost_after_s=0.5), alerts, **kwargs)
    return vast, await vast.provision(bootstrap())


@pytest.mark.parametrize("answer", ["gone_404", "gone_empty"])
async def test_a_404_or_an_empty_list_for_a_gone_instance_means_gone(
    api: StandIn, answer: str
) -> None:
    setattr(api.cloud.faults, answer, True)
    alerts: list[str] = []
    vast, handle = await _rented(api, alerts, poll_s=0.05)
    watch = asyncio.create_task(vast.node_exited(handle))
    api.cloud.destroy(int(handle.node_id))  # destroyed underneath us
    reason = await asyncio.wait_for(watch, 30)
    assert reason == Listed(f"Vast.ai instance {handle.node_id} was destroyed", gone=True)
    await vast.teardown(handle)  # confirmed at once: the 404 is the answer, not an error
    assert Ledger().open_entries() == [] and alerts == []
    shows = [p for m, p, _, _ in api.requests if m == "GET" and handle.node_id in p]
    assert shows, "the lookup was really made (and answered 404 or [])"


@pytest.mark.parametrize("as_list", [False, True])
async def test_an_accepted_destroy_still_listed_is_confirmed_in_the_background(
    api: StandIn, as_list: bool
) -> None:
    """The destroy is accepted but the instance stays listed for 1.5 s: teardown returns at
    once without a 'may still be billing' alarm; the ledger row stays open (destroy
    requested) until the instance is seen gone, then closes. Also when the lookup answers
    a list holding its row with the id as text: that is the instance, not 'gone'."""
    api.cloud.faults.show_as_list = as_list
    alerts: list[str] = []
    vast, handle = await _rented(api, alerts, confirm_every_s=0.1)
    api.cloud.faults.destroy_lag_s = 1.5
    started = time.monotonic()
    await vast.teardown(handle)
    assert time.monotonic() - started < 1.0, "teardown waited for the listing to catch up"
    [row] = Ledger().open_entries()
    assert row.instance_id == handle.node_id and row.destroy_requested_at is not None
    assert int(handle.node_id) in api.cloud.instances  # still listed: Vast catches up later
    await eventually_async(lambda: Ledger().open_entries() == [], 30, "the destroy confirmed")
    assert api.cloud.instances == {}
    assert alerts == []


async def test_an_instance_vast_has_not_started_is_watched_and_torn_down(api: StandIn) -> None:
    """Vast shows a created/loading instance with `start_date: null`, on which the SDK's
    own `show_instance` raises TypeError: its boot was not seen, and a teardown whose
    destroy was accepted but still listed failed on that TypeError instead of being
    confirmed in the background."""
    api.cloud.faults.unstarted_null_start = True
    alerts: list[str] = []
    vast, handle = await _rented(api, alerts, poll_s=0.05, confirm_every_s=0.1)
    watch = asyncio.create_task(vast.node_exited(handle))
    await eventually_async(
        lambda: any(handle.node_id in p for m, p, _, _ in api.requests if m == "GET"),
        10,
        "a look at the loading instance",
    )
    api.cloud.faults.destroy_lag_s = 0.5
    await vast.teardown(handle)
    await eventually_async(lambda: Ledger().open_entries() == [], 30, "the destroy confirmed")
    assert api.cloud.instances == {} and alerts == []
    reason = await asyncio.wait_for(watch, 30)
    assert reason == Listed(f"Vast.ai instance {handle.node_id} was destroyed", gone=True)


async def test_a_destroy_never_confirmed_alarms_after_the_confirmation_window(
    api: StandIn,
) -> None:
    """Positive control for the quiet case above: still listed past `confirm_for_s` → alarm."""
    alerts: list[str] = []
    vast, handle = await _rented(api, alerts, confirm_every_s=0.05, confirm_for_s=0.3)
    api.cloud.faults.destroy_lag_s = 30
    await vast.teardown(handle)
    await eventually_async(lambda: alerts, 30, "an alert")
    assert handle.node_id in alerts[0] and "may still be billing" in alerts[0]
    [row] = Ledger().open_entries()
    assert row.destroy_requested_at is not None  # left for gc


async def test_a_400_on_create_is_an_error_with_vasts_message(api: StandIn) -> None:
    api.cloud.faults.create_refusal = "disk must be at least 10 GB for this image"
    vast = provider(api, gpu_pool(), [])
    with pytest.raises(ProvisionError, match="HTTP 400 \\(disk must be at least 10 GB"):
        await vast.provision(bootstrap())
    creates = [p for m, p, _, _ in api.requests if m == "PUT" and "/asks/" in p]
    assert len(creates) == 1, "a refused request is not retried on the next offer"
    assert Ledger().open_entries() == [] and api.cloud.instances == {}


async def test_a_create_refused_in_a_200_is_an_error_with_vasts_message(api: StandIn) -> None:
    """Vast's own async client treats a 200 whose `success` is false as a failed create
    (`error` - `msg`): it is Vast refusing the request, not the offer being rented away."""
    api.cloud.faults.create_soft_refusal = {
        "success": False,
        "error": "insufficient_credit",
        "msg": "Your account lacks credit; see the billing page",
    }
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    with pytest.raises(ProvisionError, match="\\(Your account lacks credit; see the billing"):
        await vast.provision(bootstrap())
    creates = [p for m, p, _, _ in api.requests if m == "PUT" and "/asks/" in p]
    assert len(creates) == 1, "a refused request is not retried on the next offer"
    assert not any("rented away" in a for a in alerts)
    assert Ledger().open_entries() == [] and api.cloud.instances == {}


async def test_a_search_answer_without_offers_is_said_not_understood(api: StandIn) -> None:
    """The SDK takes `offers` from the search's answer (KeyError without it: the run failed
    with "search offers: KeyError"). Vast's own search always sends `offers` (empty when
    nothing matches): an answer without it is not "no offers", it is one we do not
    understand — said in one line with what it held, the key masked, nothing rented."""
    vast = provider(api, gpu_pool(), [])
    api.cloud.faults.search_answer = {"success": True, "note": f"for {api.api_key}"}
    with pytest.raises(ProvisionError) as raised:
        await vast.provision(bootstrap())
    said = str(raised.value)
    assert said.startswith("Vast.ai search offers: answer not understood"), said
    assert '"note"' in said and "***" in said and api.api_key not in said, said
    assert "KeyError" not in said and "\n" not in said

    api.cloud.faults.search_answer = "down for maintenance"  # not JSON at all
    with pytest.raises(ProvisionError, match=r"not understood \(HTTP 200: down for maint"):
        await vast.provision(bootstrap())

    api.cloud.faults.search_answer = {"success": False, "error": "bad_query", "msg": "no"}
    with pytest.raises(ProvisionError, match=r"^Vast.ai search offers: refused \(no\)$"):
        await vast.provision(bootstrap())
    assert Ledger().open_entries() == [] and api.cloud.instances == {}


async def test_a_destroy_refused_in_a_200_is_retried_then_said(api: StandIn) -> None:
    """Vast's CLI reads a destroy answered 200 without `success` as refused (it prints the
    msg): it is retried like a failed call, and one refused for good is a teardown error
    with Vast's message — not an accepted destroy Vast is slow to show."""
    alerts: list[str] = []
    vast, handle = await _rented(api, alerts, confirm_every_s=0.05)
    api.cloud.faults.destroy_refusals = 1
    await vast.teardown(handle)  # the second ask destroys it
    assert api.cloud.instances == {} and Ledger().open_entries() == []

    vast, handle = await _rented(api, alerts, confirm_every_s=0.05)
    api.cloud.faults.destroy_refusals = 100
    with pytest.raises(TeardownError, match=r"instance is locked.*may still be billing"):
        await vast.teardown(handle)
    assert int(handle.node_id) in api.cloud.instances
    [row] = Ledger().open_entries()  # left for gc, and said
    assert row.instance_id == handle.node_id and row.destroy_requested_at is None
    api.cloud.faults.destroy_refusals = 0
    await vast.teardown(handle)


async def test_a_lost_node_reason_carries_vasts_status_msg(api: StandIn) -> None:
    vast, handle = await _rented(api, [], poll_s=0.05)
    api.cloud.crash(int(handle.node_id), status_msg="OCI runtime create failed: no GPU")
    said = await asyncio.wait_for(vast.node_exited(handle), 30)
    assert said == Listed(
        f"Vast.ai instance {handle.node_id} is exited: OCI runtime create failed: no GPU"
    )
    await vast.teardown(handle)


async def test_a_node_found_by_its_label_gets_price_and_birth_from_the_listing(
    api: StandIn,
) -> None:
    """The engine died after the create call but before writing the answer down: only the
    ledger intent and the labelled instance are left. The rebuilt handle carries the
    listing's dph_total and start_date, so its cost is metered right."""
    api.cloud.faults.never_start = True
    inst = api.cloud.create(103, {"image": "img", "disk": 40, "env": {}, "onstart": None})
    assert inst is not None
    inst.label = "swjob:run-lost"
    Ledger().record_intent("run-lost", "vastai", "swjob:run-lost", pool="gpu")
    vast = provider(api, gpu_pool(), [])
    handle = await vast.find_node("run-lost")
    assert handle is not None and handle.node_id == str(inst.id)
    assert handle.price_per_hour == 0.22 and handle.created_at == pytest.approx(inst.start_date)
    await vast.teardown(handle)
    assert Ledger().open_entries() == []


async def test_a_recorded_node_gets_price_and_birth_from_the_ledger(api: StandIn) -> None:
    vast, handle = await _rented(api, [])
    [row] = Ledger().open_entries()
    assert (row.price_per_hour, row.created_at) == (0.22, handle.created_at)
    bare = NodeHandle("vastai", handle.node_id)  # a handle saved by an older swjob
    provider(api, gpu_pool(), []).adopt(bare)
    assert (bare.price_per_hour, bare.created_at) == (0.22, handle.created_at)
    found = await provider(api, gpu_pool(), []).find_node("run-1")
    assert found is not None and (found.price_per_hour, found.created_at) == (0.22, row.created_at)
    await vast.teardown(handle)


def _http(api: StandIn, method: str, path: str, key: str, body: dict | None = None) -> int:
    request = urllib.request.Request(
        api.url + path,
        data=json.dumps(body or {}).encode(),
        method=method,
        headers={"Authorization": f"Bearer {key}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status
    except urllib.error.HTTPError as exc:
        return exc.code


async def test_a_container_key_acts_only_on_its_own_instance(api: StandIn) -> None:
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(), [])
    mine, other = [await vast.provision(bootstrap(f"run-{n}")) for n in ("a", "b")]
    key = api.cloud.instances[int(mine.node_id)].container_key
    assert _http(api, "DELETE", f"/api/v0/instances/{other.node_id}/", key) == 403
    assert _http(api, "GET", "/api/v1/instances/", key) == 403
    assert _http(api, "DELETE", f"/api/v0/instances/{mine.node_id}/", "ck-guess") == 401
    assert int(other.node_id) in api.cloud.instances and int(mine.node_id) in api.cloud.instances
    assert _http(api, "DELETE", f"/api/v0/instances/{mine.node_id}/", key) == 200
    assert int(mine.node_id) not in api.cloud.instances
    await vast.teardown(mine)
    await vast.teardown(other)


async def test_a_host_vast_lists_offline_is_not_a_dead_node(api: StandIn) -> None:
    """Vast computes "offline" when a host misses heartbeats to its servers; the container
    may run on (and its agent talk to us). Polls that see it go on watching; the node is
    not given up, and is seen destroyed when it is."""
    vast, handle = await _rented(api, [], poll_s=0.05)
    instance = int(handle.node_id)
    api.cloud.go_offline(instance)
    seen_at = len(api.requests)
    watch = asyncio.create_task(vast.node_exited(handle))

    def looked_twice() -> bool:
        later = api.requests[seen_at:]
        return sum(m == "GET" and f"/instances/{instance}/" in p for m, p, *_ in later) >= 2

    await eventually_async(looked_twice, 30, "two looks at the offline instance")
    assert not watch.done(), watch.result()  # an offline listing did not end the watch
    api.cloud.go_offline(instance, offline=False)
    api.cloud.destroy(instance)
    reason = await asyncio.wait_for(watch, 30)
    assert reason == Listed(f"Vast.ai instance {instance} was destroyed", gone=True)
    await vast.teardown(handle)


@pytest.mark.parametrize("list_lag_s", [0.0, 1.0])
async def test_a_create_answered_without_its_contract_id_rents_one_instance(
    api: StandIn, list_lag_s: float
) -> None:
    """A create answered 200 `success: true` without `new_contract` did create the
    instance: it was read as the offer rented away, its ledger row closed and the next
    offer rented under the same label — two instances billing, one of them unseen. Also
    when Vast lists the new instance only a while later."""
    api.cloud.faults.contract_missing = 1
    api.cloud.faults.list_lag_s = list_lag_s
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap())
    assert list(api.cloud.instances) == [int(handle.node_id)], alerts
    [row] = Ledger().open_entries()
    assert row.instance_id == handle.node_id
    await vast.teardown(handle)
    assert api.cloud.instances == {} and Ledger().open_entries() == []


def _intent(run_id: str, age_s: float) -> int:
    """A ledger intent written `age_s` ago, as an engine killed mid-create left it."""
    ledger = Ledger()
    entry = ledger.record_intent(run_id, "vastai", f"swjob:{run_id}", pool="gpu")
    with contextlib.closing(sqlite3.connect(ledger.path, isolation_level=None)) as db:
        db.execute("UPDATE instances SET intent_at=? WHERE entry=?", (time.time() - age_s, entry))
    return entry


async def test_an_intent_whose_create_surely_made_nothing_is_closed_by_the_adopter(
    api: StandIn,
) -> None:
    """An engine killed with its create in flight, Vast refusing it after the kill: the
    adopter waited until the create's answer was surely in, found no instance, and failed
    the run — but left the intent open, so every later `swjob run` and console warned of
    an orphaned node that never existed, until the user ran `swjob gc`."""
    _intent("run-crashed", age_s=120)
    vast = provider(api, gpu_pool(), [])
    assert await vast.find_node("run-crashed") is None
    assert Ledger().open_entries() == []


async def test_a_create_refusal_quoting_the_env_masks_the_runs_secrets(api: StandIn) -> None:
    """The create carries the run's join token in the instance's env; a refusal quoting
    that env went out as the run's reason with it in clear (only the API key was masked
    in Vast's words)."""
    api.cloud.faults.create_refusal_echo = True
    sent = bootstrap()
    with pytest.raises(ProvisionError) as raised:
        await provider(api, gpu_pool(), []).provision(sent)
    said = str(raised.value)
    assert "is not accepted here" in said and "***" in said, said
    assert sent.token not in said, said


async def test_an_adopter_waits_out_the_create_of_the_runs_newest_intent(api: StandIn) -> None:
    """Two intents open: an earlier offer's, whose row could not be closed (another process
    held the ledger), and the one whose create was in flight when the engine was killed.
    The adopter waited out the earlier one's create alone, found no instance yet (Vast
    lists a new one a while later), and closed both rows: the instance billed with no
    open row for it, no warning at start-up, its run failed for no node."""
    _intent("run-crashed", age_s=120)
    _intent("run-crashed", age_s=0)
    api.cloud.faults.never_start = True
    api.cloud.faults.list_lag_s = 1.0
    sent = {"label": "swjob:run-crashed", "image": "x", "disk": 10, "onstart": "", "env": {}}
    created = api.cloud.create(api.cloud.rentable()[0]["id"], sent)
    assert created is not None
    vast = provider(api, gpu_pool(), [])
    try:
        handle = await vast.find_node("run-crashed")
        assert handle is not None and handle.node_id == str(created.id)
        assert len(Ledger().open_entries()) == 2  # its rows open while it bills
    finally:
        await vast.destroy(str(created.id))
