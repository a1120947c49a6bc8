"""The run index as the engine writes it: from the writer thread, never waiting for good.

Rows go through the writer thread (engine/report/appender.py), after the events they
summarise. When another process holds runs.sqlite's write lock (or its disk is full) the
store keeps the rows and says so (engine/state/store.py); here the failure is said once,
as one line naming the file, the kept rows are retried every RETRY_S without waiting on
the lock, and the recovery is said too, so that a later failure is said again. At close
a last, bounded try is made and what is still unwritten is returned for the caller to
say: every run's landing dir still holds its whole story, and the next console adopts a
run its index row left unfinished and ends it from there.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from engine.report import appender
from engine.report.views import RunView
from engine.state.locked import StateNotWritten
from engine.state.store import Store

RETRY_S = 1.0
"""How often kept rows are tried again while the index cannot be written."""


@dataclass
class Unwritten:
    """At close, the runs whose latest row is not in the index, and where it was kept
    (`kept_in`) — or why it could not be (`problem`)."""

    runs: list[str]
    kept_in: Path | None = None
    problem: str = ""


class IndexWrites:
    def __init__(self, store: Store, say: Callable[[str], None]) -> None:
        """`store` is used on the writer thread only; `say` gets each change of the
        index's health as one line, on the loop."""
        self._store = store
        self._say = say
        self._loop: asyncio.AbstractEventLoop | None = None
        self._failure = ""  # the failure last said ("" when writes succeed), on the loop
        self._seen = ""  # the same, as the writer thread last found it
        self._retrying: asyncio.TimerHandle | None = None
        self._closed = False

    def save(
        self,
        view: RunView,
        recovery: dict[str, Any] | None,
        next_attempt: tuple[str, dict[str, Any]] | None,
    ) -> None:
        """Queue the run's row behind what was written before it (returns at once). The
        rows queued in one pass of the writer thread are written in one commit."""
        self._loop = asyncio.get_running_loop()
        appender.later(partial(self._store.queue, view, recovery, next_attempt), self._commit)

    def unwritten(self) -> list[str]:
        """Runs whose latest row the index does not hold yet (it is kept and retried)."""
        return self._store.unwritten()

    async def close(self) -> Unwritten | None:
        """One last try, waiting for the lock at most WRITE_WAIT_S; then the rows still
        not in the index are kept in files beside it, for the next process that opens it
        (engine/state/spill.py). None when every row is in."""
        self._closed = True
        if self._retrying is not None:
            self._retrying.cancel()
        if self._store.unwritten():
            self._later(self._store.retry)
            await appender.written()
        if not (runs := self._store.unwritten()):
            return None
        unwritten = Unwritten(runs)
        appender.later(partial(self._keep, unwritten))
        await appender.written()
        return unwritten

    async def write_in_kept(self) -> None:
        """Write in the rows other processes kept beside the index (on the writer thread,
        as every write of ours; a held index is said as any failed write)."""
        self._later(self._store.write_in_kept)
        await appender.written()

    def _keep(self, unwritten: Unwritten) -> None:
        try:
            unwritten.kept_in = self._store.keep_unwritten()
        except OSError as exc:  # the state dir's disk full too: the landing dirs remain
            unwritten.problem = exc.strerror or str(exc)

    def _later(self, write: Callable[[], None]) -> None:
        self._loop = asyncio.get_running_loop()
        appender.later(partial(self._write, write))

    def _commit(self) -> None:
        """On the writer thread, once a pass: the rows `save` queued, in one transaction."""
        self._write(self._store.commit_queued)

    def _write(self, write: Callable[[], None]) -> None:
        """On the writer thread: the loop hears only of changes (failed, written again).
        The index is written again once no row is kept any more: a write that took none of
        them in (writing other processes' kept rows in, finding none) says nothing — it
        said "written again" at every adoption scan while the lock was still held."""
        try:
            write()
            found = self._seen if self._store.unwritten() else ""
        except StateNotWritten as exc:
            found = str(exc)
        if found != self._seen and self._loop is not None:
            self._seen = found
            with contextlib.suppress(RuntimeError):  # its loop has closed meanwhile
                self._loop.call_soon_threadsafe(self._changed, found)

    def _changed(self, failure: str) -> None:
        if failure == self._failure:
            return
        if failure:
            self._say(f"run index not written: {failure}; its rows are kept for when it can be")
        elif self._failure:
            self._say("run index written again")
        self._failure = failure
        self._retry_soon()

    def _retry_soon(self) -> None:
        if self._retrying is not None:
            self._retrying.cancel()
            self._retrying = None
        if self._failure and self._loop is not None and not self._closed:
            self._retrying = self._loop.call_later(RETRY_S, self._retry)

    def _retry(self) -> None:
        self._retrying = None
        self._later(partial(self._store.retry, 0.0))
        self._retry_soon()
