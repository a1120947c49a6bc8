"""Port forwarding's local end: a listener whose every connection is piped to a stream
that reaches a port on the node.

The listener is a Unix socket in the private live dir (`socket`: `swjob forward`'s
default, out of other users' reach) or a TCP port on 127.0.0.1 (the console's, and
`swjob forward --local PORT`: what a browser needs). Loopback only, always: binding
other interfaces would hand the node's port to anyone on the operator's network. And
loopback is every local user's, so each TCP connection is checked for its owner and a
stranger's is closed before a byte is relayed (engine/run/localsock.py; where the
platform cannot tell, e.g. macOS's TCP, it is not checked: docs/security.md). At most
`MAX_CONNECTIONS` are open at once. The same listener serves the console (streams
opened in-process on the node's transfer connection) and `swjob forward` (streams through
the driving engine's local access, engine/run/liveaccess.py); `connect` is what differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from agent.livewire import Duplex, splice, tcp_duplex
from engine.run.liveaccess import access_dir
from engine.run.localsock import guarded, remove_socket, unix_server

log = logging.getLogger("swjob.forward")

LOOPBACK = "127.0.0.1"
MAX_CONNECTIONS = 64


Connect = Callable[[], Awaitable[Duplex]]


@dataclass
class Forward:
    """One forwarded port: 127.0.0.1:`local_port` (or the Unix socket `socket`) here →
    `remote_port` on the run's node."""

    run_id: str
    remote_port: int
    local_port: int = 0
    socket: Path | None = None
    active: int = 0  # connections open right now
    served: int = 0  # connections accepted so far
    errors: list[str] = field(default_factory=list)  # the last few reasons a connection failed
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, connect: Connect) -> None:
        """Listen on `socket`, else on `local_port` (0 picks a free port); OSError when the
        port is taken."""

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            self.active += 1
            self.served += 1
            local = tcp_duplex(reader, writer)
            try:
                remote = await connect()
            except Exception as exc:  # the node refused or is gone: this connection only
                self._note(str(exc))
                local.close()
            else:
                await splice(local, remote)
            finally:
                self.active -= 1
                self._tasks.discard(task)

        handler = guarded(accepted, MAX_CONNECTIONS, self._note)
        if self.socket is not None:
            self._server = await unix_server(handler, self.socket)
        else:
            self._server = await asyncio.start_server(handler, LOOPBACK, self.local_port)
            self.local_port = self._server.sockets[0].getsockname()[1]

    def _note(self, error: str) -> None:
        log.info("forward to node port %d: %s", self.remote_port, error)
        self.errors = [*self.errors[-4:], error]

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in tuple(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()
        if self.socket is not None:
            remove_socket(self.socket, access_dir())

    def describe(self) -> str:
        here = self.socket if self.socket is not None else f"{LOOPBACK}:{self.local_port}"
        return f"{here} → node port {self.remote_port}"
