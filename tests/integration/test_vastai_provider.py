"""The Vast.ai provider against the REST stand-in, through the real `vastai` SDK."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path

import pytest

from engine.providers.agent_source import agent_bundle
from engine.providers.base import NodeHandle, ProvisionError, TeardownError
from engine.providers.vast_api import RetryPolicy
from engine.providers.vast_boot import label_for
from engine.providers.vastai import VastProvider
from engine.report import events as ev
from engine.run import recovery
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.vast import TOKEN, bootstrap, gpu_pool, provider
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(60)


def creates(api: StandIn) -> list[tuple[str, dict]]:
    return [(p, json.loads(b)) for m, p, _, b in api.requests if m == "PUT" and "/asks/" in p]


async def test_rents_the_cheapest_matching_offer_with_label_env_and_command(api) -> None:
    api.cloud.faults.never_start = True
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap("run-a"))
    # 103 ($0.22, RTX 3090, rel 0.985): 105/106 are unverified, 104 too dear.
    assert handle.provider == "vastai" and handle.price_per_hour == 0.22
    assert handle.offer["offer_id"] == 103 and handle.offer["gpu_name"] == "RTX 3090"
    assert handle.offer["geolocation"] == "Bavaria, DE" and handle.offer["reliability"] == 0.985
    [(path, body)] = creates(api)
    assert path == "/api/v0/asks/103/"
    assert body["label"] == label_for("run-a") and body["env"] == {"SWJOB_JOIN_TOKEN": TOKEN}
    assert body["image"].startswith("pytorch/pytorch") and body["disk"] == 40
    assert TOKEN not in body["onstart"] and "python3 -P -m agent --run-id run-a" in body["onstart"]
    assert "swjob==0.1.0" in body["onstart"]
    [entry] = Ledger().open_entries()
    assert (entry.run_id, entry.instance_id, entry.pool) == ("run-a", handle.node_id, "gpu")
    await vast.teardown(handle)
    assert Ledger().open_entries() == [] and api.cloud.instances == {}
    assert alerts == []


async def test_search_sends_the_pool_as_sdk_filters(api) -> None:
    api.cloud.faults.never_start = True
    pool = gpu_pool(
        resources={
            "gpu_count": 1,
            "gpu_memory_mb": 24000,
            "accelerator_kind": "RTX_4090",
            "cpu_cores": 8,
            "memory_mb": 32000,
            "disk_mb": 40000,
        },
        selection={"max_price_per_hour": 0.6, "reliability_min": 0.98, "order": "reliability"},
    )
    vast = provider(api, pool, [])
    handle = await vast.provision(bootstrap())
    assert handle.offer["offer_id"] == 101  # the most reliable 4090 (0.995 > 0.990)
    search = json.loads(next(b for m, p, _, b in api.requests if p == "/api/v0/bundles/"))
    assert search["gpu_ram"] == {"gte": 24000.0} and search["cpu_ram"] == {"gte": 32000.0}
    assert search["gpu_name"] == {"eq": "RTX 4090"} and search["verified"] == {"eq": True}
    assert search["order"] == [["reliability", "desc"]] and search["allocated_storage"] == 40
    await vast.teardown(handle)


@pytest.mark.parametrize(
    ("overrides", "named"),
    [
        ({"resources": {"gpu_count": 1, "gpu_memory_mb": 96000}}, "gpu_memory_mb"),
        ({"selection": {"max_price_per_hour": 0.1}}, "max_price_per_hour"),
        ({"resources": {"gpu_count": 8}}, "gpu_count"),
        ({"selection": {"reliability_min": 0.9999}}, "reliability_min"),
    ],
)
async def test_no_matching_offer_names_the_requirement(api, overrides, named) -> None:
    vast = provider(api, gpu_pool(**overrides), [])
    with pytest.raises(ProvisionError, match=named) as failure:
        await vast.provision(bootstrap())
    assert "gpu" in str(failure.value)  # the pool's name
    assert creates(api) == [] and Ledger().open_entries() == []


async def test_two_requirements_that_only_fail_together_are_both_named(api) -> None:
    pool = gpu_pool(
        resources={"gpu_count": 1, "accelerator_kind": "A100_SXM4"},
        selection={"max_price_per_hour": 0.5},
    )
    with pytest.raises(ProvisionError) as failure:
        await provider(api, pool, []).provision(bootstrap())
    assert "accelerator_kind" in str(failure.value)
    assert "max_price_per_hour" in str(failure.value)


async def test_offer_rented_away_at_create_moves_to_the_next(api) -> None:
    api.cloud.faults.never_start = True
    api.cloud.faults.vanish_at_create = {103}
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap())
    assert handle.offer["offer_id"] == 102 and handle.price_per_hour == 0.35
    assert [p for p, _ in creates(api)] == ["/api/v0/asks/103/", "/api/v0/asks/102/"]
    assert any("103" in a and "rented away" in a for a in alerts)
    [entry] = Ledger().open_entries()  # the failed intent was closed
    assert entry.instance_id == handle.node_id
    await vast.teardown(handle)


async def test_every_offer_gone_fails_provisioning(api) -> None:
    api.cloud.faults.vanish_at_create = {101, 102, 103}
    with pytest.raises(ProvisionError, match="rented away"):
        await provider(api, gpu_pool(), []).provision(bootstrap())
    assert Ledger().open_entries() == []


async def test_bursts_of_5xx_and_429_are_retried_and_reported(api) -> None:
    api.cloud.faults.never_start = True
    api.cloud.faults.fail_next = 2
    api.cloud.faults.rate_limit_next = 1
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap())
    assert handle.offer["offer_id"] == 103
    assert sum("HTTP 500" in a for a in alerts) == 2 and sum("HTTP 429" in a for a in alerts) == 1
    assert all("retry" in a for a in alerts)
    await vast.teardown(handle)


async def test_a_burst_longer_than_the_retries_fails_with_one_line(api) -> None:
    api.cloud.faults.fail_next = 50
    api.cloud.faults.fail_status = 503
    with pytest.raises(ProvisionError, match="HTTP 503") as failure:
        await provider(api, gpu_pool(), []).provision(bootstrap())
    assert "\n" not in str(failure.value)


async def test_a_lost_create_answer_adopts_the_instance_instead_of_renting_twice(api) -> None:
    api.cloud.faults.never_start = True
    api.cloud.faults.lose_create_answers = 1
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap("run-lost"))
    assert list(api.cloud.instances) == [int(handle.node_id)]
    assert len(creates(api)) == 1 and any("HTTP 502" in a for a in alerts)
    await vast.teardown(handle)
    assert Ledger().open_entries() == []


async def test_destroy_that_fails_once_is_retried_and_verified(api) -> None:
    api.cloud.faults.never_start = True
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap())
    api.cloud.faults.destroy_failures = 1
    await vast.teardown(handle)
    assert api.cloud.instances == {} and int(handle.node_id) in api.cloud.destroyed
    assert len(alerts) == 1 and "HTTP 500" in alerts[0]
    assert Ledger().open_entries() == []


async def test_destroy_that_never_succeeds_raises_loudly_and_keeps_the_ledger_row(api) -> None:
    api.cloud.faults.never_start = True
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap())
    api.cloud.faults.destroy_never = True
    with pytest.raises(TeardownError) as failure:
        await vast.teardown(handle)
    assert handle.node_id in str(failure.value) and "swjob gc" in str(failure.value)
    assert not any("billing" in a for a in alerts)  # the error says it, once: not an alert too
    [entry] = Ledger().open_entries()
    assert entry.instance_id == handle.node_id
    api.cloud.faults.destroy_never = False
    await vast.teardown(handle)  # a later teardown (or gc) still works
    assert Ledger().open_entries() == []


async def test_teardown_of_an_already_destroyed_instance_is_fine(api) -> None:
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(), [])
    handle = await vast.provision(bootstrap())
    api.cloud.destroy(int(handle.node_id))
    await vast.teardown(handle)
    await vast.teardown(handle)
    assert Ledger().open_entries() == []


async def test_cancelled_while_creating_destroys_what_was_created(api) -> None:
    api.cloud.faults.never_start = True
    api.cloud.faults.create_delay_s = 0.5
    vast = provider(api, gpu_pool(max_nodes=1), [])
    task = asyncio.create_task(vast.provision(bootstrap()))
    await eventually_async(lambda: creates(api), 30, "a create sent")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert Ledger().open_entries() == []
    api.cloud.faults.create_delay_s = 0
    handle = await asyncio.wait_for(vast.provision(bootstrap()), 30)  # the slot was freed
    await vast.teardown(handle)


async def test_node_exited_resolves_when_the_instance_dies_underneath(api) -> None:
    vast = provider(api, gpu_pool(node_lost_after_s=0.5), [], poll_s=0.05)
    handle = await vast.provision(bootstrap())
    watch = asyncio.create_task(vast.node_exited(handle))
    seen = len(api.requests)

    def polls() -> int:
        return sum(handle.node_id in path for _, path, _, _ in api.requests[seen:])

    await eventually_async(lambda: polls() >= 2, 30, "two polls of the instance")
    assert not watch.done()  # polled twice, the instance alive: no exit reported
    api.cloud.crash(int(handle.node_id))
    said = await asyncio.wait_for(watch, 30)
    assert handle.node_id in said.reason and "exited" in said.reason and not said.gone
    await vast.teardown(handle)


async def test_the_boot_command_starts_the_agent_without_the_token_in_argv(api) -> None:
    vast = provider(api, gpu_pool(), [])
    handle = await vast.provision(bootstrap("run-boot"))
    log = api.cloud.instances[int(handle.node_id)].root / "root/swjob/agent.log"
    # the agent keeps redialing a bogus ticket: wait for its first failed join
    await eventually_async(lambda: log.exists() and "join failed" in log.read_text(), 15)
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            assert TOKEN.encode() not in cmdline.read_bytes()
        except OSError:
            continue
    await vast.teardown(handle)
    assert not log.exists()


async def test_missing_api_key_is_a_provision_error(api, monkeypatch) -> None:
    monkeypatch.delenv("VAST_API_KEY")
    monkeypatch.setenv("HOME", str(api.cloud.root))  # no SDK key file either
    monkeypatch.setenv("XDG_CONFIG_HOME", str(api.cloud.root))
    with pytest.raises(ProvisionError, match="API key"):
        await provider(api, gpu_pool(), []).provision(bootstrap())


async def test_pool_api_key_env_is_used_and_a_wrong_key_is_refused(api, monkeypatch) -> None:
    monkeypatch.setenv("MY_VAST_KEY", api.api_key)
    monkeypatch.setenv("VAST_API_KEY", "wrong-key-0000")
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(api_key_env="MY_VAST_KEY"), [])
    handle = await vast.provision(bootstrap())
    await vast.teardown(handle)
    with pytest.raises(ProvisionError, match="HTTP 401") as refused:
        await provider(api, gpu_pool(), []).provision(bootstrap())
    assert "wrong-key" not in str(refused.value)


async def test_the_api_key_is_nowhere_in_alerts_errors_ledger_or_output(api, capfd) -> None:
    api.cloud.faults.fail_next = 2
    alerts: list[str] = []
    vast = provider(api, gpu_pool(), alerts)
    handle = await vast.provision(bootstrap())
    api.cloud.faults.destroy_never = True
    with pytest.raises(TeardownError) as failure:
        await vast.teardown(handle)
    api.cloud.faults.destroy_never = False
    await vast.teardown(handle)
    out, err = capfd.readouterr()
    ledger_bytes = b"".join(p.read_bytes() for p in Ledger().path.parent.glob("ledger*"))
    assert sum("search offers: HTTP 500" in a for a in alerts) == 2  # the retries were told
    for text in [*alerts, str(failure.value), out, err]:
        assert api.api_key not in text
    assert api.api_key.encode() not in ledger_bytes
    assert all(api.api_key not in path for _, path, _, _ in api.requests)  # never in a URL


async def test_handle_facts_survive_a_fresh_provider_for_teardown(api) -> None:
    api.cloud.faults.never_start = True
    handle = await provider(api, gpu_pool(), []).provision(bootstrap())
    await provider(api, gpu_pool(), []).teardown(NodeHandle("vastai", handle.node_id))
    assert api.cloud.instances == {}


async def test_without_agent_install_the_node_is_told_to_fetch_this_builds_agent(api) -> None:
    """This checkout is a local directory install: with no `agent_install` the on-start
    installs only the agent's closure and fetches the operator's own agent code, named by
    its SHA-256 (tests/integration/test_vastai_agent_code.py runs it)."""
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(agent_install=None), [])
    handle = await vast.provision(bootstrap())
    onstart = next(iter(api.cloud.instances.values())).request["onstart"]
    assert agent_bundle()[1] in onstart and "zlib.decompress" in onstart
    assert "swjob" not in onstart.split("--no-deps", 1)[1].split(";", 1)[0]
    await vast.teardown(handle)


async def test_a_node_may_exist_for_a_run_once_its_intent_is_in_the_ledger(api) -> None:
    """What an adopter asks of a run it finds PENDING without a node: one still queued for a
    slot has no ledger row, so no instance was ever asked for it; any row, open or closed,
    says one was (it must not be rented twice)."""
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(), [])
    assert not await vast.may_have_node("run-1")
    handle = await vast.provision(bootstrap("run-1"))
    assert await vast.may_have_node("run-1") and not await vast.may_have_node("run-2")
    await vast.teardown(handle)
    assert await vast.may_have_node("run-1")  # its row is closed: asked for all the same


async def test_an_unreadable_ledger_cannot_say_that_no_node_was_asked_for(api) -> None:
    vast = provider(api, gpu_pool(), [])
    path = Ledger().path
    for stale in path.parent.glob(path.name + "*"):
        stale.unlink()
    path.write_bytes(b"not a database, " * 512)
    assert await vast.may_have_node("run-1")


async def test_an_adopted_instance_holds_its_pool_slot_until_it_is_destroyed(api) -> None:
    """A restarted engine adopts the running instance of a one-node pool: a run queued
    there rents its instance only once the adopted one is destroyed."""
    api.cloud.faults.never_start = True
    first = await provider(api, gpu_pool(max_nodes=1), []).provision(bootstrap("run-1"))
    vast = provider(api, gpu_pool(max_nodes=1), [])  # the restarted engine's
    vast.adopt(NodeHandle("vastai", first.node_id))
    queued = asyncio.ensure_future(vast.provision(bootstrap("run-2")))
    await asyncio.sleep(0.5)
    assert not queued.done() and len(api.cloud.instances) == 1
    await vast.teardown(NodeHandle("vastai", first.node_id))
    second = await asyncio.wait_for(queued, 30)
    assert len(api.cloud.instances) == 1  # the adopted one is gone, the new one is up
    await vast.teardown(second)
    assert api.cloud.instances == {} and Ledger().open_entries() == []


@pytest.mark.parametrize("list_lag_s", [0.0, 1.0])
async def test_a_retry_refused_because_our_lost_create_rented_the_offer_adopts_that_instance(
    api, list_lag_s
) -> None:
    """The first create is still in flight when its answer is lost (a client timeout): the
    look for its instance finds none, and the retry goes out. Vast then answers the first
    (it rents the offer: our instance) and refuses the retry `no_such_ask`. That instance is
    ours: it is adopted, not left billing while the next offer is rented — also when Vast
    lists it only a while after (its listing is eventually consistent)."""
    api.cloud.faults.never_start = True
    api.cloud.faults.list_lag_s = list_lag_s
    first, retry = threading.Event(), threading.Event()
    api.cloud.faults.create_gates = [first, retry]
    policy = RetryPolicy(attempts=4, base_s=0.01, max_s=0.05, timeout_s=2.0)
    vast = VastProvider(gpu_pool(), Ledger(), server_url=api.url, retry=policy)

    def puts() -> list[str]:
        return [p for m, p, *_ in api.requests if m == "PUT" and "/asks/" in p]

    creating = asyncio.create_task(vast.provision(bootstrap()))
    try:
        await eventually_async(lambda: len(puts()) == 2, 30, "the create retried")
        first.set()  # Vast answers the first create now: its client has given up on it
        await eventually_async(lambda: len(api.cloud.instances) == 1, 30, "the instance made")
    finally:
        first.set()
        retry.set()  # the retry goes on: the offer is rented, so no_such_ask
    handle = await asyncio.wait_for(creating, 30)
    [instance] = api.cloud.instances
    assert handle.node_id == str(instance), "the instance our lost create made is adopted"
    assert len(puts()) == 2, "no other offer was rented"
    await vast.teardown(handle)
    assert Ledger().open_entries() == []


async def test_a_run_that_fell_over_and_waits_for_a_slot_is_still_queued(api) -> None:
    """It left a Vast.ai pool (its node asked for and destroyed there, its boot steps on
    record) and waits for a slot of the pool it moved to: an adopter may provision it
    there from the start. Any trace on the pool it is on keeps it off that path."""
    ledger = Ledger()
    entry = ledger.record_intent("run-1", "vastai", label_for("run-1"), pool="left")
    ledger.record_destroyed(entry)
    vast = provider(api, gpu_pool("gpu"), [])
    assert not await vast.may_have_node("run-1")
    now = ev.utcnow()
    waiting = ev.Transition(
        run_id="run-1", cause="submit", from_state=None, to_state="PENDING",
        from_phase="provisioning", to_phase="provisioning",
    )  # fmt: skip
    left = [
        waiting,
        ev.Boot(run_id="run-1", phase=ev.BootPhase.SLOT_TAKEN, at=now),
        ev.PoolPassed(run_id="run-1", pool="left", reason="no offer", next_pool="gpu"),
    ]
    assert await recovery.still_queued(vast, "run-1", left)
    slot = ev.Boot(run_id="run-1", phase=ev.BootPhase.SLOT_TAKEN, at=now)
    assert not await recovery.still_queued(vast, "run-1", [*left, slot])
    ledger.record_intent("run-1", "vastai", label_for("run-1"), pool="gpu")
    assert not await recovery.still_queued(vast, "run-1", left)
