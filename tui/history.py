"""A finished run as the console shows it, read back from its `events.jsonl`.

The run index keeps only summaries, so a past run's timeline and its recent,
stream-tagged log lines come from the datastream it left behind, folded by the
engine's own reducer: a run reads the same after the fact as it did live. Log
events are kept raw and only the last ones parsed, so a flooded run stays cheap.
"""

from __future__ import annotations

import contextlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from engine.api import RunView, fold
from engine.api import events as ev
from tui.feed import Line, drawable, lines_of

_LOG_MARKS = ('"kind":"log"', '"kind": "log"')


@dataclass
class Past:
    """A finished run as read back: its view and its last log lines."""

    view: RunView | None
    lines: list[Line] = field(default_factory=list)


def load(run_dir: Path, cap: int) -> Past:
    events: list[ev.Event] = []
    logs: deque[str] = deque(maxlen=cap)
    try:
        with (run_dir / "events.jsonl").open(encoding="utf-8") as handle:
            for raw in handle:
                if any(mark in raw for mark in _LOG_MARKS):
                    logs.append(raw)
                    continue
                with contextlib.suppress(ValueError):
                    events.append(ev.parse_event(raw))
    except OSError:
        return Past(None)
    lines: list[Line] = []
    for raw in logs:
        with contextlib.suppress(ValueError):
            log = ev.parse_event(raw)
            if isinstance(log, ev.Log):
                lines += lines_of(log.step.value, log.lines, log.ts.timestamp())
    return Past(fold(events), lines[-cap:])


STEPS = ("setup", "run")
TAIL_BYTES = 64 * 1024


def log_files(run_dir: Path) -> tuple[Path, ...]:
    """The run's log files, in the order the steps ran: the full logs, stdout and stderr
    together, as the job wrote them."""
    return tuple(run_dir / "logs" / f"{step}.log" for step in STEPS)


def tail(run_dir: Path, count: int) -> list[Line]:
    """The last `count` lines of the run's log files, read from their ends only (a flooded
    run's logs can be large). The files do not tell stdout from stderr. Only a newline
    ends a line: a progress update a lone CR ended ("50%\\r\\n" in the file) keeps its CR
    mark, as the live copy of it does, so the view rewrites it in place and joins it."""
    lines: list[Line] = []
    for path, step in zip(log_files(run_dir), STEPS, strict=True):
        with contextlib.suppress(OSError), path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
            raw = handle.read().decode("utf-8", "replace").split("\n")
            if raw[-1] == "":
                raw.pop()  # the file ends with a newline: nothing after it
            if size > TAIL_BYTES:
                raw = raw[1:]  # the first line read may be cut
            lines += [(step, False, drawable(text), 0.0) for text in raw[-count:]]
    return lines[-count:]


def count_lines(paths: tuple[Path, ...]) -> int:
    """How many lines the files hold, counted in chunks."""
    total = 0
    for path in paths:
        with contextlib.suppress(OSError), path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                total += chunk.count(b"\n")
    return total


def search_logs(paths: tuple[Path, ...], term: str) -> tuple[int, str | None]:
    """How many lines of the files hold `term` (any case), and where the first one is
    ('logs/run.log:17'), or (0, None)."""
    lowered, count, first = term.lower(), 0, None
    for path in paths:
        with contextlib.suppress(OSError), path.open(encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                if lowered in line.lower():
                    count += 1
                    first = first or f"{path.parent.name}/{path.name}:{number}"
    return count, first
