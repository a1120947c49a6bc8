"""The datastream: every event of every run, appended to its `events.jsonl` and fanned out.

Publishing never blocks the engine: the lines go to the writer thread
(engine/report/appender.py), each subscriber has a bounded queue, and when a slow
subscriber's queue is full its oldest event is dropped and the subscription is marked
`lagged`, so it can re-read a snapshot instead of stalling everyone.

Subscribers see the events in the order they were published, and a lifecycle event
(anything but STREAMED) only once it is on its run's file: the console never shows a
transition a crash could take back. Until then it holds back the events published
after it, of every run, so the order stays one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from engine.files import open_regular
from engine.report import appender, logbudget
from engine.report.appender import AppendFile, open_append
from engine.report.events import Cost, Event, GpuMetrics, Log, TransferProgress, parse_event
from engine.report.warnonce import WarnOnce

STREAMED = (Log, TransferProgress, GpuMetrics, Cost)
"""The kinds a run publishes many of: fanned out as soon as nothing is held before them.
Every other kind (a transition, the verdict, an alert) reaches subscribers once it is on
the file; what acts on it in the engine waits for that too (`appender.written`), so an
operator killed right after leaves a journal that says what was under way."""

DEFAULT_QUEUE = 10_000

log = logging.getLogger("swjob.engine")


class Subscription:
    """One consumer's view of the stream: an async iterator with a bounded backlog."""

    def __init__(self, hub: Datastream, maxsize: int) -> None:
        self._hub = hub
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue(maxsize)
        self.lagged = False
        self.dropped = 0

    def _offer(self, event: Event | None) -> None:
        while True:
            try:
                self._queue.put_nowait(event)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()
                self.lagged = True
                self.dropped += 1

    def close(self) -> None:
        self._hub._unsubscribe(self)
        self._offer(None)

    def __aiter__(self) -> AsyncIterator[Event]:
        return self

    async def __anext__(self) -> Event:
        event = await self._queue.get()
        if event is None:
            raise StopAsyncIteration
        return event

    def get_nowait(self) -> Event | None:
        """The next queued event, or None when none is waiting (for batch draining)."""
        try:
            event = self._queue.get_nowait()
        except asyncio.QueueEmpty:
            return None
        if event is None:
            self._offer(None)  # keep the end marker for the iterator
        return event


@dataclass
class _Held:
    """A published event not yet fanned out: `on_file` once it may be."""

    event: Event
    on_file: bool


class Datastream:
    def __init__(self) -> None:
        self._subs: set[Subscription] = set()
        self._files: dict[str, AppendFile] = {}
        self._seq: dict[str, int] = {}
        self._held: deque[_Held] = deque()  # in publish order, the first not yet on file
        self._paths: dict[str, Path] = {}
        self._unwritten = WarnOnce(log)  # runs whose event log a write failed on

    def open_run(self, run_id: str, path: Path, seq: int | None = None) -> None:
        """Start (or continue, after recovery) the run's event log; seq resumes after the last
        (`seq`, when the caller has just read the log: reading it again parsed every event
        of a flooded run twice, on the event loop)."""
        self._seq[run_id] = last_seq(path) if seq is None else seq
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = self._files[run_id] = open_append(path)
        self._paths[run_id] = path
        if _torn(path):
            handle.write("\n")  # end a line torn by a crash so the next event stands alone

    async def close_run(self, run_id: str) -> None:
        """Close the run's event log once every event published so far is on it."""
        handle = self._files.pop(run_id, None)
        if handle is not None:
            try:
                await handle.aclose()
            except OSError as exc:
                self._not_written(run_id, exc)

    def publish(self, event: Event) -> Event:
        """Stamp the event with the run's next sequence number, persist it, fan it out
        (returns at once: the disk may be slow, see engine/report/appender.py)."""
        seq = self._seq.get(event.run_id, 0) + 1
        self._seq[event.run_id] = seq
        event = event.model_copy(update={"seq": seq})
        held = _Held(event, on_file=True)
        handle = self._files.get(event.run_id)
        if handle is not None:
            line = logbudget.dump(event) if isinstance(event, Log) else event.model_dump_json()
            try:
                handle.write(line + "\n")
            except OSError as exc:  # its disk full, its dir gone: the run is still driven
                self._not_written(event.run_id, exc)
            if not isinstance(event, STREAMED):
                self._hold(handle, held)
        self._held.append(held)
        self._fan_out()
        return event

    def _not_written(self, run_id: str, exc: OSError) -> None:
        """A write to the run's event log failed. Publishing goes on — the run must still
        be driven to its end and its node torn down, and its subscribers (the printed
        run, the console) still see every event — and the user is told once a run."""
        path = self._paths.get(run_id, "events.jsonl")
        self._unwritten.warn(run_id, "run %s: %s is missing events: %s", run_id, path, exc)

    def _hold(self, handle: AppendFile, held: _Held) -> None:
        """Fan `held` out only once its line is on the file."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:  # no loop to call back on: wait here
            try:
                handle.flush()
            except OSError as exc:
                self._not_written(held.event.run_id, exc)
            return

        def on_file() -> None:
            held.on_file = True
            self._fan_out()

        held.on_file = False
        appender.then(on_file)

    def _fan_out(self) -> None:
        """Offer subscribers every event up to the first not yet on its file."""
        while self._held and self._held[0].on_file:
            event = self._held.popleft().event
            for sub in tuple(self._subs):
                sub._offer(event)

    def subscribe(self, maxsize: int = DEFAULT_QUEUE) -> Subscription:
        sub = Subscription(self, maxsize)
        self._subs.add(sub)
        return sub

    def _unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def close(self) -> None:
        """Close every event log (waiting for their events to be on them) and end every
        subscription."""
        while self._files:
            run_id, handle = self._files.popitem()
            try:
                handle.close()
            except OSError as exc:
                self._not_written(run_id, exc)
        for held in self._held:  # all on their files now; the writer's calls are not in yet
            held.on_file = True
        self._fan_out()
        for sub in tuple(self._subs):
            sub.close()


def _torn(path: Path) -> bool:
    """Whether the file ends inside a line (a crash mid-write)."""
    with os.fdopen(open_regular(path, os.O_RDONLY), "rb") as handle:
        if handle.seek(0, 2) == 0:
            return False
        handle.seek(-1, 2)
        return handle.read(1) != b"\n"


def read_events(path: Path) -> list[Event]:
    """All events of a run's log; a torn last line (crash mid-write) is skipped."""
    events: list[Event] = []
    if not path.exists():
        return events
    with os.fdopen(open_regular(path, os.O_RDONLY), encoding="utf-8") as handle:
        for line in handle:
            with contextlib.suppress(ValueError):
                events.append(parse_event(line))
    return events


def last_seq(path: Path) -> int:
    events = read_events(path)
    return events[-1].seq if events else 0
