"""The agent's bounded cancel: a task deaf to its cancel must not keep the node alive.

On the way to giving up (orphaned) or after a lost session, the agent cancels its
tasks; one stuck in a call that ignores the cancel would otherwise hold the node, and
its bill, forever (agent/node.py `cancel_within`)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time

import pytest

from agent.node import cancel_within


async def _deaf() -> None:
    """Ignores its first cancel, as an FFI call that does not hear it would."""
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.sleep(60)
    await asyncio.sleep(60)


async def _failing() -> None:
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        raise RuntimeError("failed while being cancelled") from None


async def test_a_task_deaf_to_its_cancel_is_left_after_the_timeout(
    caplog: pytest.LogCaptureFixture,
) -> None:
    deaf = asyncio.create_task(_deaf(), name="deaf-dial")
    quick = asyncio.create_task(asyncio.sleep(60))
    await asyncio.sleep(0)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, "swjob.agent"):
        await cancel_within(0.3, deaf, quick)
    assert 0.3 <= time.monotonic() - started < 2
    assert quick.cancelled() and not deaf.done()
    assert "task deaf-dial did not end 0.3 s after its cancel" in caplog.text
    deaf.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await deaf


async def test_tasks_that_end_are_waited_for_and_their_errors_retrieved() -> None:
    unretrieved: list[dict[str, object]] = []
    asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: unretrieved.append(ctx))
    failing = asyncio.create_task(_failing())
    await asyncio.sleep(0)
    started = time.monotonic()
    await cancel_within(5, failing)
    assert time.monotonic() - started < 1 and failing.done()
    del failing
    gc.collect()
    assert unretrieved == []  # no "Task exception was never retrieved" at exit
