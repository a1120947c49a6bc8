"""Port forwarding's local end: a listener on 127.0.0.1 whose every connection is piped
to a stream that reaches a port on the node.

Loopback only, always: a forwarded port is as open as the node's own loopback, and
binding it to other interfaces would hand it to anyone on the operator's network.
The same listener serves the console (streams opened in-process on the node's live
connection) and `swjob forward` (streams through the driving engine's local access,
engine/run/liveaccess.py); `connect` is what differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from agent.livewire import Duplex, splice, tcp_duplex

log = logging.getLogger("swjob.forward")

LOOPBACK = "127.0.0.1"


Connect = Callable[[], Awaitable[Duplex]]


@dataclass
class Forward:
    """One forwarded port: 127.0.0.1:`local_port` here → `remote_port` on the run's node."""

    run_id: str
    remote_port: int
    local_port: int = 0
    active: int = 0  # connections open right now
    served: int = 0  # connections accepted so far
    errors: list[str] = field(default_factory=list)  # the last few reasons a connection failed
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def start(self, connect: Connect) -> None:
        """Listen (`local_port` 0 picks a free port); OSError when the port is taken."""

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

        self._server = await asyncio.start_server(accepted, LOOPBACK, self.local_port)
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

    def describe(self) -> str:
        return f"{LOOPBACK}:{self.local_port} → node port {self.remote_port}"
