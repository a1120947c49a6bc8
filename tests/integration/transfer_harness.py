"""A real iroh pair on loopback for transfer tests: one side plays the agent, one the engine.

The agent side dials the engine with the transfer ALPN and calls `serve_transfer`,
redialing whenever the connection ends (as the real agent does). The engine side
is a tiny `XferLink`: `open_bi()` on the current connection, waiting for a redial
after a drop. `cut()` closes the current connection from the engine side. `snapshot`
is what a transfer must keep of a tree.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from agent import endpoint
from agent.protocol import XFER_ALPN
from agent.transfer.server import serve_transfer

REDIAL_DEADLINE_S = 10.0


class LoopbackLink:
    def __init__(self, ep: Any) -> None:
        self._ep = ep
        self.conn: Any = None
        self.connections = 0
        self._new_conn = asyncio.Event()

    async def accept_loop(self) -> None:
        while (incoming := await self._ep.accept_next()) is not None:
            conn = await (await incoming.accept()).connect()
            self.conn, self.connections = conn, self.connections + 1
            self._new_conn.set()

    async def open_bi(self) -> Any:
        async with asyncio.timeout(REDIAL_DEADLINE_S):
            while True:
                conn = self.conn
                if conn is not None:
                    try:
                        return await conn.open_bi()
                    except Exception:
                        if self.conn is conn:
                            self.conn = None
                self._new_conn.clear()
                if self.conn is None:
                    await self._new_conn.wait()

    def cut(self) -> None:
        """Drop the current connection, as a network failure would."""
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close(7, b"cut by test")


async def agent_loop(ep: Any, ticket: str, workdir: Path, handler: Any = serve_transfer) -> None:
    """Dial the engine and serve transfers; redial when the connection ends."""
    while True:
        conn = await ep.connect(endpoint.addr_from_ticket(ticket), XFER_ALPN)
        await handler(conn, workdir)


@contextlib.asynccontextmanager
async def loopback_pair(
    workdir: Path, handler: Any = serve_transfer
) -> AsyncIterator[LoopbackLink]:
    """An engine-side link to an in-process agent serving `workdir`; everything closed after."""
    engine_ep = await endpoint.bind(accept=True)
    agent_ep = await endpoint.bind(accept=False)
    link = LoopbackLink(engine_ep)
    tasks = [
        asyncio.create_task(link.accept_loop()),
        asyncio.create_task(agent_loop(agent_ep, endpoint.ticket_of(engine_ep), workdir, handler)),
    ]
    try:
        yield link
    finally:
        for task in tasks:
            task.cancel()
        # endpoints first: a dial in flight (the agent redialing after a cut) is a binding
        # call that cancelling does not interrupt; closing its endpoint ends it at once
        await agent_ep.close()
        await engine_ep.close()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def snapshot(root: Path) -> dict[str, tuple]:
    """Everything that must survive a transfer: kind, mode, content or link target."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir",)
            else:
                out[rel] = ("file", stat.S_IMODE(st.st_mode), path.read_bytes())
    return out
