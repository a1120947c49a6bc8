"""The tail of a run's on-disk log, for runs the console did not watch live (history)."""

from __future__ import annotations

from pathlib import Path

from agent.protocol import Stream
from tui.feed import Line

TAIL_BYTES = 512 * 1024


def tail(path: Path, step: str, limit: int) -> list[Line]:
    """The last `limit` lines of `path` (read from its end, never the whole file)."""
    try:
        with path.open("rb") as handle:
            size = handle.seek(0, 2)
            handle.seek(max(0, size - TAIL_BYTES))
            data = handle.read()
    except OSError:
        return []
    lines = data.decode("utf-8", "replace").splitlines()
    if len(data) == TAIL_BYTES and lines:
        lines = lines[1:]  # the first line was cut by the seek
    return [Line(step, Stream.STDOUT, text) for text in lines[-limit:]]
