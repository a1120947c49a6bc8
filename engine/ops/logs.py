"""`swjob logs -f RUN`: a live run's setup and run output as it is written, to its end.

The driving swjob process writes each step's log file (`logs/setup.log`, then
`logs/run.log`); this reads them as they grow — whichever process drives the run, this
one only reads — and ends when the run has ended and every byte is out. A run nobody
drives any more (its swjob died) ends the follow too, with `Unowned`: its log would
never grow again until someone attaches.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from engine.report.views import RunView
from engine.state import ownership
from engine.state.store import Store

POLL_S = 0.2
READ_MAX = 1 << 20


class Unowned(Exception):
    """The run is unfinished but no swjob process drives it."""


async def follow_log(
    view: RunView, steps: list[str], poll_s: float = POLL_S
) -> AsyncIterator[bytes]:
    """Whole lines of the run's step logs, in step order, as they are written; the last
    piece of a log without a newline comes once its step is over."""
    store = Store()
    try:
        for index, step in enumerate(steps):
            later = [Path(view.run_dir) / "logs" / f"{s}.log" for s in steps[index + 1 :]]
            async for piece in _follow_one(
                Path(view.run_dir) / "logs" / f"{step}.log",
                later,
                lambda: _over(store, view.run_id),
                poll_s,
            ):
                yield piece
    finally:
        store.close()


async def _follow_one(
    path: Path, later: list[Path], over: Callable[[], bool], poll_s: float
) -> AsyncIterator[bytes]:
    offset, pending = 0, b""
    while True:
        done = over() or any(p.exists() for p in later)  # asked before the last read
        data = _read_from(path, offset)
        offset += len(data)
        pending += data
        if b"\n" in pending:
            whole, _, pending = pending.rpartition(b"\n")
            yield whole + b"\n"
        elif not data:
            if done:
                break
            await asyncio.sleep(poll_s)
    if pending:
        yield pending


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as handle:
            handle.seek(offset)
            return handle.read(READ_MAX)
    except FileNotFoundError:
        return b""


def _over(store: Store, run_id: str) -> bool:
    """True once the run has ended; Unowned when it is unfinished and nobody drives it."""
    view = store.find(run_id)
    if view is not None and view.finished is not None:
        return True
    if not ownership.has_live_owner(run_id):
        view = store.find(run_id)  # it may have ended as its owner let go
        if view is None or view.finished is None:
            raise Unowned(
                f"no swjob process drives run {run_id} (`swjob attach {run_id}` carries it on)"
            )
        return True
    return False
