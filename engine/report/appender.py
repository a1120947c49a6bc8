"""Append-only files written by one thread, so a busy disk never stalls the event loop.

Every log batch appends to the run's events.jsonl and its step log. A write normally
costs microseconds, but while the disk is busy writing back (a large output landing,
another program's writes) the kernel makes the writer wait, and the writer was the
event loop: tests/bench/loop_stall.py measured stalls of several hundred ms in those
writes, with keys, heartbeats and transfers waiting behind them.

So writes are queued to one writer thread for the whole process. One queue keeps the
order: a file's lines land in the order they were written, and lines of different
files too (a step log's batch before its Log event in events.jsonl, which adoption
relies on). Each `write` is whole lines and goes to the file in one `os.write`
(queued writes to the same file are joined), so a reader never sees a torn line.
A write that fails is raised by the file's next `write` or its `close`: the caller
learns of it one batch late rather than never. `close` returns once everything written
before it is on the file (in the OS's hands, as a flushed write was before); `flush`
is the same wait without closing, for the few lines that must be on record before the
caller goes on (a run's transitions: an operator killed right after must leave a
journal that says what was under way).
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
from dataclasses import dataclass
from pathlib import Path

_BATCH = 4096
"""Queued writes joined into one pass of the writer (same file: one os.write)."""


@dataclass(frozen=True)
class _Flushed:
    """A marker in the queue: set once everything queued before it is on its file."""

    done: threading.Event


Item = tuple["AppendFile", bytes | threading.Event | _Flushed]


class AppendFile:
    """One file open for appending through the writer thread."""

    def __init__(self, writer: _Writer, path: Path) -> None:
        self._writer = writer
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        self.error: OSError | None = None
        self.closed = False

    def write(self, text: str) -> None:
        """Queue whole lines; returns at once."""
        self._raise()
        self._writer.put((self, text.encode("utf-8")))

    def close(self) -> None:
        """Wait until everything written so far is on the file, then close it (blocks the
        calling thread: from the event loop, use `aclose`)."""
        self._closing().wait()
        self._raise()

    def flush(self) -> None:
        """Wait until everything written so far is on the file (blocks the calling thread:
        only for lines worth that, not for a flood's)."""
        marker = _Flushed(threading.Event())
        self._writer.put((self, marker))
        marker.done.wait()
        self._raise()

    async def aclose(self) -> None:
        await asyncio.to_thread(self._closing().wait)
        self._raise()

    def _closing(self) -> threading.Event:
        done = threading.Event()
        self._writer.put((self, done))
        return done

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


class _Writer:
    """The writer thread and its queue. Writes made during one turn of an event loop are
    handed over together at the end of it: one wake-up of the thread (and one hand-over
    of the GIL) per turn, however many events a log flood publishes in it."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[Item]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending: list[Item] = []
        self._thread: threading.Thread | None = None

    def put(self, item: Item) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="swjob-append", daemon=True)
                self._thread.start()
            first = not self._pending
            self._pending.append(item)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or not isinstance(item[1], bytes):  # a wait: hand over now
            self._hand_over()
        elif first:
            loop.call_soon(self._hand_over)

    def _hand_over(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            self._queue.put(batch)

    def _run(self) -> None:
        while True:
            batch = self._queue.get()
            while len(batch) < _BATCH:
                try:
                    batch += self._queue.get_nowait()
                except queue.Empty:
                    break
            self._write(batch)

    def _write(self, batch: list[Item]) -> None:
        """Consecutive writes to one file become one write; a close comes after them."""
        pending: AppendFile | None = None
        chunks: list[bytes] = []
        for handle, item in batch:
            if pending is not None and (handle is not pending or not isinstance(item, bytes)):
                _write_all(pending, b"".join(chunks))
                pending, chunks = None, []
            if isinstance(item, bytes):
                pending = handle
                chunks.append(item)
            elif isinstance(item, _Flushed):
                item.done.set()
            else:
                _close(handle, item)
        if pending is not None:
            _write_all(pending, b"".join(chunks))


def _write_all(handle: AppendFile, data: bytes) -> None:
    if handle.closed or handle.error is not None:
        return
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(handle.fd, view) :]
    except OSError as exc:
        handle.error = exc


def _close(handle: AppendFile, done: threading.Event) -> None:
    if not handle.closed:
        handle.closed = True
        try:
            os.close(handle.fd)
        except OSError as exc:
            handle.error = handle.error or exc
    done.set()


_WRITER = _Writer()


def open_append(path: Path) -> AppendFile:
    """`path` open for appending through the process's writer thread (created 0600)."""
    return AppendFile(_WRITER, path)
