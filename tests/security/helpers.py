"""Tools of the red-team tests: stranger endpoints, the engine's address, and jobs that wait
while the test attacks."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from iroh import iroh_ffi

from agent import endpoint as iroh_endpoint


@contextlib.asynccontextmanager
async def rogues(count: int) -> AsyncIterator[list[Any]]:
    """`count` strangers' iroh endpoints on loopback, closed afterwards."""
    eps = [await iroh_endpoint.bind(accept=False) for _ in range(count)]
    try:
        yield eps
    finally:
        for ep in eps:
            await ep.close()


def engine_addr(state: Path) -> Any:
    """The address of the engine owning identity slot 0, from its key and port files."""
    key = iroh_ffi.SecretKey.from_bytes((state / "engine-0.key").read_bytes())
    port = int((state / "engine-0.port").read_text())
    return iroh_ffi.EndpointAddr(key.public(), None, [f"127.0.0.1:{port}"])


def waiting_run(go: Path, before: str = "echo started", after: str = "true") -> str:
    """A job command that runs `before`, waits until the test creates `go`, runs `after`."""
    return f"{before}; while [ ! -e {go} ]; do sleep 0.1; done; {after}"
