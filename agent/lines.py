"""Turning a child's raw output into redacted, batched log lines.

A job may print anything: invalid UTF-8, `\\r` progress bars, a megabyte without a
newline, or 200k lines in a second. `LineSplitter` makes lines out of that (each
`\\r\\n`, `\\r` or `\\n` ends a line, and one a lone `\\r` ended keeps it at its end, so a
reader can rewrite it in place as a terminal does: a progress bar is one line, not one per
update; a line longer than `max_line` characters is cut
into pieces; bad bytes become U+FFFD) and redacts them (a long line is cut only once
`redact.overlap` more characters have arrived past the cut, and never through a
secret, so one straddling the cut is masked whole). `LogBatcher` groups lines into
`LogBatch` events — at most every `interval` seconds, every `max_lines` lines or
`max_bytes` of encoded frame, so a flood becomes a few hundred frames, each far below
the protocol's frame limit however late the timer fires and whatever the lines hold
(a control character is 6 bytes of JSON) — and writes the same lines to the step's
`StepLog`.

The events are what matters; the node-side file is a copy. A job may fill the
node's disk, so a failing log write never stops the events: it is reported once,
as a stderr line in the stream, and the file is given up.

Log file convention: stdout lines are written as they are; stderr lines start with
`STDERR_PREFIX` ("[stderr] "), so the two can be told apart in one file.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from agent.protocol import AgentEvent, LogBatch, Step, Stream
from agent.redact import Redactor

MAX_LINE = 64 * 1024
# a frame's worth of lines for the operator to decode and store at once: larger batches
# held its event loop (and the console on it) for tens of ms per frame in a flood
MAX_BATCH_LINES = 250
MAX_BATCH_BYTES = 4 * 1024 * 1024  # of encoded frame: a quarter of protocol.MAX_FRAME
_JSON_PER_CHAR = 6  # the most one character takes in a frame: a control char is "\\u0001"
_JSON_PER_LINE = 32  # '{"stream":"stderr","text":""},'
STDERR_PREFIX = "[stderr] "
LOG_FAILED = "[swjob] node log write failed: "
_ENDS = re.compile(r"(\r\n|\r|\n)")


def _split(text: str) -> tuple[list[str], str]:
    """The whole lines of `text` (one a lone CR ended keeps it) and what is left after."""
    pieces = _ENDS.split(text)
    whole = zip(pieces[0:-1:2], pieces[1::2], strict=True)
    return [line + ("\r" if end == "\r" else "") for line, end in whole], pieces[-1]


class LineSplitter:
    """Incremental bytes → complete, redacted lines, for one stream."""

    def __init__(self, max_line: int = MAX_LINE, redact: Redactor | None = None) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._pending = ""
        self._max = max_line
        self._redact = redact or Redactor()

    def feed(self, data: bytes) -> list[str]:
        text = self._pending + self._decoder.decode(data)
        # A trailing "\r" may be the first half of "\r\n": hold it until the next piece.
        held = "\r" if text.endswith("\r") else ""
        parts, rest = _split(text[: len(text) - len(held)])
        self._pending = rest + held
        lines = self._cap(parts)
        while len(self._pending) > self._max + self._redact.overlap:
            piece, self._pending = self._redact.cut(self._pending, self._max)
            lines.append(piece)
        return lines

    def finish(self) -> list[str]:
        """Whatever is left at end of stream, including a final line without a newline."""
        text = self._pending + self._decoder.decode(b"", final=True)
        self._pending = ""
        if not text:
            return []
        parts, rest = _split(text)
        return self._cap([*parts, rest] if rest else parts)

    def _cap(self, parts: list[str]) -> list[str]:
        """Whole lines, redacted, then cut to `max_line`."""
        parts = [self._redact(p) for p in parts] if self._redact else parts
        if all(len(p) <= self._max for p in parts):
            return parts
        out: list[str] = []
        for p in parts:
            out.extend(p[i : i + self._max] for i in range(0, max(len(p), 1), self._max))
        return out


class StepLog:
    """The node-side log file of one step; writing to it never raises.

    Unbuffered, so a failed write leaves nothing queued that a later write or the
    close would retry. After the first failure (or if the file cannot even be
    opened) the file is given up and `write` hands back a note, once, to report.
    """

    def __init__(self, path: Path) -> None:
        self._file: BinaryIO | None = None
        self._note: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._file = path.open("ab", buffering=0)
        except OSError as exc:
            self._failed(exc)

    def write(self, data: bytes) -> str | None:
        """Append `data`; the failure note the first time the log cannot be written."""
        if self._file is not None:
            try:
                write_all(self._file, data)
            except OSError as exc:
                self._failed(exc)
        note, self._note = self._note, None
        return note

    def close(self) -> None:
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None

    def _failed(self, exc: OSError) -> None:
        self.close()
        self._note = LOG_FAILED + (exc.strerror or str(exc))


def write_all(file: BinaryIO, data: bytes) -> None:
    """Write all of `data` to an unbuffered file: a short write (a disk filling up) is
    followed by another, which then raises the real error."""
    view = memoryview(data)
    while view:
        view = view[file.write(view) :]


class LogBatcher:
    """Collects one step's lines and emits them as LogBatch events, also appending to its log."""

    def __init__(
        self,
        step: Step,
        emit: Callable[[AgentEvent], object],
        log: StepLog,
        *,
        max_lines: int = MAX_BATCH_LINES,
        max_bytes: int = MAX_BATCH_BYTES,
        interval: float = 0.05,
    ) -> None:
        self._step = step
        self._emit = emit
        self._log = log
        self._max_lines = max_lines
        self._max_bytes = max_bytes
        self._interval = interval
        self._lines: list[tuple[Stream, str]] = []
        self._bytes = 0  # an upper bound of the lines' encoded size
        self._timer: asyncio.TimerHandle | None = None

    def add(self, stream: Stream, text: str) -> None:
        self._lines.append((stream, text))
        self._bytes += len(text) * _JSON_PER_CHAR + _JSON_PER_LINE
        if len(self._lines) >= self._max_lines or self._bytes >= self._max_bytes:
            self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._interval, self.flush)

    def flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._lines:
            return
        lines, self._lines, self._bytes = self._lines, [], 0
        note = self._log.write("".join(_log_text(stream, text) for stream, text in lines).encode())
        if note is not None:
            lines.append((Stream.STDERR, note))
        # One validation of plain dicts runs in pydantic-core: ~4x faster than a model per line.
        raw = [{"stream": stream, "text": text} for stream, text in lines]
        self._emit(LogBatch.model_validate({"seq": 0, "step": self._step, "lines": raw}))


def _log_text(stream: Stream, text: str) -> str:
    return f"{STDERR_PREFIX}{text}\n" if stream is Stream.STDERR else f"{text}\n"
