"""The live service (`swjob/live/1`): a shell on the node and TCP forwarding to its ports.

Like the transfer service, the agent dials it to its orchestrator (the node may sit
behind NAT and opens no port), so every stream on it comes from the one peer the
agent obeys; the orchestrator accepts the connection only from the node it admitted
with the run's token. The orchestrator opens one bidirectional stream per shell or
forwarded TCP connection; its first frame says which (`ShellOpen`, `ForwardOpen`),
the agent answers `LiveOk` or `LiveRefused`, and then the stream carries:

- a shell: `ShellFrame`s both ways (data, resize, exit status; agent/shell.py);
- a forward: the TCP connection's raw bytes, each direction finished on EOF.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from pathlib import Path
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

    def __init__(self, stream: RecvStream) -> None:
        self._stream = stream
        self._buf = bytearray()

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


def message_json(msg: BaseModel) -> str:
    """A message as one JSON line (the operator-side local socket speaks lines)."""
    return json.dumps(msg.model_dump(mode="json"))


async def pipe(read: Any, write: Any, finish: Any) -> None:
    """Copy until `read()` returns b"", then `finish()`: one direction of a forward."""
    while chunk := await read():
        await write(chunk)
    await finish()


async def serve_live(conn: Any, workdir: Path) -> None:
    """Serve every stream the orchestrator opens on the live connection, until it drops."""
    handlers: set[asyncio.Task[None]] = set()
    try:
        while True:
            bi = await conn.accept_bi()
            task = asyncio.create_task(_serve_stream(bi.send(), bi.recv(), workdir))
            handlers.add(task)
            task.add_done_callback(handlers.discard)
    finally:
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


async def _serve_stream(send: SendStream, recv: RecvStream, workdir: Path) -> None:
    from agent.shell import run_shell  # the PTY module is needed only when a shell opens

    reader = Reader(recv)
    try:
        request = await read_msg(reader)
        if isinstance(request, ShellOpen):
            await run_shell(request, reader, send, workdir)
        elif isinstance(request, ForwardOpen):
            await _forward(request, reader, send)
        else:
            raise LiveError(f"unexpected {request.op!r} as a request")
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # one broken stream never ends the live service
        log.info("live stream ended: %s", exc)
    finally:
        with contextlib.suppress(Exception):
            await send.finish()


async def refuse(send: SendStream, reason: str) -> None:
    await send.write_all(encode_msg(LiveRefused(reason=reason)))


async def _forward(request: ForwardOpen, reader: Reader, send: SendStream) -> None:
    try:
        tcp_in, tcp_out = await asyncio.open_connection("127.0.0.1", request.port)
    except OSError as exc:
        await refuse(send, f"node port {request.port}: {exc.strerror or exc}")
        return
    await send.write_all(encode_msg(LiveOk()))

    async def close_out() -> None:
        if tcp_out.can_write_eof():
            tcp_out.write_eof()

    async def write_tcp(chunk: bytes) -> None:
        tcp_out.write(chunk)
        await tcp_out.drain()

    try:
        await asyncio.gather(
            pipe(reader.some, write_tcp, close_out),
            pipe(lambda: tcp_in.read(PIPE_CHUNK), send.write_all, send.finish),
        )
    finally:
        tcp_out.close()
