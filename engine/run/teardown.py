"""Destroying a run's node: the one command that must end, whatever the provider does.

The provider's own teardown verifies and retries what it knows to be transient (a
`TeardownError` is its final word). Anything else it raises — an SDK bug, a file it
could not remove — is retried here a few times; a call that hangs is cut off. When
nothing works the caller gets the one line to raise as a persistent alert: the run
still ends, and the operator knows a node may still be billing.
"""

from __future__ import annotations

import asyncio

from engine.errors import one_line
from engine.providers.base import NodeHandle, Provider, TeardownError

ATTEMPTS = 3
BACKOFF_S = 1.0
ATTEMPT_TIMEOUT_S = 180.0  # local: grace + 15 s at most; Vast: a few API round trips


async def destroy(
    provider: Provider, handle: NodeHandle, timeout_s: float = ATTEMPT_TIMEOUT_S
) -> str | None:
    """Tear `handle` down; None when done, else why it could not be confirmed (one line)."""
    problem = ""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            async with asyncio.timeout(timeout_s):
                await provider.teardown(handle)
            return None
        except TeardownError as exc:
            return str(exc)
        except TimeoutError:
            problem = f"teardown of node {handle.node_id} did not finish within {timeout_s:g} s"
        except Exception as exc:
            problem = f"teardown of node {handle.node_id} failed: {one_line(exc)}"
        if attempt < ATTEMPTS:
            await asyncio.sleep(BACKOFF_S * attempt)
    return problem
