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
from tui.feed import Line, lines_of

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
                lines += lines_of(log.step.value, log.lines)
    return Past(fold(events), lines[-cap:])
