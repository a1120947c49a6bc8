"""Append-only files written by one thread, so a busy disk never stalls the event loop.

Every log batch appends to the run's events.jsonl and its step log. A write normally
costs microseconds, but while the disk is busy writing back (a large output landing,
another program's writes) the kernel makes the writer wait, and the writer was the
event loop: tests/bench/loop_stall.py measured stalls of several hundred ms in those
writes, with keys, heartbeats and transfers waiting behind them.

So writes are queued to one writer thread for the whole process. One queue keeps the
order: a file's lines land in the order they were written, and lines of different
files too (a Log event in events.jsonl before its batch in the step log, so the log
never shows a line the datastream lacks, which an adopter's node would replay). Each
`write` is whole lines and goes to the file in one `os.write` (queued writes to the same
file are joined), so a reader never sees a torn line.
A write that fails is raised by the file's next `write` or its `close`: the caller
learns of it one batch late rather than never. `close` returns once everything written
before it is on the file (in the OS's hands, as a flushed write was before).

Nothing on the event loop waits for the disk. What must be on record before something
else happens is ordered behind it instead: `then` calls back on the loop once everything
queued before it is written (the datastream shows a transition to the console only
then), `later` runs other record keeping (the run index's commits, run.json) on the
same thread, in the same order, and `written` is the wait for a task that is about to
act on the world (an operator killed right after must leave records that say what was under way).
`flush` is the blocking wait, for a caller without an event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from agent.fdio import write_all

log = logging.getLogger("swjob.engine")

_BATCH = 4096
"""Queued writes joined into one pass of the writer (same file: one os.write)."""


@dataclass(frozen=True)
class _Flushed:
    """A marker in the queue: set once everything queued before it is on its file."""

    done: threading.Event


@dataclass(frozen=True)
class _Then:
    """A marker in the queue: `callback` is called on `loop` once everything queued before
    it is done."""

    loop: asyncio.AbstractEventLoop
    callback: Callable[[], None]


@dataclass(frozen=True)
class _Later:
    """Record keeping run on the writer thread, in its place in the queue; `settle`, when
    given, finishes it later in the batch, once for every piece of work that names it."""

    work: Callable[[], None]
    settle: Callable[[], None] | None = None


Item = tuple["AppendFile | None", bytes | threading.Event | _Flushed | _Then | _Later]


class AppendFile:
    """One file open for appending through the writer thread."""

    def __init__(self, writer: _Writer, path: Path) -> None:
        self._writer = writer
        # never through a link (the run dir's files are swjob's own); a fifo or a device
        # stands in for a stuck or failing disk in tests, so only links are refused here
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
        self.fd = os.open(path, flags, 0o600)
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
        """`close` without blocking the loop: the writer calls back once the file is
        closed. No worker thread waits for it: a hop to one and back costs ~80 µs of CPU,
        and every run closes two files."""
        self._closing()
        await written()
        self._raise()

    def _closing(self) -> threading.Event:
        done = threading.Event()
        self._writer.put((self, done))
        return done

    def _raise(self) -> None:
        if self.error is not None:
            error, self.error = self.error, None
            raise error


def then(callback: Callable[[], None]) -> None:
    """Call `callback` on the running loop once everything handed to the writer before
    it (every file's lines, every `later`) is done; the loop never waits for it."""
    _WRITER.put((None, _Then(asyncio.get_running_loop(), callback)))


async def written() -> None:
    """Return once everything handed to the writer so far is done, without blocking the
    loop: for a task about to act on the world, whose records must come first."""
    done = asyncio.get_running_loop().create_future()
    then(lambda: done.done() or done.set_result(None))
    await done


def later(work: Callable[[], None], settle: Callable[[], None] | None = None) -> None:
    """Run `work` on the writer thread after everything handed to it before: record
    keeping ordered with the files' lines. `work` reports its own failures (each caller
    knows whom to tell); what it lets escape is logged, never raised into whoever queues
    the next work — another run's, or another part's, which could not act on it.

    `settle` (an equal callable each time, e.g. a bound method) finishes `work` once for
    all the work of the batch that names it: before any other record keeping, and before
    any wait for what came before (`then`, `written`, `flush`) is answered — the index's
    commit of all the rows its saves queued."""
    _WRITER.put((None, _Later(work, settle)))


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
        if loop is None or isinstance(item[1], threading.Event | _Flushed):  # a wait: now
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
        """Consecutive writes to one file become one write; a close comes after them.
        Work to settle (`later`) is settled once, before other record keeping and at the
        batch's end; the waits queued meanwhile are answered after it, in their order."""
        pending: AppendFile | None = None
        chunks: list[bytes] = []
        settles: dict[Callable[[], None], None] = {}  # in order, each once
        waits: list[_Flushed | _Then] = []
        for handle, item in batch:
            if pending is not None and (handle is not pending or not isinstance(item, bytes)):
                _write_all(pending, b"".join(chunks))
                pending, chunks = None, []
            if isinstance(item, bytes):
                pending = handle
                chunks.append(item)
            elif isinstance(item, _Flushed | _Then):
                waits.append(item)
                if not settles:
                    _answer(waits)
            elif isinstance(item, _Later):
                if item.settle is None:
                    _settle(settles, waits)
                _run_later(item.work)
                if item.settle is not None:
                    settles[item.settle] = None
            elif handle is not None:
                _close(handle, item)
        if pending is not None:
            _write_all(pending, b"".join(chunks))
        _settle(settles, waits)


def _run_later(work: Callable[[], None]) -> None:
    try:
        work()
    except Exception:  # a bug in `work`: the writer thread goes on with the rest
        log.exception("record keeping on the writer thread failed")


def _settle(settles: dict[Callable[[], None], None], waits: list[_Flushed | _Then]) -> None:
    for settle in settles:
        _run_later(settle)
    settles.clear()
    _answer(waits)


def _answer(waits: list[_Flushed | _Then]) -> None:
    """Answer `waits` in order; a loop's callbacks are handed over in one wake-up."""
    calls: dict[asyncio.AbstractEventLoop, list[Callable[[], None]]] = {}
    for wait in waits:
        if isinstance(wait, _Flushed):
            wait.done.set()
        else:
            calls.setdefault(wait.loop, []).append(wait.callback)
    waits.clear()
    for loop, callbacks in calls.items():
        with contextlib.suppress(RuntimeError):  # its loop has closed meanwhile
            loop.call_soon_threadsafe(_call_each, callbacks)


def _call_each(callbacks: list[Callable[[], None]]) -> None:
    """On the loop: each callback, as if each had been handed over alone (one that raises
    is the loop's to report, and the others are still called)."""
    for callback in callbacks:
        try:
            callback()
        except Exception as exc:
            context = {"message": "callback after the writer thread failed", "exception": exc}
            asyncio.get_running_loop().call_exception_handler(context)


def _write_all(handle: AppendFile, data: bytes) -> None:
    if handle.closed or handle.error is not None:
        return
    try:
        write_all(handle.fd, data)
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
