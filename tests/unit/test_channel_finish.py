"""A channel finished stays quiet: what was sent before `finish` goes, a send after it is
dropped without an error. An agent shutting down finishes its control stream after its
last events and waits for the peer to acknowledge them; a heartbeat sent meanwhile made
iroh raise ClosedStream, that failed session closed the connection, and the last events
(the stopped step's StepExited), not yet acknowledged, were lost with it."""

from __future__ import annotations

import asyncio

from agent.protocol import Channel, Heartbeat, encode


class _Stream:
    """A send stream as QUIC's behaves: a write after `finish` raises."""

    def __init__(self) -> None:
        self.sent = b""
        self.finished = 0

    async def write_all(self, buf: bytes) -> None:
        if self.finished:
            raise RuntimeError("ClosedStream")
        await asyncio.sleep(0)  # a write may yield: `finish` must wait for it
        if self.finished:  # finished under a write under way: its frame cut short
            raise RuntimeError("ClosedStream mid-write")
        self.sent += buf

    async def finish(self) -> None:
        self.finished += 1

    async def read(self, size_limit: int) -> bytes:
        return b""


async def test_a_send_after_finish_is_dropped_and_finish_waits_for_a_send_under_way() -> None:
    stream = _Stream()
    channel = Channel(stream, stream)
    last = Heartbeat(last_seq=7)
    under_way = asyncio.create_task(channel.send(last))
    await asyncio.sleep(0)  # the send holds the lock, mid-write
    await channel.finish()
    await under_way
    await channel.send(Heartbeat(last_seq=8))  # a heartbeat racing the shutdown
    await channel.finish()
    assert stream.sent == encode(last) and stream.finished == 1
