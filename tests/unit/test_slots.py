"""A pool's max_nodes (engine/providers/slots.py): provisioned nodes wait for a slot in
turn; adopted nodes take one at once, past the limit if need be, and the queue waits for
them too; a slot a dead operator's unfinished run names stays taken."""

from __future__ import annotations

import asyncio
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from engine.providers import slots
from engine.providers.slots import Slots, pool_slots
from engine.report.views import RunView
from engine.state import ownership, spill, store
from engine.state.locked import StateNotWritten
from engine.state.planted import Planted
from engine.state.store import Store
from tests.support.sqlitelock import locked
from tests.support.waiting import eventually_async

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


def _view(run_id: str, state: str, finished: datetime | None, updated: datetime = AT) -> RunView:
    return RunView(
        run_id=run_id, job_name="j", pool="p", state=state, phase="run", created=AT,
        updated=updated, finished=finished, run_dir=Path("/runs/j") / run_id,
    )  # fmt: skip


def _indexed(run_id: str, state: str, finished: datetime | None, updated: datetime = AT) -> None:
    index = Store()
    index.save(_view(run_id, state, finished, updated))
    index.close()


def _kept_as_the_index_was_held(run_id: str) -> Path:
    """The run's row as an engine leaves it that closed (`l` at the console's quit: the
    run left running) while another process held the index: kept beside it, not in it."""
    ours = Store()
    with locked(ours.path):
        with pytest.raises(StateNotWritten):
            ours.save(_view(run_id, "RUNNING", None))
        ours.keep_unwritten()
    ours.close()
    assert spill.kept(ours.path) == [run_id]
    return ours.path


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


async def test_a_slot_naming_a_run_known_only_by_its_kept_row_stays_taken(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its process quit leaving it running while another process held the index: its row
    never got in, and the slot read free — a second node was started beside the live one."""
    monkeypatch.setattr(store, "WRITE_WAIT_S", 0.05)  # a held lock fails a save at once
    index = _kept_as_the_index_was_held("left-run")
    _left_by_a_dead_operator("p", 0, "left-run")
    said: list[str] = []
    taker = Slots(1, "p")
    with locked(index):  # still held: the row is known by its file alone
        waiting = asyncio.ensure_future(taker.take("new-run", said.append))
        await asyncio.sleep(0.1)
        assert not waiting.done(), "a second node beside the left run's"
        assert said and "by a run whose swjob process died (left-run)" in said[0], said
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting


async def test_a_slot_naming_a_run_whose_kept_row_the_index_has_overtaken_is_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Its kept row is stale: an adopter carried the run to its end, which the index holds."""
    monkeypatch.setattr(store, "WRITE_WAIT_S", 0.05)
    index = _kept_as_the_index_was_held("left-run")
    adopter = ownership.acquire("left-run")  # its lease: the file is not written in under it
    assert adopter is not None
    _indexed("left-run", "COMPLETED", AT.replace(hour=9), AT.replace(hour=9))
    adopter.release(finished=True)
    assert spill.kept(index) == ["left-run"]
    _left_by_a_dead_operator("p", 0, "left-run")
    taker = Slots(1, "p")
    await asyncio.wait_for(taker.take("new-run"), 1)
    taker.give_back("new-run")


async def test_a_limit_lowered_while_nodes_run_counts_the_nodes_past_it() -> None:
    """Two `swjob run`s on a pool of max_nodes = 2 hold slot files 0 and 1; the user lowers
    max_nodes to 1 and starts a third: it looked at file 0 only, so once the first node
    was gone it rented one beside the second — two nodes on a pool of one."""
    first, second = Slots(2, "p"), Slots(2, "p")  # other processes' engines, here in this one
    await first.take("run-1")
    await second.take("run-2")
    first.give_back("run-1")
    lowered = Slots(1, "p")
    said: list[str] = []
    waiting = asyncio.ensure_future(lowered.take("run-3", said.append))
    await eventually_async(lambda: said or waiting.done(), 5, "its first look")
    assert not waiting.done(), "a node was rented past the lowered max_nodes"
    assert said and "all 1 of its nodes (max_nodes) are held by other swjob processes" in said[0]
    second.give_back("run-2")
    await asyncio.wait_for(waiting, 5)
    lowered.give_back("run-3")


async def test_a_slot_file_refused_as_planted_leaves_no_other_slot_locked() -> None:
    """Slot 0 free, slot 1 a fifo some program left: the take fails naming the fifo, and
    slot 0, locked while the files were looked over, is not left locked by this process
    (every other swjob would wait for it until this one exits). A file past the limit
    makes the take look at every file, not stop at the first free one."""
    where = pool_slots("p")
    where.mkdir(parents=True)
    os.mkfifo(where / "1")
    (where / "3").touch()
    with pytest.raises(Planted, match="1: a fifo"):
        await Slots(2, "p").take("run-1")
    (where / "1").unlink()
    other = Slots(1, "p")
    await asyncio.wait_for(other.take("run-2"), 1)
    other.give_back("run-2")


async def test_each_take_opens_one_slot_file_not_every_one(monkeypatch) -> None:
    """The files this process holds count as taken unopened, and the first free file is
    taken at once: 50 takes open 50 files (they opened 1,275 when each look opened every
    file from the first)."""
    opened: list[Path] = []
    real = slots._locked
    monkeypatch.setattr(slots, "_locked", lambda path: opened.append(path) or real(path))
    pool = Slots(50, "p")
    for i in range(50):
        await asyncio.wait_for(pool.take(f"run-{i}"), 5)
    assert len(opened) == 50 and len(set(opened)) == 50
    for i in range(50):
        pool.give_back(f"run-{i}")
