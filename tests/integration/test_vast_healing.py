"""Slots and the ledger heal themselves (Vast stand-in, real SDK): a dead operator's run
whose node is gone frees its slot of the pool, and a destroy that Vast kept listing after
the process confirming it ended closes its ledger row once Vast stops listing it."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path

from engine.jobs.pools import PoolSet
from engine.providers.gc import find_orphans
from engine.providers.slots import pool_slots
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.runs import unfinished_run
from tests.support.vast import bootstrap, gpu_pool, provider


async def test_a_dead_operators_run_whose_node_gave_up_frees_its_slot(
    api: StandIn, tmp_path: Path
) -> None:
    """Its operator was killed, its node destroyed itself (orphan timeout, cap): the run
    is unfinished and its slot file names it, so a max_nodes = 1 pool waited for ever,
    though Vast no longer lists the instance. Two looks that say so free the slot; the
    dead run's ledger row stays open for gc, which ends the run."""
    unfinished_run(tmp_path / "runs", "dead-run", pool="gpu")
    ledger = Ledger()
    row = ledger.record_intent("dead-run", "vastai", "swjob:x:dead-run", pool="gpu")
    ledger.record_created(row, "6999", price_per_hour=0.2)  # not listed: it destroyed itself
    pool_slots("gpu").mkdir(parents=True)
    (pool_slots("gpu") / "0").write_text("dead-run")  # as its killed process left it
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(max_nodes=1), [], boot_poll=0.05)
    handle = await asyncio.wait_for(vast.provision(bootstrap("new-run")), 20)
    assert (pool_slots("gpu") / "0").read_text() == "new-run"
    assert [e.run_id for e in ledger.open_entries()] == ["dead-run", "new-run"]
    await vast.teardown(handle)


async def test_a_live_run_of_a_dead_operator_keeps_its_slot(api: StandIn, tmp_path: Path) -> None:
    """Positive control: its instance is listed, so its node may run on: the taker waits."""
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(max_nodes=2), [])
    alive = await vast.provision(bootstrap("dead-run"))
    unfinished_run(tmp_path / "runs", "dead-run", pool="gpu")
    (pool_slots("gpu") / "0").write_text("dead-run")
    other = provider(api, gpu_pool(max_nodes=1), [], boot_poll=0.05)
    taking = asyncio.ensure_future(other.provision(bootstrap("new-run")))
    done, _ = await asyncio.wait({taking}, timeout=1.0)
    assert not done, "a slot whose run's node is listed was taken"
    taking.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await taking
    await vast.teardown(alive)


async def test_a_destroy_that_settled_after_its_process_ended_closes_its_row_unsaid(
    api: StandIn,
) -> None:
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(), [], confirm_every_s=3600)  # its process ends first
    handle = await vast.provision(bootstrap("ended"))
    api.cloud.faults.destroy_lag_s = 60
    await vast.teardown(handle)  # accepted, still listed: its row waits for confirmation
    [row] = Ledger().open_entries()
    assert row.destroy_requested_at is not None
    api.cloud.vanishing[int(handle.node_id)] = 0.0  # Vast catches up, nobody watching
    pools = PoolSet({"gpu": gpu_pool()})
    assert await find_orphans(pools, Ledger(), set()) == []  # no warning, no gc offer
    assert Ledger().open_entries() == []
