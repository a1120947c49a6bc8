"""What the console keeps from the engine's event subscription between two screen ticks.

The subscription can deliver thousands of log events a second; the UI must not
render per event. The feed does only cheap bookkeeping per event — append log
lines to a capped ring per run, mark the run dirty — and the app renders from it
on a timer. Log memory is bounded by `cap` lines per run; the full log is on disk.

It also keeps what the run views do not: each run's latest cost split by phase
(a view carries only the total) and the engine-wide orphan warnings, which have
no run to live in and stay on the board until the nodes are collected.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import NamedTuple

from engine.api import LogLine, Stream, printable
from engine.api import events as ev

Line = tuple[str, bool, str, float]
"""(step, is stderr, text, when: unix s of the batch in the datastream, 0 when not
known — a line read from a log file). Plain values, not the event's LogLine models:
tuples of strings, bools and floats drop out of the garbage collector's sight, so the
lines held per run cost a flood no collector time. With the LogLines kept, full
collections walked them and stalled key handling for up to ~180 ms."""


CR = "\r"
"""Ends the text of a line a lone CR ended (a progress update, agent/lines.py): the log
view writes the next line of its stream over it, as a terminal does."""


def lines_of(step: str, lines: list[LogLine], when: float = 0.0) -> list[Line]:
    """The lines as the console holds them: drawable text only (tui/printable.py), with
    the CR mark kept."""
    err = Stream.STDERR
    return [(step, line.stream is err, drawable(line.text), when) for line in lines]


def drawable(text: str) -> str:
    """The text made drawable, a lone CR that ended it kept as its mark."""
    if text.endswith(CR):
        return printable(text[:-1]) + CR
    return printable(text)


@dataclass
class RunLog:
    """A run's most recent log lines; `total` counts every line ever appended so a
    reader can tell how many it missed since it last looked."""

    cap: int
    lines: deque[Line] = field(init=False)
    total: int = 0

    def __post_init__(self) -> None:
        self.lines = deque(maxlen=self.cap)

    def extend(self, new: list[Line]) -> None:
        self.lines.extend(new)
        self.total += len(new)

    def since(self, seen: int) -> list[Line]:
        """Lines appended after a reader had seen `seen` of them (at most `cap`)."""
        missed = min(self.total - seen, len(self.lines))
        if missed <= 0:
            return []
        return list(self.lines)[-missed:]


class OrphanLine(NamedTuple):
    """An orphaned node as the board's banner shows it: described, and whether `x`
    collects it (not another operator's, say)."""

    text: str
    collectable: bool


class Feed:
    def __init__(self, cap: int = 5000) -> None:
        self.cap = cap
        self.logs: dict[str, RunLog] = {}
        self.orphans: list[OrphanLine] = []  # one per orphaned node, until collected
        self._dirty: set[str] = set()

    def log(self, run_id: str) -> RunLog:
        if run_id not in self.logs:
            self.logs[run_id] = RunLog(self.cap)
        return self.logs[run_id]

    def ingest(self, event: ev.Event) -> None:
        if isinstance(event, ev.Log):
            lines = lines_of(event.step.value, event.lines, event.ts.timestamp())
            self.log(event.run_id).extend(lines)
            return
        if isinstance(event, ev.Alert) and event.orphan:
            self.orphans.append(OrphanLine(event.orphan, event.collectable))
        self._dirty.add(event.run_id)

    def mark(self, run_ids: set[str]) -> None:
        self._dirty |= run_ids

    def take_dirty(self) -> frozenset[str]:
        dirty, self._dirty = frozenset(self._dirty), set()
        return dirty
