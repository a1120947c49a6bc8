"""The live service's wire (a `live` stream on the transfer connection), shared by the
node and the operator.

One bidirectional stream per shell or forwarded TCP connection. Its first frame (4-byte
length, then JSON) is the request (`ShellOpen`, `ForwardOpen`); the agent answers
`LiveOk` or `LiveRefused`, and then the stream carries the shell's frames
(agent/shell.py) or the TCP connection's raw bytes. `Reader` keeps what a frame read
past, so the raw bytes after a frame are never lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

log = logging.getLogger("swjob.agent")

_HEADER = struct.Struct(">I")
MAX_OPEN = 64 * 1024  # an open request is a few hundred bytes (plus the job's env)
PIPE_CHUNK = 64 * 1024


class _Live(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ShellOpen(_Live):
    """A PTY running the node's shell in the job's workdir with the job's env overlay."""

    op: Literal["shell"] = "shell"
    cols: int = Field(default=80, ge=1, le=10_000)
    rows: int = Field(default=24, ge=1, le=10_000)
    term: str = "xterm-256color"
    env: dict[str, str] = {}


class ForwardOpen(_Live):
    """One TCP connection to 127.0.0.1:`port` on the node."""

    op: Literal["forward"] = "forward"
    port: int = Field(ge=1, le=65535)


class LiveOk(_Live):
    op: Literal["ok"] = "ok"


class LiveRefused(_Live):
    op: Literal["refused"] = "refused"
    reason: str


LiveMsg = Annotated[ShellOpen | ForwardOpen | LiveOk | LiveRefused, Field(discriminator="op")]
_LIVE = TypeAdapter(LiveMsg)


class LiveError(Exception):
    """The peer broke the live protocol or refused the request; one line."""


class RecvStream(Protocol):
    async def read(self, size_limit: int) -> bytes: ...


class SendStream(Protocol):
    async def write_all(self, buf: bytes) -> None: ...
    async def finish(self) -> None: ...


class Reader:
    """Exact reads over a stream that returns pieces; what a frame read past stays buffered,
    so raw bytes that follow a frame on the same stream are never lost."""

    def __init__(self, stream: RecvStream, buffered: bytes = b"") -> None:
        """`buffered`: the stream's first bytes, already read by whoever read before us."""
        self._stream = stream
        self._buf = bytearray(buffered)

    async def exactly(self, size: int) -> bytes | None:
        """`size` bytes; None at a clean end before any of them; LiveError inside."""
        while len(self._buf) < size:
            piece = await self.some_raw()
            if not piece:
                if self._buf:
                    raise LiveError("stream ended inside a frame")
                return None
            self._buf += piece
        out = bytes(self._buf[:size])
        del self._buf[:size]
        return out

    async def some_raw(self) -> bytes:
        try:
            return await self._stream.read(PIPE_CHUNK)
        except Exception as exc:  # iroh reports a reset stream as an error: an end
            log.debug("live stream read ended: %s", exc)
            return b""

    async def some(self) -> bytes:
        """The buffered bytes, else the next piece; b"" at the end."""
        if self._buf:
            out = bytes(self._buf)
            self._buf.clear()
            return out
        return await self.some_raw()


def encode_msg(msg: BaseModel) -> bytes:
    body = msg.model_dump_json().encode()
    return _HEADER.pack(len(body)) + body


async def refuse(send: SendStream, reason: str) -> None:
    """Answer a request with the one-line reason it cannot be served."""
    await send.write_all(encode_msg(LiveRefused(reason=reason)))


async def read_msg(reader: Reader) -> Any:
    head = await reader.exactly(_HEADER.size)
    if head is None:
        raise LiveError("stream ended before the request")
    (size,) = _HEADER.unpack(head)
    if size > MAX_OPEN:
        raise LiveError(f"live request of {size} bytes exceeds {MAX_OPEN}")
    body = await reader.exactly(size)
    try:
        return _LIVE.validate_json(body or b"")
    except ValidationError as exc:
        raise LiveError(f"bad live message: {str(exc).splitlines()[0]}") from None


async def pipe(read: Any, write: Any, finish: Any) -> None:
    """Copy until `read()` returns b"", then `finish()`: one direction of a forward."""
    while chunk := await read():
        await write(chunk)
    await finish()


@dataclass
class Duplex:
    """Both directions of one byte stream: `read` returns b"" at the end, `finish` half-closes."""

    read: Callable[[], Awaitable[bytes]]
    write: Callable[[bytes], Awaitable[None]]
    finish: Callable[[], Awaitable[None]]
    close: Callable[[], None] = lambda: None


def tcp_duplex(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Duplex:
    async def write(chunk: bytes) -> None:
        writer.write(chunk)
        await writer.drain()

    async def finish() -> None:
        if writer.can_write_eof() and not writer.is_closing():
            writer.write_eof()

    return Duplex(lambda: reader.read(PIPE_CHUNK), write, finish, writer.close)


async def splice(a: Duplex, b: Duplex) -> None:
    """Copy both ways until both directions ended (one side's EOF only half-closes the
    other); on any error both ends are finished and closed at once, so neither peer waits
    on a connection the other side has lost (a killed `swjob shell` hangs up its shell)."""
    pumps = [
        asyncio.create_task(pipe(a.read, b.write, b.finish)),
        asyncio.create_task(pipe(b.read, a.write, a.finish)),
    ]
    try:
        for done in asyncio.as_completed(pumps):
            await done
    except Exception as exc:  # a reset, a dropped iroh connection: this stream only
        log.info("relayed stream ended: %s", exc)
    finally:
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        for side in (a, b):
            with contextlib.suppress(Exception):
                await side.finish()
            side.close()
