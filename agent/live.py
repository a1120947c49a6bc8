"""The live service: a shell on the node and TCP forwarding to its ports.

Its streams come on the transfer connection the agent dials to its orchestrator (the
node may sit behind NAT and opens no port), so every one comes from the one peer the
agent obeys; the orchestrator accepts that connection only from the node it admitted
with the run's token. A connection of its own cost every run a handshake and its
accept although few runs ever open a shell. The orchestrator opens one bidirectional
stream per shell or forwarded TCP connection, a transfer request `live`
(agent/transfer/server.py) followed by a frame that says which (`ShellOpen`,
`ForwardOpen`); the agent answers `LiveOk` or `LiveRefused`, and then the stream carries:

- a shell: `ShellFrame`s both ways (data, resize, exit status; agent/shell.py);
- a forward: the TCP connection's raw bytes, each direction finished on EOF.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path

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


async def serve_live_stream(
    workdir: Path, send: SendStream, recv: RecvStream, buffered: bytes = b""
) -> None:
    """Serve one live stream; `buffered`: its bytes the transfer server read past its
    request."""
    reader = Reader(recv, buffered)
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
