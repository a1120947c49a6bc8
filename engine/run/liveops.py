"""The operator's end of the live service: streams to a node's shell and ports.

The node dials `swjob/live/1` next to its control connection; the control server
hands that connection to the run's `LiveLink` only when it comes from the endpoint
admitted with the run's token (the same rule as transfers). Each shell or forwarded
TCP connection is one stream on it, opened here with its request and answered by the
agent (agent/live.py) before any byte flows.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

from agent.livewire import (
    ForwardOpen,
    LiveError,
    LiveRefused,
    Reader,
    SendStream,
    ShellOpen,
    encode_msg,
    read_msg,
)
from engine.errors import SwjobError

OPEN_TIMEOUT_S = 10.0

LiveRequest = ShellOpen | ForwardOpen


class LiveUnavailable(SwjobError):
    """A shell or forward cannot be opened now; the message is one line for the user."""


@dataclass
class LiveStream:
    """One opened stream: what the node sends arrives on `reader`, what we send on `send`."""

    send: SendStream
    reader: Reader


class LiveLink:
    """The node's current live connection (replaced when the node redials)."""

    def __init__(self) -> None:
        self._conn: Any = None
        self._ready = asyncio.Event()

    def attach(self, conn: Any) -> None:
        if self._conn is not None and self._conn is not conn:
            with contextlib.suppress(Exception):
                self._conn.close(0, b"replaced")
        self._conn = conn
        self._ready.set()

    def close(self) -> None:
        if self._conn is not None:
            with contextlib.suppress(Exception):
                self._conn.close(0, b"run over")
        self._conn = None

    async def open(self, request: LiveRequest, timeout_s: float = OPEN_TIMEOUT_S) -> LiveStream:
        """A stream the node accepted for `request`; LiveUnavailable says why not."""
        conn = None
        try:
            async with asyncio.timeout(timeout_s):
                await self._ready.wait()
                conn = self._conn
                if conn is None:
                    raise LiveUnavailable("the node's live service is closed")
                bi = await conn.open_bi()
                send, reader = bi.send(), Reader(bi.recv())
                await send.write_all(encode_msg(request))
                reply = await read_msg(reader)
        except TimeoutError:
            raise LiveUnavailable(f"the node did not answer within {timeout_s:g} s") from None
        except LiveError as exc:
            raise LiveUnavailable(f"the node's live service failed: {exc}") from None
        except LiveUnavailable:
            raise
        except Exception as exc:  # iroh: the connection dropped under us
            self._forget(conn)
            raise LiveUnavailable(f"the node's live connection failed: {exc}") from None
        if isinstance(reply, LiveRefused):
            raise LiveUnavailable(reply.reason)
        return LiveStream(send, reader)

    def _forget(self, conn: Any) -> None:
        if conn is not None and self._conn is conn:
            self._conn = None
            self._ready.clear()
