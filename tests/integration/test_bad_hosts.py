"""Bad-host memory on the Vast stand-in through the real SDK: a host whose node never
joined is remembered in the state dir, left out when the pool picks its next offer, marked
by `swjob offers`, listed by `swjob hosts` and rented again once forgotten."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from engine.cli import hosts
from engine.ops.offers import list_offers
from engine.state import badhosts
from tests.standin.server import StandIn
from tests.support.cli import swjob
from tests.support.engines import EngineFactory
from tests.support.vast import gpu_pool, provider
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)


async def test_a_host_that_never_joined_is_skipped_until_forgotten(
    api: StandIn, make_engine: EngineFactory, make_job, tmp_path: Path
) -> None:
    pool = gpu_pool(boot_timeout_s=1.5)
    engine = await make_engine(pool)
    first = (await list_offers(pool))[0]  # the offer a run takes
    machine = str(api.cloud.offers[first.offer_id]["machine_id"])
    api.cloud.faults.never_start = True
    run_id = await engine.submit(make_job(run="true"), "gpu")
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and (view.reason or "").startswith("boot timeout"), view
    await eventually_async(lambda: badhosts.machines("vastai"), what="the host remembered")
    [host] = badhosts.listed()
    assert (host.machine_id, host.provider) == (machine, "vastai")
    assert host.reason == view.reason and 71.9 * 3600 < host.until - host.at <= 72 * 3600

    after = await list_offers(pool)
    assert [o.offer_id for o in after if o.bad_host] == [first.offer_id]
    [chosen] = [o for o in after if o.chosen]
    taken = (await provider(api, pool, []).search())[0]  # what the next run rents
    assert chosen.offer_id == taken["id"] != first.offer_id
    listed = swjob("hosts", cwd=tmp_path)
    assert f"vastai machine {machine}: boot timeout" in listed.stdout, listed

    forget = argparse.Namespace(verb="forget", machine=machine, all=False)
    assert hosts.main(forget) == 0 and badhosts.listed() == []
    again = await list_offers(pool)
    assert again[0].chosen and again[0].offer_id == first.offer_id
