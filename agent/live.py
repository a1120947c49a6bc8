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
import logging
from pathlib import Path
from typing import Any

from agent.livewire import (
    Duplex,
    ForwardOpen,
    LiveError,
    LiveOk,
    Reader,
    RecvStream,
    SendStream,
    ShellOpen,
    encode_msg,
    read_msg,
    refuse,
    splice,
    tcp_duplex,
)
from agent.shell import run_shell

log = logging.getLogger("swjob.agent")


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


async def _forward(request: ForwardOpen, reader: Reader, send: SendStream) -> None:
    try:
        tcp_in, tcp_out = await asyncio.open_connection("127.0.0.1", request.port)
    except OSError as exc:
        await refuse(send, f"node port {request.port}: {exc.strerror or exc}")
        return
    await send.write_all(encode_msg(LiveOk()))
    await splice(tcp_duplex(tcp_in, tcp_out), Duplex(reader.some, send.write_all, send.finish))
