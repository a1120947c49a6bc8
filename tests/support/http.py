"""Fetching from a forwarded port (the tests of `swjob forward` and the console's `p`), and
a free port to forward."""

from __future__ import annotations

import asyncio
import socket
import time
import urllib.request

__all__ = ["fetch", "free_port", "served"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 nothing listens on now (for a server or a forward to take)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def fetch(port: int, name: str, timeout: float = 20.0) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/{name}", timeout=timeout) as reply:
        return reply.read().decode()


async def served(port: int, name: str, timeout: float = 20.0) -> str:
    """The file once the server on the node answers (it starts with the run step, after
    the forward listens); the blocking fetch runs off the loop, which the engine relaying
    it needs. A refused or cut request is tried again until `timeout`."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncio.to_thread(fetch, port, name, timeout)
        except OSError:
            assert time.monotonic() < deadline, f"nothing served on port {port}"
            await asyncio.sleep(0.1)
