"""Ctrl-C for a command whose event loop waits on another runtime's threads.

`asyncio.run` turns SIGINT into KeyboardInterrupt through Python's own signal handler,
which runs only once the main thread runs Python again. The kernel may give the signal
to any thread that does not block it: given to one of the object store client's Tokio
threads while the loop slept in epoll_wait with nothing to wake it, it woke nothing, and
an interrupted `swjob pull` hung for good (1 in 15 under load). The loop's own handler
(`add_signal_handler`) sets a wakeup fd, so the signal wakes the loop whichever thread
took it.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def until_interrupted(work: Awaitable[T]) -> T:
    """`work`, cancelled by SIGINT, which then raises KeyboardInterrupt as Python's own
    handler would."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None, "called outside a task"
    interrupted = False

    def interrupt() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()

    loop.add_signal_handler(signal.SIGINT, interrupt)
    try:
        return await work
    except asyncio.CancelledError:
        if interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        loop.remove_signal_handler(signal.SIGINT)
