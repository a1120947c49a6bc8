"""A pool's max_nodes (engine/providers/slots.py): provisioned nodes wait for a slot in
turn; adopted nodes take one at once, past the limit if need be, and the queue waits for
them too; a slot a dead operator's unfinished run names stays taken."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.providers.slots import Slots, pool_slots
from engine.report.views import RunView
from engine.state.store import Store

AT = datetime(2026, 12, 4, 8, 0, tzinfo=UTC)


async def _started(task: asyncio.Task[None]) -> bool:
    for _ in range(3):
        await asyncio.sleep(0)
    return task.done()


async def test_takers_wait_in_turn_for_a_freed_slot() -> None:
    slots = Slots(1)
    await slots.take("r1")
    second, third = asyncio.ensure_future(slots.take("r2")), asyncio.ensure_future(slots.take("r3"))
    assert not await _started(second) and not await _started(third)
    slots.give_back("r1")
    assert await _started(second) and not await _started(third)
    slots.give_back("r2")
    assert await _started(third) and slots.used == 1


async def test_an_adopted_node_holds_a_slot_and_the_queue_waits_for_it() -> None:
    slots = Slots(1)
    slots.hold("adopted")  # a restarted engine adopts the pool's running node
    queued = asyncio.ensure_future(slots.take("queued"))  # and the run that was queued behind it
    assert not await _started(queued)
    slots.give_back("adopted")  # the adopted node is torn down
    assert await _started(queued) and slots.used == 1


async def test_adopted_nodes_go_past_the_limit_and_are_paid_back_first() -> None:
    slots = Slots(1)
    await slots.take("r1")
    slots.hold("adopted")
    assert slots.used == 2
    queued = asyncio.ensure_future(slots.take("queued"))
    slots.give_back("adopted")
    assert not await _started(queued)  # one node still up: the pool is full
    slots.give_back("r1")
    assert await _started(queued)


async def test_a_cancelled_taker_leaves_its_turn_and_no_slot_behind() -> None:
    slots = Slots(1)
    await slots.take("r1")
    cancelled, after = (
        asyncio.ensure_future(slots.take("r2")),
        asyncio.ensure_future(slots.take("r3")),
    )
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    slots.give_back("r1")
    assert await _started(after) and slots.used == 1


async def test_a_taker_cancelled_as_it_was_handed_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    await slots.take("r1")
    handed, after = asyncio.ensure_future(slots.take("r2")), asyncio.ensure_future(slots.take("r3"))
    await asyncio.sleep(0)
    slots.give_back("r1")  # resolves `handed`'s turn ...
    handed.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert await _started(after) and slots.used == 1


def _left_by_a_dead_operator(pool: str, index: int, run_id: str) -> None:
    """A slot file as a killed process leaves it: naming its run, locked by nobody."""
    folder = pool_slots(pool)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / str(index)).write_text(run_id)


def _indexed(run_id: str, state: str, finished: datetime | None) -> None:
    store = Store()
    store.save(
        RunView(
            run_id=run_id,
            job_name="j",
            pool="p",
            state=state,
            phase="run",
            created=AT,
            updated=AT,
            finished=finished,
            run_dir=Path("/runs/j") / run_id,
        )
    )
    store.close()


async def test_a_slot_a_dead_operators_unfinished_run_names_stays_taken() -> None:
    """Its node may run on: a taker waits, says which run holds it and what ends that, and
    gets the slot once the run's adopter has torn its node down."""
    _indexed("dead-run", "RUNNING", None)
    _left_by_a_dead_operator("p", 0, "dead-run")
    said: list[str] = []
    taker = Slots(1, "p")
    waiting = asyncio.ensure_future(taker.take("new-run", said.append))
    await asyncio.sleep(0.1)
    assert not waiting.done()
    assert said and "by a run whose swjob process died (dead-run)" in said[0], said
    adopter = Slots(1, "p")  # another process's engine, in this test the same process
    adopter.hold("dead-run")  # takes back the very file that names the run
    adopter.give_back("dead-run")  # its node torn down: the file names no run
    await asyncio.wait_for(waiting, 5)
    assert (pool_slots("p") / "0").read_text() == "new-run"
    taker.give_back("new-run")


async def test_a_slot_naming_a_run_that_has_ended_is_free() -> None:
    """A run settled since its operator died (by `swjob gc`, say): its node is gone."""
    _indexed("ended-run", "FAILED", AT)
    _left_by_a_dead_operator("p", 0, "ended-run")
    taker = Slots(1, "p")
    await asyncio.wait_for(taker.take("new-run"), 1)
    taker.give_back("new-run")
