"""Tools of the red-team tests: stranger endpoints, and `swjob run` as a background
subprocess a test can attack while its job waits."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
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


@contextlib.contextmanager
def swjob_run_background(tmp_path: Path, job: Path) -> Iterator[tuple[subprocess.Popen, Path]]:
    """`swjob run job` in the background, stdout and stderr into one file (returned);
    killed if still running when the block ends."""
    out = tmp_path / "swjob.out"
    with out.open("wb") as sink:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.cli.main", "run", str(job),
             "--runs-dir", str(tmp_path / "runs")],
            stdout=sink, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        yield proc, out
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def wait_printed(out: Path, text: str, proc: subprocess.Popen, timeout: float = 30) -> None:
    """Until `swjob run` (still running) has printed `text`."""
    async with asyncio.timeout(timeout):
        while text not in out.read_text(errors="replace"):
            assert proc.poll() is None, "swjob run ended early"
            await asyncio.sleep(0.1)
