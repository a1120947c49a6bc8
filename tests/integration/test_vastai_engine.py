"""Whole jobs on a `vastai` pool: the real Engine (and `swjob run`), the real SDK against
the stand-in, and a real agent started by the instance's own on-start command, joining
over iroh."""

from __future__ import annotations

import asyncio
import fcntl
import json
import re

import pytest

from engine.engine import Engine
from engine.providers.slots import pool_slots
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.cli import swjob
from tests.support.engines import EngineFactory
from tests.support.vast import POOLS_FILE, gpu_pool

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def engine(api: StandIn, make_engine: EngineFactory) -> Engine:
    uncapped = gpu_pool("uncapped", selection={"reliability_min": 0.98})  # no price cap
    return await make_engine(gpu_pool(), gpu_pool("slow", boot_timeout_s=2.0), uncapped)


async def test_a_job_runs_end_to_end_on_a_rented_instance(engine, api, make_job, capfd) -> None:
    api.cloud.faults.boot_delay_s = 0.5  # a slow boot, well within the pool's deadline
    secret = "hf-secret-value-123"
    job = make_job(
        files={"data/in.txt": "42\n"},
        setup="echo preparing",
        run="cp data/in.txt result.txt && echo token=$HF_TOKEN ck=$CONTAINER_API_KEY",
        workspace={"workdir": "."},
        outputs=["result.txt"],
        env={"HF_TOKEN": secret},
    )
    run_id = await engine.submit(job, "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs/result.txt").read_text() == "42\n"
    assert view.node is not None and view.node.provider == "vastai"
    assert view.node.price_per_hour == 0.22 and view.node.offer["gpu_name"] == "RTX 3090"
    summary = json.loads((view.run_dir / "run.json").read_text())
    assert summary["node"]["offer"]["offer_id"] == 103
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert Ledger().open_entries() == []
    out, err = capfd.readouterr()
    written = "".join(p.read_text(errors="replace") for p in view.run_dir.rglob("*") if p.is_file())
    for text in (written, out, err):
        assert api.api_key not in text
    assert secret not in written
    # the job's secret was printed (masked); the container's own Vast key (it acts on this
    # instance, destroy included), which Vast puts in the container's environment, is kept
    # out of the job's (agent/credentials.py)
    assert "token=*** ck=\n" in (view.run_dir / "logs" / "run.log").read_text()
    assert re.search(r"ck-[0-9a-f]{32}", written) is None


async def test_an_instance_that_never_boots_fails_the_run_and_is_destroyed(
    engine, api, make_job
) -> None:
    api.cloud.faults.never_start = True
    run_id = await engine.submit(make_job(run="true"), "slow")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and "2" in (view.reason or "")
    assert "is loading" in (view.reason or "")  # what Vast lists of it, in the reason
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert Ledger().open_entries() == []


async def test_no_offer_fails_the_run_naming_the_requirement(engine, api, make_job) -> None:
    for offer in api.cloud.offers.values():
        offer["reliability"] = 0.9
    run_id = await engine.submit(make_job(run="true"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and "reliability_min" in (view.reason or "")
    assert api.cloud.destroyed == []


async def test_a_teardown_never_confirmed_leaves_the_node_unconfirmed_not_gone(
    engine, api, make_job, monkeypatch
) -> None:
    """Every destroy is refused: the run ends with a persistent 'may still be billing' alert
    and the node's state is 'unconfirmed' (still on the board), never 'gone'."""
    from engine.providers import vastai
    from tests.support.vast import FAST

    monkeypatch.setattr(vastai, "RetryPolicy", lambda: FAST)  # quick retries, same logic
    api.cloud.faults.destroy_never = True
    run_id = await engine.submit(make_job(run="true"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED" and view.node is not None
    assert view.node.state == "unconfirmed"
    assert view.alerts and "may still be billing" in view.alerts[0]
    assert [p.nodes for p in engine.pools() if p.name == "gpu"] == [[view.node]]
    [row] = Ledger().open_entries()
    assert row.instance_id == view.node.node_id
    api.cloud.faults.destroy_never = False
    api.cloud.destroy(int(view.node.node_id))  # the test's own cleanup, as gc would


async def test_an_image_vast_cannot_pull_fails_the_run_with_dockers_words_at_once(
    engine, api, make_job, monkeypatch
) -> None:
    """Vast leaves the instance loading with docker's error as its status_msg: the run
    fails with it at the next poll, not after the pool's 60 s boot deadline as a bare
    'did not join', and the instance is destroyed."""
    monkeypatch.setenv("SWJOB_VAST_BOOT_POLL_S", "0.1")
    denied = (
        "Error response from daemon: pull access denied for nosuch/image, repository does "
        "not exist or may require 'docker login'"
    )
    api.cloud.faults.pull_error = denied
    run_id = await engine.submit(make_job(run="true"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 20)
    assert view.state == "FAILED" and denied in (view.reason or ""), view.reason
    assert "could not start its image" in (view.reason or ""), view.reason
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert Ledger().open_entries() == []


def test_swjob_run_says_why_an_image_vast_cannot_pull_failed(api, tmp_path, monkeypatch) -> None:
    """The same through `swjob run`: its FAILED line carries docker's words, no traceback,
    exit code 1, and the instance is gone."""
    monkeypatch.setenv("SWJOB_VAST_BOOT_POLL_S", "0.1")
    api.cloud.faults.pull_error = "Error response from daemon: manifest for img:latest not found"
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    (tmp_path / "job.toml").write_text('[job]\nname = "hi"\nrun = "echo hi"\n')
    done = swjob("run", "job.toml", "--pool", "gpu", "--pools", "pools.toml", cwd=tmp_path)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "could not start its image: Error response from daemon: manifest for" in out, out
    assert "Traceback" not in out and api.cloud.instances == {}, out


async def test_an_image_without_python_fails_the_boot_saying_why_the_agent_never_joined(
    engine, api, make_job
) -> None:
    """A bare image (no python3, no pip, no uv): the container runs, the on-start cannot
    install the agent. The boot timeout's reason says the instance runs but its agent never
    joined, what the on-start needs, and where its log is — not only 'did not join'."""
    api.cloud.faults.boot_delay_s = 0.0
    api.cloud.image_has_python = False
    api.cloud.image_has_uv = False
    run_id = await engine.submit(make_job(run="true"), "slow")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    reason = view.reason or ""
    assert view.state == "FAILED" and "did not join within 2 s" in reason, reason
    assert "runs, but its agent never joined" in reason, reason
    assert "python3 (>=3.11, with pip or uv)" in reason, reason
    assert "swjob/agent.log" in reason, reason
    assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    assert Ledger().open_entries() == []


async def test_a_job_runs_when_vast_lists_price_gpu_and_ssh_as_null(engine, api, make_job) -> None:
    """Vast may list an offer's and an instance's dph_total, gpu_name, place, ssh and ports
    as null: the job still runs, its node's price is unknown (not $0), and it is torn down."""
    for offer in api.cloud.offers.values():
        offer.update(dph_total=None, gpu_name=None, geolocation=None)
    api.cloud.faults.null_listing = True
    job = make_job(run="echo ran > out.txt", outputs=["out.txt"])
    run_id = await engine.submit(job, "uncapped")  # a price cap would filter them out
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.state == "COMPLETED", view.reason
    assert (view.run_dir / "outputs/out.txt").read_text() == "ran\n"
    assert view.node is not None and view.node.price_per_hour is None
    summary = json.loads((view.run_dir / "run.json").read_text())
    assert summary["node"]["offer"]["gpu_name"] is None and summary["node"]["offer"]["dph"] is None
    assert api.cloud.instances == {} and Ledger().open_entries() == []


async def test_a_node_left_unconfirmed_then_collected_settles_its_runs_alert(
    engine, api, make_job, monkeypatch
) -> None:
    """The teardown could not confirm the node gone; then `x` on the board (or `swjob gc`)
    destroyed it. The run's "may still be billing: run `swjob gc`" alert stayed in the
    board's red banner, in `swjob runs` and run.json for good, in this console and every
    later one: now its node is gone and the alert settled (kept in run.json's history)."""
    from engine.providers import vastai
    from engine.state.store import Store
    from tests.support.vast import FAST

    monkeypatch.setattr(vastai, "RetryPolicy", lambda: FAST)
    api.cloud.faults.destroy_never = True
    run_id = await engine.submit(make_job(run="true"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 60)
    assert view.node is not None and view.node.state == "unconfirmed" and view.alerts
    api.cloud.faults.destroy_never = False
    orphans = await engine.orphans()
    assert [o.instance_id for o in orphans] == [view.node.node_id]
    done = await engine.collect_orphans(orphans)
    assert done.destroyed == 1 and not done.problems, done.report()
    assert api.cloud.instances == {}
    for after in (engine.run(run_id), Store().find(run_id)):  # this console, the next one
        assert after is not None and after.node is not None
        assert after.alerts == [] and after.node.state == "gone", after
        assert "may still be billing" in after.all_alerts[0]
    summary = json.loads((view.run_dir / "run.json").read_text())
    assert summary["persistent_alerts"] == [] and summary["node"]["state"] == "gone"
    assert "may still be billing" in summary["alerts"][0] and summary["state"] == "COMPLETED"
    # and its slot of the pool is free, for every swjob process waiting on the pool
    slots = list(pool_slots("gpu").iterdir())
    assert slots and all(path.read_text() == "" for path in slots), slots
    for path in slots:
        with path.open("rb") as slot:
            fcntl.flock(slot, fcntl.LOCK_EX | fcntl.LOCK_NB)  # not held
