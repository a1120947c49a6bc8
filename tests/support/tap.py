"""A tap on an engine's datastream: the tests' way to wait for the moment that matters
(a node event, a log line, a state) instead of for time."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from engine.engine import Engine
from engine.report import events as ev

__all__ = ["Tap", "pids_in_logs"]

PID_LINE = re.compile(r"\bpid=(\d+)")


@dataclass
class Tap:
    """Every event the engine publishes from now on, kept in order with its arrival time.

    Subscribing before the submit means no event can slip past a waiter: `until` looks
    at what was already seen before it waits for more.
    """

    engine: Engine
    seen: list[tuple[float, ev.Event]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._sub = self.engine.subscribe(maxsize=1_000_000)
        self._cursor = 0

    async def until(
        self, match: Callable[[ev.Event], bool], timeout: float = 30.0
    ) -> tuple[float, ev.Event]:
        """The first event (from the start of the tap) that matches, with its arrival time."""
        for arrived, event in self.seen:
            if match(event):
                return arrived, event
        async with asyncio.timeout(timeout):
            async for event in self._sub:
                self.seen.append((time.monotonic(), event))
                if match(event):
                    return self.seen[-1]
        raise AssertionError("the datastream closed before the awaited event")

    def drain(self) -> None:
        """Take in what is queued without waiting (arrival times are then the drain's)."""
        now = time.monotonic()
        while (event := self._sub.get_nowait()) is not None:
            self.seen.append((now, event))

    def events(self, run_id: str) -> list[ev.Event]:
        return [e for _, e in self.seen if e.run_id == run_id]

    def close(self) -> None:
        self.drain()
        self._sub.close()


def pids_in_logs(event: ev.Event) -> list[int]:
    """Pids a job printed as `pid=N` (the tests' jobs announce their processes this way)."""
    if not isinstance(event, ev.Log):
        return []
    return [int(m) for line in event.lines for m in PID_LINE.findall(line.text)]
