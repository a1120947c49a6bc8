"""A pool's max_nodes in one engine (engine/providers/slots.py): provisioned nodes wait
for a slot in turn; adopted nodes take one at once, past the limit if need be, and the
queue waits for them too."""

from __future__ import annotations

import asyncio

import pytest

from engine.providers.slots import Slots


async def _started(task: asyncio.Task[None]) -> bool:
    for _ in range(3):
        await asyncio.sleep(0)
    return task.done()


async def test_takers_wait_in_turn_for_a_freed_slot() -> None:
    slots = Slots(1)
    await slots.take()
    second, third = asyncio.ensure_future(slots.take()), asyncio.ensure_future(slots.take())
    assert not await _started(second) and not await _started(third)
    slots.give_back()
    assert await _started(second) and not await _started(third)
    slots.give_back()
    assert await _started(third) and slots.used == 1


async def test_an_adopted_node_holds_a_slot_and_the_queue_waits_for_it() -> None:
    slots = Slots(1)
    slots.hold()  # a restarted engine adopts the pool's running node
    queued = asyncio.ensure_future(slots.take())  # and the run that was queued behind it
    assert not await _started(queued)
    slots.give_back()  # the adopted node is torn down
    assert await _started(queued) and slots.used == 1


async def test_adopted_nodes_go_past_the_limit_and_are_paid_back_first() -> None:
    slots = Slots(1)
    await slots.take()
    slots.hold()
    assert slots.used == 2
    queued = asyncio.ensure_future(slots.take())
    slots.give_back()
    assert not await _started(queued)  # one node still up: the pool is full
    slots.give_back()
    assert await _started(queued)


async def test_a_cancelled_taker_leaves_its_turn_and_no_slot_behind() -> None:
    slots = Slots(1)
    await slots.take()
    cancelled, after = asyncio.ensure_future(slots.take()), asyncio.ensure_future(slots.take())
    await asyncio.sleep(0)
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    slots.give_back()
    assert await _started(after) and slots.used == 1


async def test_a_taker_cancelled_as_it_was_handed_a_slot_passes_it_on() -> None:
    slots = Slots(1)
    await slots.take()
    handed, after = asyncio.ensure_future(slots.take()), asyncio.ensure_future(slots.take())
    await asyncio.sleep(0)
    slots.give_back()  # resolves `handed`'s turn ...
    handed.cancel()  # ... which is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await handed
    assert await _started(after) and slots.used == 1
