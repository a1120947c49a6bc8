"""The instance ledger (ledger.sqlite) write-locked by another process while a run rents.

The ledger is what lets teardown and cost hold across processes: every rental is
recorded before its create call. When another process holds the ledger's write lock (a
second swjob mid-write, a user's sqlite3 shell, a backup), the intent cannot be recorded:
the run must fail saying so, having created nothing. When the lock comes between the
intent and the create's answer, the instance exists though the ledger lacks its id: it
must still be torn down with its run, never left billing.
"""

from __future__ import annotations

import asyncio

import pytest

from engine.engine import Engine
from engine.report import events as ev
from engine.state import ledger
from engine.state.ledger import Ledger
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.sqlitelock import locked
from tests.support.tap import Tap
from tests.support.vast import gpu_pool
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
async def engine(
    api: StandIn, make_engine: EngineFactory, monkeypatch: pytest.MonkeyPatch
) -> Engine:
    monkeypatch.setattr(ledger, "WRITE_WAIT_S", 0.5)  # the wait is bounded; short here
    return await make_engine(gpu_pool())


async def test_no_instance_is_created_when_the_ledger_cannot_record_it(
    engine, api, make_job, record_fault
) -> None:
    path = Ledger().path
    with locked(path):
        run_id = await engine.submit(make_job(run="true"), "gpu")
        view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED"
    assert f"{path} is locked by another process" in (view.reason or ""), view.reason
    assert "no instance was created" in (view.reason or "")
    assert api.cloud.instances == {} and api.cloud.destroyed == []
    assert Ledger().open_entries() == []
    record_fault("ledger.sqlite write-locked by another process before a rental", None,
                 "run FAILED naming the file, no instance created", "nothing")  # fmt: skip


async def test_an_instance_created_while_the_ledger_is_locked_is_torn_down(
    engine, api, make_job, record_fault
) -> None:
    api.cloud.faults.create_delay_s = 1.0  # the lock comes while the create is on its way
    tap = Tap(engine)
    run_id = await engine.submit(make_job(run="true"), "gpu")
    await eventually_async(lambda: Ledger().entries_of(run_id) != [], 20, "the intent recorded")
    with locked(Ledger().path):
        view = await asyncio.wait_for(engine.wait(run_id), 40)
        assert view.state == "COMPLETED", view.reason
        assert api.cloud.instances == {} and len(api.cloud.destroyed) == 1
    tap.close()
    alerts = [e.message for _, e in tap.seen if isinstance(e, ev.Alert)]
    assert any("instance ledger not written" in a for a in alerts), alerts
    (row,) = Ledger().entries_of(run_id)
    assert row.instance_id is None  # its intent, labelled: `swjob gc` settles it
    record_fault("ledger.sqlite write-locked by another process mid-create", None,
                 "run COMPLETED, instance destroyed, alert said", "its instance id")  # fmt: skip
