"""Keeping connections to the orchestrator up: backoff, and the transfer connection's loop.

Redials use capped exponential backoff: quick for a blip, but a node that cannot
reach its orchestrator for minutes does not hammer it (or the relays) when it
comes back. The transfer connection is dialed next to the control connection and
handed to the transfer server, which also serves the live service's streams
(agent/live.py); when it drops it is dialed again, so a transfer can be retried
without the control session noticing.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path

from iroh import iroh_ffi

from agent.transfer.server import LiveHandler, serve_transfer

log = logging.getLogger("swjob.agent")

Dial = Callable[[bytes], Awaitable[iroh_ffi.Connection]]


def describe(exc: BaseException) -> str:
    """An exception as one log line; iroh errors carry their text in `message()`."""
    text = exc.message() if isinstance(exc, iroh_ffi.IrohError) else str(exc)
    lines = text.strip().splitlines()
    return f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__


class Backoff:
    """Delays of first, 2*first, 4*first, ... capped at `cap` seconds."""

    def __init__(self, first: float = 0.2, cap: float = 10.0) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    def next(self) -> float:
        delay = self._next
        self._next = min(self._next * 2, self._cap)
        return delay

    def reset(self) -> None:
        self._next = self._first


async def serve_xfer_forever(
    dial: Dial, alpn: bytes, workdir: Path, live: LiveHandler | None = None
) -> None:
    """Dial the transfer ALPN and serve it (and `live`'s streams); redial whenever it
    drops, until cancelled."""
    await serve_forever(dial, alpn, lambda conn: serve_transfer(conn, workdir, live))


async def serve_forever(
    dial: Dial, alpn: bytes, serve: Callable[[iroh_ffi.Connection], Awaitable[None]]
) -> None:
    """Dial `alpn` and `serve` the connection; redial whenever it drops, until cancelled."""
    backoff = Backoff()
    while True:
        conn = None
        try:
            conn = await dial(alpn)
            backoff.reset()
            await serve(conn)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a side service failing must never end the control session
            log.warning("%s connection ended: %s", alpn.decode(), describe(exc))
        finally:
            if conn is not None:
                conn.close(0, b"over")
        await asyncio.sleep(backoff.next())
