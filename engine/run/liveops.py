"""The operator's end of the live service: streams to a node's shell and ports.

Each shell or forwarded TCP connection is one stream on the node's transfer connection,
which the control server accepts only from the endpoint admitted with the run's token:
a transfer request `live`, then the live request, answered by the agent (agent/live.py)
before any byte flows. (A connection of the live service's own cost every run a
handshake and its accept, although few runs ever open a shell.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
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
from agent.transfer import wire
from agent.transfer.server import LIVE_OP
from engine.errors import SwjobError

OPEN_TIMEOUT_S = 10.0

LiveRequest = ShellOpen | ForwardOpen
LIVE_REQUEST = wire.record({"t": "req", "op": LIVE_OP})
"""What a live stream starts with: the transfer server hands the rest to the live service."""


class LiveUnavailable(SwjobError):
    """A shell or forward cannot be opened now; the message is one line for the user."""


@dataclass
class LiveStream:
    """One opened stream: what the node sends arrives on `reader`, what we send on `send`."""

    send: SendStream
    reader: Reader


class LiveLink:
    """Opens the run's live streams on its node's current transfer connection."""

    def __init__(self, open_bi: Callable[[], Awaitable[Any]]) -> None:
        """`open_bi`: a new stream on the transfer connection (NodeSession.open_bi), which
        waits for a dropped node to redial and raises when it does not."""
        self._open_bi = open_bi

    async def open(self, request: LiveRequest, timeout_s: float = OPEN_TIMEOUT_S) -> LiveStream:
        """A stream the node accepted for `request`; LiveUnavailable says why not."""
        try:
            async with asyncio.timeout(timeout_s):
                bi = await self._open_bi()
                send, reader = bi.send(), Reader(bi.recv())
                await send.write_all(LIVE_REQUEST + encode_msg(request))
                reply = await read_msg(reader)
        except TimeoutError:
            raise LiveUnavailable(f"the node did not answer within {timeout_s:g} s") from None
        except LiveError as exc:
            raise LiveUnavailable(f"the node's live service failed: {exc}") from None
        except Exception as exc:  # iroh, or the node gone: the connection dropped under us
            raise LiveUnavailable(f"the node's transfer connection failed: {exc}") from None
        if isinstance(reply, LiveRefused):
            raise LiveUnavailable(reply.reason)
        return LiveStream(send, reader)
