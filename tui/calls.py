"""Every engine call the console makes goes through `call`: bounded in time, and any
failure comes back as one line naming what was being done and why it failed.

A console that awaits an engine call without a bound can sit forever on "listing…";
one that lets an unexpected exception die in a worker shows nothing. Here both end
as a `CallError` whose text is ready for a toast or an inline error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from engine.api import one_line

T = TypeVar("T")

# How long the console waits for an engine call before it says so. Submitting returns at
# once (provisioning runs in the background) unless the provider's SDK is still loading;
# listing orphans asks every provider account, with retries.
START_TIMEOUT_S = 60.0
SUBMIT_TIMEOUT_S = 60.0
LIST_TIMEOUT_S = 90.0
STOP_TIMEOUT_S = 30.0
COLLECT_TIMEOUT_S = 300.0


class CallError(Exception):
    """An engine call failed or timed out; `str()` is one line for the user."""


async def call(what: str, awaitable: Awaitable[T], *, timeout: float) -> T:
    """Await `awaitable` for at most `timeout` seconds. `what` says what the call does,
    in the words of the message ("submit", "list orphaned nodes")."""
    try:
        async with asyncio.timeout(timeout):
            return await awaitable
    except TimeoutError:
        raise CallError(f"{what}: no answer after {timeout:g} s") from None
    except Exception as exc:
        raise CallError(f"{what}: {one_line(exc)}") from exc
